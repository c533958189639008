#!/usr/bin/env bash
# Makes sure a C compiler is on PATH: go test -race needs cgo. Installs gcc
# with apt-get when running as root on Debian/Ubuntu; otherwise prints the
# exact command to run and fails.
set -euo pipefail

if command -v "$(go env CC)" >/dev/null 2>&1; then
	exit 0
fi

cmd="apt-get update && apt-get install -y gcc libc6-dev"
if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
	echo "shardcast: no C compiler (go test -race needs one); installing: $cmd" >&2
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -qq
	apt-get install -y -qq gcc libc6-dev >/dev/null
	exit 0
fi

echo "shardcast: go test -race needs a C compiler ($(go env CC)); install one, for example on Debian/Ubuntu with:" >&2
echo "    sudo sh -c '$cmd'" >&2
exit 1
