#!/usr/bin/env bash
# The online re-layout on a running fleet, end to end, as separate processes
# (docs/RELAYOUT.md, "Running it"), on both engines:
# - sharded: examples/fleet starts 3 local Redis instances and 3 nodes on
#   the first 2 that publish and count numbered messages; `shardcast
#   relayout -shards ...` then moves them to all 3 while they keep
#   publishing;
# - cluster: examples/fleet -engine cluster starts a local 3-master Redis
#   Cluster and 3 nodes on 128 partitions; `shardcast relayout -cluster ...
#   -partitions 1024` moves them to 1024.
# Fails unless every node ends on the new layout with 0 lost, 0 duplicates
# and 0 reordered. Needs redis-server on PATH (make redis).
set -euo pipefail
cd "$(dirname "$0")/.."
tmp=$(mktemp -d)
fleet_pid=
cleanup() {
	if [ -n "$fleet_pid" ]; then kill "$fleet_pid" 2>/dev/null || true; wait "$fleet_pid" 2>/dev/null || true; fi
	rm -rf "$tmp"
}
trap cleanup EXIT

go build -o "$tmp/fleet" ./examples/fleet
go build -o "$tmp/shardcast" ./cmd/shardcast

# demo ENGINE RELAYOUT-PATTERN FINAL-LAYOUT: one fleet moved while it runs.
demo() {
	local engine=$1 pattern=$2 final=$3
	echo "== $engine"
	"$tmp/fleet" -engine "$engine" -duration "${DURATION:-10s}" -heartbeat 200ms -every 1s -check >"$tmp/fleet.out" 2>&1 &
	fleet_pid=$!
	for _ in $(seq 300); do
		if grep -q 'n3 *published' "$tmp/fleet.out"; then break; fi
		if ! kill -0 "$fleet_pid" 2>/dev/null; then cat "$tmp/fleet.out"; exit 1; fi
		sleep 0.1
	done
	relayout=$(grep -o "$pattern" "$tmp/fleet.out")
	echo "+ shardcast $relayout"
	# shellcheck disable=SC2086 # the printed flags are meant to split
	"$tmp/shardcast" $relayout
	status=0
	wait "$fleet_pid" || status=$?
	fleet_pid=
	echo "+ fleet output"
	cat "$tmp/fleet.out"
	if [ "$status" -ne 0 ]; then
		echo "relayout-demo: the $engine fleet reported lost, duplicated or reordered messages" >&2
		exit "$status"
	fi
	if [ "$(grep -c "^final .* lost 0  duplicates 0  reordered 0 .* on $final" "$tmp/fleet.out")" -ne 3 ]; then
		echo "relayout-demo: not every $engine node ended on $final with nothing lost, duplicated or reordered" >&2
		exit 1
	fi
}

demo sharded 'relayout -shards .*' '3 instances'
demo cluster 'relayout -cluster .*' '1024 partitions'
echo "relayout-demo: ok"
