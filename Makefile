# kinformer — one command each: `make demo`, `make test`.
SHELL := /bin/bash
GO    ?= go
# Where internal/testenv looks for the local API server binary.
LOCALAPI := $(shell $(GO) env GOCACHE)/../kinformer-localapi/localapi

.PHONY: test unit localapi vet fmt demo kinformer fuzz crsuite

# A real local kube-apiserver with some traffic, and `kinformer watch
# configmaps -A` on it. Ctrl-C (or DEMO_SECONDS=N) stops everything.
demo:
	bash hack/demo.sh

# cmd/kinformer and controllerruntime are modules of their own (so that
# the library's users do not get their dependencies): each is built,
# vetted and tested from its directory.
kinformer:
	cd cmd/kinformer && $(GO) build -o ../../bin/kinformer .

# Everything CI runs: formatting, vet, the local API server build, all
# tests (unit and real-API-server integration) with the race detector,
# controller-runtime's own cache suite on kcr.NewCache (as `make crsuite`),
# and the fuzz targets.
test: fmt vet localapi
	$(GO) test -race -count=1 -timeout 30m ./...
	KINFORMER_TEST_COMPACT=1 $(GO) test -race -count=1 -timeout 30m .
	cd cmd/kinformer && $(GO) test -race -count=1 -timeout 30m ./...
	cd controllerruntime && $(GO) test -race -count=1 -timeout 30m ./...
	GO=$(GO) bash hack/crsuite.sh --kinformer
	$(MAKE) fuzz

# Every fuzz target for a while (FUZZTIME each; FUZZTIME_SLOW for the one
# that writes files); their seed corpora (testdata/fuzz) also run as plain
# tests above. Budgets are counts of executions, not durations: with a
# duration, Go 1.26's fuzzing coordinator can report "context deadline
# exceeded" as a failure when the time runs out on a loaded machine
# (golang/go#75804, fixed in Go 1.27). FUZZTIME=30s still works by hand.
FUZZTIME ?= 20000x
FUZZTIME_SLOW ?= 10000x
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME_SLOW) ./internal/snapshot
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzRewriteMeta$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzMetaSurgery$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzLazy$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeObject$$' -fuzztime $(FUZZTIME) ./internal/persist
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeList$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(GO) test -run '^$$' -fuzz '^FuzzKeys$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzProto$$' -fuzztime $(FUZZTIME) ./internal/projection

# Unit tests only: no API server needed.
unit:
	KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...
	cd cmd/kinformer && KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...
	cd controllerruntime && KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...

# The real kube-apiserver + etcd of tools/localapi (its own module). Cold,
# this compiles k8s.io/kubernetes: 7-12 minutes on 2 cores; warm, seconds.
localapi:
	cd tools/localapi && $(GO) build -o "$(LOCALAPI)" .

# controller-runtime's own cache test suite (pkg/cache, on envtest with
# kube-apiserver and etcd built from tools/localapi). `test` runs it with
# --kinformer (after the other tests). CRSUITE_ARGS are passed on:
# --kinformer (the default: kcr.NewCache), --clientgo, or '' for
# controller-runtime's own cache.
CRSUITE_ARGS ?= --kinformer
crsuite:
	GO=$(GO) bash hack/crsuite.sh $(CRSUITE_ARGS)

vet:
	$(GO) vet ./...
	cd cmd/kinformer && $(GO) vet ./...
	cd controllerruntime && $(GO) vet ./...
	cd tools/localapi && $(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
