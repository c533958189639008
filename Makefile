# shardcast — the two set-up commands are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
# Every Go module in the repository (the library and its nested modules).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
# A count, not a duration: with a duration, Go's fuzz coordinator can fail a
# run with a bare "context deadline exceeded" when the time runs out while a
# worker is busy (golang/go#75804, fixed in Go 1.27); a count has no deadline.
FUZZTIME ?= 100000x

.PHONY: test demo fmt-check vet unit fuzz bench generate redis cc
.PHONY: chat chat-web mapclient

## demo: runs the main job on a local Redis the command starts itself.
demo: redis
	$(GO) run ./examples/demo $(ARGS)

## test: gofmt check, go vet and the race-enabled tests of every module, a brief fuzz run, and the
## check that each nested module installs for a user (modules-check).
test: redis cc fmt-check vet unit fuzz modules-check

redis:
	@./scripts/ensure-redis.sh

cc:
	@./scripts/ensure-cc.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

# Each module runs in the workspace (go.work): in a module's directory ./... names that module's
# packages only, nested modules excluded, so every package is vetted and tested once, against the
# working tree. modules-check covers the GOWORK=off builds a user gets.
vet:
	@for m in $(MODULES); do echo "go vet $$m"; (cd $$m && $(GO) vet ./...) || exit 1; done

unit:
	@for m in $(MODULES); do echo "go test $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 20m ./...) || exit 1; done
	@# Built without -race only: it trips a data race inside centrifuge-go v0.12.1 (see the file).
	cd contrib/centrifugebroker && $(GO) test -count=1 -run '^TestRecoveryAfterFailover$$' .

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./envelope/
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/resp/
	cd contrib/centrifugebroker && $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) .

## modules-check: for each nested module, what a user does: go get MODULE@HEAD from a new module outside
## the repository, without the workspace, and build a program that imports it (docs/MODULES.md). Fails,
## naming the module and what to run, when its go.mod requires a library version that lacks what it uses.
.PHONY: modules-check
modules-check:
	@./scripts/check-modules.sh

generate:
	$(GO) generate ./...

## bench: runs every benchmark scenario against local Redis it starts itself (about 35 minutes
## on 2 cores) and regenerates docs/BENCHMARKS.md. ARGS passes flags, e.g. ARGS='-rounds 7'.
bench: redis
	cd bench && $(GO) run ./cmd/shardbench all -rounds 5 -duration 3s -out ../docs/BENCHMARKS.md $(ARGS)

## chat: a real-time chat on Centrifuge + shardcast (broker and presence): starts a local Redis
## Cluster (3 masters, 3 replicas) and three chat nodes, prints their URLs; Ctrl-C stops everything.
## ARGS passes flags, e.g. ARGS='-engine sharded' (3 local instances) or
## ARGS='-cluster 10.0.0.1:7000 -nodes 1 -port 8000'.
chat: redis chat-web
	cd examples/chat && $(GO) build -o $(CURDIR)/bin/chat . && exec $(CURDIR)/bin/chat $(ARGS)

## chat-web: installs the chat page's browser client (centrifuge-js, pinned) from npm, and npm
## itself with apt-get when missing and root. The chat's browser test skips without it.
CHAT_CLIENT := examples/chat/web/node_modules/centrifuge/dist/centrifuge.js
chat-web: $(CHAT_CLIENT)
$(CHAT_CLIENT): examples/chat/web/package.json examples/chat/web/package-lock.json
	@./examples/chat/web/install.sh

## mapclient: installs the centrifuge-js map client (pinned centrifuge and ws) that
## contrib/centrifugebroker's TestMapWebSocket runs under Node.js, and nodejs and npm with apt-get
## when missing and root. The test skips without it, and fails under CI.
MAP_CLIENT := contrib/centrifugebroker/testdata/mapclient/node_modules/centrifuge/package.json
mapclient: $(MAP_CLIENT)
$(MAP_CLIENT): contrib/centrifugebroker/testdata/mapclient/package.json contrib/centrifugebroker/testdata/mapclient/package-lock.json
	@./contrib/centrifugebroker/testdata/mapclient/install.sh

## interop: installs what the Python and Node.js reference implementations need (interop/install.sh),
## then runs their vector runners and the cross-language publish tests.
.PHONY: interop
interop: redis
	bash interop/install.sh
	$(GO) test -race -count=1 -v ./interop/

## demo-metrics: the demo's traffic with a Prometheus /metrics endpoint (contrib/prometheus, a nested
## module, so the library's go.mod stays free of client_golang). ARGS passes flags.
.PHONY: demo-metrics
demo-metrics: redis
	cd contrib/prometheus && $(GO) run ./cmd/demo-metrics $(ARGS)

## relayout-demo: a fleet of 3 nodes (examples/fleet) on 2 local instances, moved to 3 by `shardcast relayout`
## while they publish, then 3 nodes on a local cluster moved from 128 to 1024 partitions; fails unless every
## node counts 0 lost, 0 duplicates, 0 reordered (docs/RELAYOUT.md).
.PHONY: relayout-demo
relayout-demo: redis
	./scripts/relayout-demo.sh

## chaos: a soak that injects faults (killed, frozen and failed-over masters, slot moves, an added
## and removed master, killed Pub/Sub clients, online re-layouts with one of those faults mid-way)
## while ~8,000 numbered messages/s flow on 600
## channels, on a local 3x1 cluster and on 3 standalone instances (3 minutes each), then
## accounts for every message; it fails on a duplicate, a reorder, a loss no event reported or a
## channel that stopped delivering. ARGS passes flags, e.g. ARGS='-engine cluster -duration 10m -seed 7'.
.PHONY: chaos
chaos: redis
	cd bench && $(GO) run ./cmd/chaos $(ARGS)

## test-matrix: the server-sensitive suites on each server of the matrix (Redis 7.0.15, 8.0.2, 8.0.6;
## Valkey 8.0.1, 8.1.1, 9.1.2), which scripts/ensure-servers.sh fetches from Debian's packages into
## ~/.cache/shardcast/servers when missing (about a minute the first time). What runs depends on the
## server (scripts/test-matrix.sh, docs/SERVERS.md): everything on the newest Redis and Valkey, the
## fault and server-difference tests and 30 s of chaos per engine on the others. One PASS/FAIL line per
## server with its time; logs in bin/matrix/. SERVERS='valkey-9.1.2 /opt/my-redis' picks servers (names
## of the matrix, folders holding redis-server and redis-cli, or `path`). A server that cannot be had is
## skipped, or fails the run with MATRIX_STRICT=1 (.ci/run sets it). It then rewrites the "Tested on"
## table of docs/SERVERS.md and README.md from the servers that passed; TESTED_ON=check, which .ci/run
## sets, fails instead when the table differs.
.PHONY: test-matrix
SERVERS ?=
test-matrix:
	@./scripts/test-matrix.sh $(SERVERS)
