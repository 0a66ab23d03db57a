# kinformer — one command each: `make demo`, `make test`.
SHELL := /bin/bash
GO    ?= go
# Where internal/testenv looks for the local API server binary.
LOCALAPI := $(shell $(GO) env GOCACHE)/../kinformer-localapi/localapi

.PHONY: test unit localapi vet fmt demo kinformer

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
