#!/usr/bin/env bash
# The online re-layout on a running fleet, end to end, as separate processes
# (docs/RELAYOUT.md, "Running it"): examples/fleet starts 3 local Redis
# instances and 3 nodes on the first 2 that publish and count numbered
# messages; `shardcast relayout` then moves them to all 3 while they keep
# publishing. Fails unless every node ends on 3 instances with 0 lost,
# 0 duplicates and 0 reordered. Needs redis-server on PATH (make redis).
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

"$tmp/fleet" -duration "${DURATION:-10s}" -heartbeat 200ms -every 1s -check >"$tmp/fleet.out" 2>&1 &
fleet_pid=$!
for _ in $(seq 300); do
	if grep -q 'n3 *published' "$tmp/fleet.out"; then break; fi
	if ! kill -0 "$fleet_pid" 2>/dev/null; then cat "$tmp/fleet.out"; exit 1; fi
	sleep 0.1
done
relayout=$(grep -o 'relayout -shards .*' "$tmp/fleet.out")
echo "+ shardcast $relayout"
# shellcheck disable=SC2086 # the printed flags are meant to split
"$tmp/shardcast" $relayout
status=0
wait "$fleet_pid" || status=$?
fleet_pid=
echo "+ fleet output"
cat "$tmp/fleet.out"
if [ "$status" -ne 0 ]; then
	echo "relayout-demo: the fleet reported lost, duplicated or reordered messages" >&2
	exit "$status"
fi
if [ "$(grep -c '^final .* lost 0  duplicates 0  reordered 0 .* on 3 instances' "$tmp/fleet.out")" -ne 3 ]; then
	echo "relayout-demo: not every node ended on 3 instances with nothing lost, duplicated or reordered" >&2
	exit 1
fi
echo "relayout-demo: ok"
