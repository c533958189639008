#!/usr/bin/env bash
# Runs the server-sensitive suites against each Redis-compatible server of a
# list (see the Makefile's test-matrix target and docs/SERVERS.md), one
# pass/fail line per server with its time, then updates (or, with
# TESTED_ON=check, checks) the "Tested on" table of docs/SERVERS.md and of
# README.md when it has the markers.
#
#   scripts/test-matrix.sh [server ...]
#
# A server is a folder holding redis-server and redis-cli, or the word
# "path" for the ones on PATH. Without arguments: every folder of the
# servers folder, which is $SERVERS_DIR when set, else the first that
# exists of ../shared/servers beside the repository and ../shared/servers
# beside the repository it was cloned from (a CI clone of /work/main).
# A server folder that is missing is reported and skipped; so is a missing
# servers folder. Logs go to $MATRIX_LOGS (default bin/matrix/).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
GO=${GO:-go}
logs=${MATRIX_LOGS:-$repo/bin/matrix}
tested_on=${TESTED_ON:-write}
chaos_duration=${CHAOS_DURATION:-1m}
mkdir -p "$logs"

# What runs per server; the "Tested on" table's third column says the same.
# The library's packages and the conformance suite without -race (make test
# runs them with -race on the PATH server), the Centrifuge broker's module,
# and the chaos soak on both engines with every fault.
packages=(./cluster ./sharded ./brokertest)
what_ran="${packages[*]}, contrib/centrifugebroker, chaos ${chaos_duration} per engine (every fault)"
# The tests mostly wait (failovers, timeouts, heartbeats): a run of them
# keeps 2 cores about a quarter busy. So two test binaries run at once, as
# go test -p 2 would, but balanced: the cluster package (the longest,
# about 4 minutes) beside the sharded package, the conformance suite and
# contrib/centrifugebroker one after the other (about as long). Five at
# once (each package in two halves) saved a minute more, but it and three
# at once failed timing-bound tests on a loaded machine. The soak runs
# alone afterwards, since its loss windows are what it checks.
servers_dir() {
	if [ -n "${SERVERS_DIR:-}" ]; then
		echo "$SERVERS_DIR"
		return
	fi
	local cand=("$repo/../shared/servers")
	local origin
	origin=$(git -C "$repo" config --get remote.origin.url 2>/dev/null || true)
	origin=${origin#file://}
	if [ -n "$origin" ] && [ -d "$origin" ]; then
		cand+=("$origin/../shared/servers")
	fi
	for c in "${cand[@]}"; do
		if [ -d "$c" ]; then
			(cd "$c" && pwd)
			return
		fi
	done
	echo "${cand[0]}"
}

servers=("$@")
if [ ${#servers[@]} -eq 0 ]; then
	dir=$(servers_dir)
	if [ ! -d "$dir" ]; then
		echo "test-matrix: SKIP all: no servers folder at $dir (set SERVERS_DIR=... or SERVERS=...); nothing to run"
		exit 0
	fi
	for d in "$dir"/*/; do
		[ -e "$d" ] && servers+=("${d%/}")
	done
	if [ ${#servers[@]} -eq 0 ]; then
		echo "test-matrix: SKIP all: $dir holds no server folders; nothing to run"
		exit 0
	fi
fi

# run_server runs every suite against one server, with its log in $2, and
# sets $failed_steps to those that failed; the server's name and version
# are in $name and $version. Every step runs even after one failed, so one
# run shows all there is to see on a server.
run_server() {
	local srv=$1 log=$2 envs=()
	if [ "$srv" != path ]; then
		envs=(SHARDCAST_REDIS_DIR="$srv" PATH="$srv:$PATH")
	fi
	failed_steps=()
	: >"$log"
	local parts=() labels=() pids=() i
	part() {
		labels+=("$1")
		parts+=("$log.part${#parts[@]}")
		shift
		"$@" >"${parts[-1]}" 2>&1 &
		pids+=($!)
	}
	local t=(env "${envs[@]}" $GO test -count=1 -timeout 20m -v)
	part "go test ./cluster" "${t[@]}" ./cluster
	part "go test ./sharded; ./brokertest; contrib/centrifugebroker" bash -c \
		'"$@" ./sharded; a=$?; "$@" ./brokertest || a=1; cd contrib/centrifugebroker && "$@" ./... && exit $a' - "${t[@]}"
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed_steps+=("${labels[$i]}")
		{ echo "== ${labels[$i]}"; cat "${parts[$i]}"; } >>"$log"
		rm -f "${parts[$i]}"
	done
	echo "== chaos $chaos_duration" >>"$log"
	env -C bench "${envs[@]}" $GO run ./cmd/chaos -duration "$chaos_duration" >>"$log" 2>&1 || failed_steps+=("chaos $chaos_duration")
	# Every test binary and the soak log the server they ran; all must
	# name this one.
	local want="redistest: server $name $version (" other
	other=$(grep '^redistest: server ' "$log" | grep -v -F "$want" | sort -u)
	if [ -n "$other" ]; then
		echo "test-matrix: some runs used another server: $other" >>"$log"
		failed_steps+=("server check")
	elif ! grep -q -F "$want" "$log"; then
		echo "test-matrix: no run logged its server" >>"$log"
		failed_steps+=("server check")
	fi
	[ ${#failed_steps[@]} -eq 0 ]
}

results=$logs/results.tsv
: >"$results"
failed=0
for srv in "${servers[@]}"; do
	if [ "$srv" = path ]; then
		bin=$(command -v redis-server || true)
		cli=$(command -v redis-cli || true)
		label="PATH ($bin)"
	else
		bin=$srv/redis-server
		cli=$srv/redis-cli
		label=$srv
	fi
	if [ -z "$bin" ] || [ ! -x "$bin" ] || [ -z "$cli" ] || [ ! -x "$cli" ]; then
		echo "test-matrix: SKIP $label: no redis-server and redis-cli there"
		continue
	fi
	name='' version=''
	read -r name version < <("$bin" --version | sed -n 's/^\([^ ]*\) server v=\([0-9.]*\).*/\1 \2/p')
	if [ -z "$version" ]; then
		echo "test-matrix: FAIL $label: cannot read the version in: $("$bin" --version 2>&1 | head -1)"
		failed=1
		continue
	fi
	log=$logs/$(echo "$name-$version" | tr 'A-Z' 'a-z').log
	began=$(date +%s)
	if run_server "$srv" "$log"; then
		status=PASS
	else
		status=FAIL
		failed=1
	fi
	took=$(($(date +%s) - began))
	printf 'test-matrix: %s %s %s (%s) in %dm%02ds; log %s\n' "$status" "$name" "$version" "$label" $((took / 60)) $((took % 60)) "$log"
	if [ $status = FAIL ]; then
		printf '    failed: %s\n' "${failed_steps[@]}"
		# The failing tests and subtests, with the figures and the first
		# errors each printed, so that a CI summary tells why without the log.
		grep -E -- '^ *--- FAIL|^FAIL|^panic:|^chaos: |figures: |outside every|[0-9]+ duplicates$|Error:|Messages:|silent' "$log" | head -40 | cut -c1-400 | sed 's/^/    /'
	fi
	printf '%s\t%s\t%s\t%s\n' "$name" "$version" "$status" "$what_ran" >>"$results"
done

table_status=0
if [ -s "$results" ]; then
	docs=(docs/SERVERS.md)
	[ -f README.md ] && grep -q '<!-- tested-on:begin -->' README.md && docs+=(README.md)
	scripts/tested-on.sh "$tested_on" "$results" "${docs[@]}" || table_status=$?
fi
if [ $failed -ne 0 ] || [ $table_status -ne 0 ]; then
	exit 1
fi
