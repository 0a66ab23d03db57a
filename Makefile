# kinformer — one command each: `make demo`, `make test`.
SHELL := /bin/bash
GO    ?= go
# Where internal/testenv looks for the local API server binary.
LOCALAPI := $(shell $(GO) env GOCACHE)/../kinformer-localapi/localapi

.PHONY: test unit localapi vet fmt demo kinformer fuzz

# A real local kube-apiserver with some traffic, and `kinformer watch
# configmaps -A` on it. Ctrl-C (or DEMO_SECONDS=N) stops everything.
demo:
	bash hack/demo.sh

kinformer:
	$(GO) build -o bin/kinformer ./cmd/kinformer

# Everything CI runs: formatting, vet, the local API server build, and all
# tests (unit and real-API-server integration) with the race detector.
test: fmt vet localapi
	$(GO) test -race -count=1 -timeout 30m ./...
	$(MAKE) fuzz

# Every fuzz target for a short while (FUZZTIME each); their seed corpora
# (testdata/fuzz) also run as plain tests above.
FUZZTIME ?= 10s
fuzz:
	$(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME) ./internal/snapshot
	$(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzRewriteMeta$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzMetaSurgery$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeObject$$' -fuzztime $(FUZZTIME) .
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(GO) test -run '^$$' -fuzz '^FuzzDecodeList$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(GO) test -run '^$$' -fuzz '^FuzzKeys$$' -fuzztime $(FUZZTIME) .

# Unit tests only: no API server needed.
unit:
	KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...

# The real kube-apiserver + etcd of tools/localapi (its own module). Cold,
# this compiles k8s.io/kubernetes: 7-12 minutes on 2 cores; warm, seconds.
localapi:
	cd tools/localapi && $(GO) build -o "$(LOCALAPI)" .

vet:
	$(GO) vet ./...
	cd tools/localapi && $(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
