# shardcast — the two set-up commands are `make demo` and `make test`.
SHELL := /bin/bash
GO ?= go
# Every Go module in the repository (the library and its nested modules).
MODULES := $(shell find . -name go.mod -not -path './.git/*' -exec dirname {} \; | sort)
FUZZTIME ?= 5s

.PHONY: test demo fmt-check vet unit fuzz bench generate redis

## demo: runs the main job on a local Redis the command starts itself.
demo: redis
	$(GO) run ./examples/demo $(ARGS)

## test: gofmt check, go vet and the race-enabled tests of every module, plus a brief fuzz run.
test: redis fmt-check vet unit fuzz

redis:
	@./scripts/ensure-redis.sh

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go' 2>/dev/null || find . -name '*.go')); \
	if [ -n "$$out" ]; then echo "gofmt needed on:"; echo "$$out"; exit 1; fi

vet:
	@for m in $(MODULES); do echo "go vet $$m"; (cd $$m && $(GO) vet ./...) || exit 1; done

unit:
	@for m in $(MODULES); do echo "go test $$m"; (cd $$m && $(GO) test -race -count=1 -timeout 20m ./...) || exit 1; done

fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/envelope/
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/resp/

generate:
	$(GO) generate ./...

## bench: runs every benchmark scenario against local Redis it starts itself (about 10 minutes
## on 2 cores) and regenerates docs/BENCHMARKS.md. ARGS passes flags, e.g. ARGS='-rounds 7'.
bench: redis
	cd bench && $(GO) run ./cmd/shardbench all -rounds 5 -duration 3s -out ../docs/BENCHMARKS.md $(ARGS)

## interop: installs what the Python and Node.js reference implementations need (interop/install.sh),
## then runs their vector runners and the cross-language publish tests.
.PHONY: interop
interop: redis
	bash interop/install.sh
	$(GO) test -race -count=1 -v ./interop/
