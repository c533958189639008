#!/usr/bin/env bash
# Makes sure redis-server and redis-cli (Redis 7+, for sharded Pub/Sub) are on PATH.
# Installs them with apt-get when running as root on Debian/Ubuntu; otherwise
# prints the exact command to run and fails.
set -euo pipefail

# too_old fails, saying what to do, when redis-server is older than 7.
too_old() {
	local v
	v=$(redis-server --version | sed -n 's/.*v=\([0-9][0-9]*\)\..*/\1/p')
	if [ -n "$v" ] && [ "$v" -lt 7 ]; then
		echo "shardcast: redis-server $(redis-server --version | sed -n 's/.*v=\([^ ]*\).*/\1/p') is too old: Redis 7 or newer is needed (sharded Pub/Sub)." >&2
		echo "shardcast: install a newer one, for example from https://packages.redis.io (Debian 12 and Ubuntu 24.04 ship Redis 7)." >&2
		exit 1
	fi
}

if command -v redis-server >/dev/null 2>&1 && command -v redis-cli >/dev/null 2>&1; then
	too_old
	exit 0
fi

cmd="apt-get update && apt-get install -y redis-server redis-tools"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
	echo "shardcast: redis-server not found; installing: $cmd" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq redis-server redis-tools >/dev/null
	too_old
	exit 0
fi

echo "shardcast: redis-server and redis-cli are needed (Redis 7 or newer)." >&2
echo "shardcast: install them, for example on Debian/Ubuntu with:" >&2
echo "    sudo sh -c '$cmd'" >&2
exit 1
