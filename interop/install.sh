#!/usr/bin/env bash
# Installs what the interop tests need (interop/interop_test.go): a python3
# that imports xxhash and redis, and interop/node/node_modules (xxhash-wasm,
# ioredis) from package-lock.json. Idempotent; safe to run on every CI run.
#
# Python: an interpreter that already has both packages is used as it is.
# Otherwise, as root on Debian/Ubuntu, apt-get installs python3-xxhash and
# python3-redis (Debian 12 ships the versions pinned in
# python/requirements.txt); anywhere else a virtualenv at
# interop/python/.venv gets `pip install -r python/requirements.txt`.
# Set SHARDCAST_INTEROP_PIP=1 to take the virtualenv route as root too.
# Node: node and npm come from apt-get when missing and root; then `npm ci`.
set -euo pipefail
cd "$(dirname "$0")"

can_apt() { [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; }
apt_updated=
apt_install() {
	export DEBIAN_FRONTEND=noninteractive
	if [ -z "$apt_updated" ]; then apt-get update -qq; apt_updated=1; fi
	echo "interop: apt-get install $*" >&2
	apt-get install -y -qq "$@" >/dev/null
}

python_with_packages() {
	local py
	for py in python/.venv/bin/python "$(command -v python3 || true)" /usr/bin/python3; do
		if [ -n "$py" ] && [ -x "$py" ] && "$py" -c "import xxhash, redis" 2>/dev/null; then
			echo "$py"
			return 0
		fi
	done
	return 1
}

install_python() {
	if py=$(python_with_packages); then
		echo "interop: python ready: $py" >&2
		return 0
	fi
	if can_apt && [ -z "${SHARDCAST_INTEROP_PIP:-}" ]; then
		apt_install python3 python3-xxhash python3-redis
	else
		if ! python3 -m venv --help >/dev/null 2>&1 || ! python3 -c "import ensurepip" 2>/dev/null; then
			if can_apt; then apt_install python3-venv python3-pip; fi
		fi
		python3 -m venv python/.venv
		python/.venv/bin/pip install --quiet -r python/requirements.txt
	fi
	if py=$(python_with_packages); then
		echo "interop: python ready: $py" >&2
		return 0
	fi
	echo "interop: could not get a python3 with xxhash and redis; install them with" >&2
	echo "    python3 -m pip install --user -r interop/python/requirements.txt" >&2
	return 1
}

install_node() {
	if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
		if can_apt; then
			apt_install nodejs npm
		else
			echo "interop: node and npm are needed; on Debian/Ubuntu: sudo apt-get install -y nodejs npm" >&2
			return 1
		fi
	fi
	(cd node && npm ci --no-audit --no-fund --loglevel=error)
	echo "interop: node ready: $(command -v node) $(node --version)" >&2
}

status=0
install_python || status=1
install_node || status=1
exit "$status"
