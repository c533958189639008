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
# After each re-layout, a node started with the fleet's original layout and
# -follow (Agreement.Follow) joins: it adopts the recorded new layout.
# Fails unless every node, the late one included, ends on the new layout
# with 0 lost, 0 duplicates and 0 reordered. Needs redis-server on PATH
# (make redis).
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

# demo ENGINE RELAYOUT-PATTERN FINAL-LAYOUT: one fleet moved while it runs,
# then joined by a node on the old layout that follows the record.
demo() {
	local engine=$1 pattern=$2 final=$3
	echo "== $engine"
	"$tmp/fleet" -engine "$engine" -duration "${DURATION:-15s}" -heartbeat 200ms -every 1s -check >"$tmp/fleet.out" 2>&1 &
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
	# The fleet's original layout: the instances its nodes started on, or
	# the cluster's seeds with the default 128 partitions.
	if [ "$engine" = sharded ]; then
		old=(-shards "$(grep -o 'nodes on [^ ]*' "$tmp/fleet.out" | head -1 | cut -d' ' -f3 | sed 's/,$//')")
	else
		old=(-engine cluster -cluster "$(echo "$relayout" | grep -o -- '-cluster [^ ]*' | cut -d' ' -f2)")
	fi
	echo "+ fleet ${old[*]} -follow -nodes 1 -name late"
	late=0
	"$tmp/fleet" "${old[@]}" -follow -nodes 1 -name late -duration 4s -heartbeat 200ms -every 1s -check >"$tmp/late.out" 2>&1 || late=$?
	status=0
	wait "$fleet_pid" || status=$?
	fleet_pid=
	echo "+ fleet output"
	cat "$tmp/fleet.out"
	echo "+ late node output"
	cat "$tmp/late.out"
	if [ "$status" -ne 0 ] || [ "$late" -ne 0 ]; then
		echo "relayout-demo: the $engine fleet reported lost, duplicated or reordered messages, or the late node failed" >&2
		exit 1
	fi
	if [ "$(cat "$tmp/fleet.out" "$tmp/late.out" | grep -c "^final .* lost 0  duplicates 0  reordered 0 .* on $final")" -ne 4 ]; then
		echo "relayout-demo: not every $engine node ended on $final with nothing lost, duplicated or reordered" >&2
		exit 1
	fi
}

demo sharded 'relayout -shards .*' '3 instances'
demo cluster 'relayout -cluster .*' '1024 partitions'
echo "relayout-demo: ok"
