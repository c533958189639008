#!/usr/bin/env bash
# Installs the chat page's browser client, centrifuge-js at the version
# package-lock.json pins, into web/node_modules with `npm ci`. The chat nodes
# serve node_modules/centrifuge/dist/centrifuge.js; nothing is fetched from a
# CDN at run time. Installs npm with apt-get when it is missing and this runs
# as root on Debian/Ubuntu; otherwise prints the command to run and fails.
set -euo pipefail
cd "$(dirname "$0")"

if ! command -v npm >/dev/null 2>&1; then
	cmd="apt-get update && apt-get install -y npm"
	if [ "$(id -u)" = "0" ] && command -v apt-get >/dev/null 2>&1; then
		echo "chat: npm not found; installing: $cmd" >&2
		export DEBIAN_FRONTEND=noninteractive
		apt-get update -qq
		apt-get install -y -qq npm >/dev/null
	else
		echo "chat: npm is needed to install the page's client library." >&2
		echo "chat: install it, for example on Debian/Ubuntu with:" >&2
		echo "    sudo sh -c '$cmd'" >&2
		exit 1
	fi
fi

# Only the prebuilt browser bundle is used: no package needs its install scripts.
npm ci --ignore-scripts --no-audit --no-fund --loglevel=error
# npm keeps the tarball's 1985 timestamps; make compares this file's time
# with package-lock.json's to know whether to install again.
touch node_modules/centrifuge/dist/centrifuge.js
