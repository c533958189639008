#!/usr/bin/env bash
# Runs the server-sensitive suites against each Redis-compatible server of
# the matrix (docs/SERVERS.md), one pass/fail line per server with its
# time, then updates (or, with TESTED_ON=check, checks) the "Tested on"
# table of docs/SERVERS.md and of README.md when it has the markers.
#
#   scripts/test-matrix.sh [server ...]
#
# A server is a name of scripts/ensure-servers.sh (valkey-9.1.2), a folder
# holding redis-server and redis-cli, or the word "path" for the ones on
# PATH. Without arguments: every server of scripts/ensure-servers.sh,
# which fetches what its cache lacks from Debian's packages.
# With MATRIX_STRICT=1 (.ci/run sets it) a server that cannot be had is a
# failure; otherwise it is reported and skipped. Logs go to $MATRIX_LOGS
# (default bin/matrix/).
set -uo pipefail
cd "$(dirname "$0")/.."
repo=$(pwd)
GO=${GO:-go}
logs=${MATRIX_LOGS:-$repo/bin/matrix}
tested_on=${TESTED_ON:-write}
strict=
[ "${MATRIX_STRICT:-0}" = 1 ] && strict=1
mkdir -p "$logs"

# What runs per server, by its folder's name (docs/SERVERS.md says why):
#   full    ./cluster ./sharded ./brokertest and contrib/centrifugebroker
#           without -race, then the chaos soak for 1m per engine with
#           every fault: the newest Redis and the newest Valkey, and any
#           folder the matrix does not know.
#   faults  the engines' fault tests (kills, pauses, failovers, slot moves,
#           restarts, re-layouts under faults, dated losses) and the tests
#           that pin server differences, then the soak for 30s per engine:
#           the servers between.
#   chaos   the soak only, 30s per engine: the server make test already
#           runs every suite on, with -race (Debian 12's Redis 7.0.15).
# CHAOS_DURATION overrides the soak's time per engine in every tier.
declare -A tier_of=([redis-8.0.6]=full [valkey-9.1.2]=full
	[redis-8.0.2]=faults [valkey-8.1.1]=faults [valkey-8.0.1]=faults
	[redis-7.0.15]=chaos)
# The fault tests: every test of ./cluster and ./sharded that kills,
# freezes, restarts, fails over or moves what a broker is subscribed to;
# and those that pin what differs between servers.
fault_tests='Failover|Frozen|Paused|Pause|Kill|Killed|Restart|Resumed|SlotMove|AddRemove|Migrat|Storm|Faults|Silent|Stalled|Lost|DatesLoss|Sentinel|ServerDiff|NoBroadcast'
# The tests mostly wait (failovers, timeouts, heartbeats): a run of them
# keeps 2 cores about a quarter busy. So two test binaries run at once, as
# go test -p 2 would, but balanced: the cluster package (the longest,
# about 4 minutes) beside the sharded package, the conformance suite and
# contrib/centrifugebroker one after the other (about as long). Five at
# once (each package in two halves) saved a minute more, but it and three
# at once failed timing-bound tests on a loaded machine. The soak runs
# alone afterwards, since its loss windows are what it checks.

# server_id prints the name and version a redis-server binary reports.
server_id() {
	"$1" --version 2>/dev/null | sed -n 's/^\([^ ]*\) server v=\([0-9.]*\).*/\1 \2/p'
}

# missing reports a server that cannot be had: a failure when strict.
missing() {
	skipped=1
	if [ -n "$strict" ]; then
		echo "test-matrix: FAIL $1"
		failed=1
	else
		echo "test-matrix: SKIP $1"
	fi
}

failed=0 skipped=0
servers=()
for arg in "$@"; do
	if [ "$arg" = path ] || [ -d "$arg" ]; then
		servers+=("$arg")
	elif dir=$(scripts/ensure-servers.sh "$arg"); then
		servers+=("$dir")
	else
		missing "$arg: scripts/ensure-servers.sh could not provide it (above)"
	fi
done
if [ $# -eq 0 ]; then
	if list=$(scripts/ensure-servers.sh); then
		mapfile -t servers <<<"$list"
	else
		missing "the matrix's servers: scripts/ensure-servers.sh could not provide them all (above)"
		# Whatever it did provide still runs.
		for d in "${SHARDCAST_SERVERS_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/shardcast/servers}"/*/; do
			[ -x "$d/redis-server" ] && servers+=("${d%/}")
		done
	fi
fi

# run_server runs the suites of tier $3 against one server, with its log
# in $2, and sets $failed_steps to those that failed and $what_ran to what
# ran; the server's name and version are in $name and $version. Every
# step runs even after one failed, so one run shows all there is to see.
run_server() {
	local srv=$1 log=$2 tier=$3 envs=() chaos=${CHAOS_DURATION:-30s}
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
	local t=(env "${envs[@]}" FAULTS="$fault_tests" $GO test -count=1 -timeout 20m -v)
	case $tier in
	full)
		chaos=${CHAOS_DURATION:-1m}
		what_ran="./cluster ./sharded ./brokertest, contrib/centrifugebroker, bench/cmd/chaos tests, chaos $chaos per engine (every fault)"
		part "go test ./cluster" "${t[@]}" ./cluster
		part "go test ./sharded; ./brokertest; contrib/centrifugebroker; bench/cmd/chaos" bash -c \
			'"$@" ./sharded; a=$?; "$@" ./brokertest || a=1; (cd bench && "$@" ./cmd/chaos) || a=1; cd contrib/centrifugebroker && "$@" ./... && exit $a' - "${t[@]}"
		;;
	faults)
		what_ran="fault tests of ./cluster ./sharded, chaos $chaos per engine (every fault)"
		part "go test -run FAULTS ./cluster" "${t[@]}" -run "$fault_tests" ./cluster
		part "go test -run FAULTS ./sharded; bench/cmd/chaos output buffers" bash -c \
			'"$@" -run "$FAULTS" ./sharded; a=$?; cd bench && "$@" -run OutputBuffer ./cmd/chaos && exit $a' - "${t[@]}"
		;;
	*)
		what_ran="chaos $chaos per engine (every fault); make test runs every suite with -race on it"
		;;
	esac
	for i in "${!pids[@]}"; do
		wait "${pids[$i]}" || failed_steps+=("${labels[$i]}")
		{ echo "== ${labels[$i]}"; cat "${parts[$i]}"; } >>"$log"
		rm -f "${parts[$i]}"
	done
	echo "== chaos $chaos" >>"$log"
	env -C bench "${envs[@]}" $GO run ./cmd/chaos -duration "$chaos" >>"$log" 2>&1 || failed_steps+=("chaos $chaos")
	# The soak picks its faults in a random order, so a short one may
	# never reach the atomic migration: a server that has it gets a soak
	# of its own of that and the other slot moves.
	if [ "$name" = Valkey ] && [ "${version%%.*}" -ge 9 ]; then
		echo "== chaos 20s atomicmove" >>"$log"
		env -C bench "${envs[@]}" $GO run ./cmd/chaos -engine cluster -faults atomicmove,moveslot,clientkill -duration 20s >>"$log" 2>&1 ||
			failed_steps+=("chaos 20s atomicmove")
		what_ran="$what_ran, chaos 20s of atomicmove"
	fi
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
		missing "$label: no redis-server and redis-cli there"
		continue
	fi
	name='' version=''
	read -r name version < <(server_id "$bin")
	if [ -z "$version" ]; then
		echo "test-matrix: FAIL $label: cannot read the version in: $("$bin" --version 2>&1 | head -1)"
		failed=1
		continue
	fi
	log=$logs/$(echo "$name-$version" | tr 'A-Z' 'a-z').log
	began=$(date +%s)
	tier=${tier_of[$(basename "$srv")]:-full}
	# The chaos share holds only while make test runs on the same server.
	if [ "$tier" = chaos ] && [ "$(server_id "$bin")" != "$(server_id redis-server)" ]; then
		tier=faults
	fi
	if run_server "$srv" "$log" "$tier"; then
		status=PASS
	else
		status=FAIL
		failed=1
	fi
	took=$(($(date +%s) - began))
	printf 'test-matrix: %s %s %s (%s, %s) in %dm%02ds; log %s\n' "$status" "$name" "$version" "$label" "$tier" $((took / 60)) $((took % 60)) "$log"
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
	# A run of the whole matrix, with no server skipped, writes the whole
	# table.
	exact=
	[ $# -eq 0 ] && [ $skipped -eq 0 ] && exact=1
	EXACT=$exact scripts/tested-on.sh "$tested_on" "$results" "${docs[@]}" || table_status=$?
fi
if [ $failed -ne 0 ] || [ $table_status -ne 0 ]; then
	exit 1
fi
