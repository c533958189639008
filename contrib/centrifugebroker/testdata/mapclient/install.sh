#!/usr/bin/env bash
# Installs the map client that TestMapWebSocket (map_ws_test.go) runs:
# centrifuge-js and ws at the versions package-lock.json pins, into
# node_modules with `npm ci`. Installs nodejs and npm with apt-get when
# missing and this runs as root on Debian/Ubuntu; otherwise prints the
# command to run and fails. Idempotent; .ci/run calls it on every run.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v node >/dev/null 2>&1 || ! command -v npm >/dev/null 2>&1; then
	cmd="apt-get update && apt-get install -y nodejs npm"
	if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
		echo "mapclient: node or npm not found; installing: $cmd" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq nodejs npm >/dev/null
	else
		echo "mapclient: node and npm are needed to run the map client." >&2
		echo "mapclient: install them, for example on Debian/Ubuntu with:" >&2
		echo "    sudo sh -c '$cmd'" >&2
		exit 1
	fi
fi

# Neither package needs its install scripts (ws's native add-ons are optional).
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
# npm keeps the tarballs' 1985 timestamps; make compares this file's time
# with package-lock.json's to know whether to install again.
touch node_modules/centrifuge/package.json
