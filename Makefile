# kinformer — one command each: `make demo`, `make test`.
SHELL := /bin/bash
GO    ?= go

.PHONY: test unit localapi vet fmt demo kinformer fuzz crsuite api apicheck consumer tidy version install-env

# The library's own commands run with GOWORK=off: its tests build against
# exactly the module graph a user of the library alone gets. The
# sub-modules (cmd/kinformer, controllerruntime, tools/bench) build in the
# workspace (go.work), which puts this tree where their go.mod files
# require the library's release version.
LIB := GOWORK=off

# A real local kube-apiserver with some traffic, and `kinformer watch
# configmaps -A` on it. Ctrl-C (or DEMO_SECONDS=N) stops everything.
demo:
	bash hack/demo.sh

# cmd/kinformer and controllerruntime are modules of their own (so that
# the library's users do not get their dependencies): each is built,
# vetted and tested from its directory.
kinformer:
	cd cmd/kinformer && $(GO) build -o ../../bin/kinformer .

# Everything CI runs: formatting, vet, the API check, the local API server
# build, all tests (unit and real-API-server integration) with the race
# detector, controller-runtime's own cache suite on kcr.NewCache (as `make
# crsuite`), the consumer check (as `make consumer`) and the fuzz targets.
test: fmt vet apicheck localapi
	$(LIB) $(GO) test -race -count=1 -timeout 30m ./...
	KINFORMER_TEST_COMPACT=1 $(LIB) $(GO) test -race -count=1 -timeout 30m .
	cd cmd/kinformer && $(GO) test -race -count=1 -timeout 30m ./...
	cd controllerruntime && $(GO) test -race -count=1 -timeout 30m ./...
	cd tools/release && GOWORK=off $(GO) test -count=1 ./...
	GO=$(GO) bash hack/crsuite.sh --kinformer
	GO=$(GO) bash hack/consumer.sh
	$(MAKE) fuzz

# The exported API of the public packages, against api/*.txt (see
# tools/release/api.go): `make apicheck` fails on any difference, `make
# api` rewrites the files after a change that is meant.
apicheck:
	cd tools/release && GOWORK=off $(GO) run . api
api:
	cd tools/release && GOWORK=off $(GO) run . api -w

# The modules as a user outside this repository gets them: a file proxy
# holding each at the version being released, a fresh module that gets,
# builds and runs them on the local API server (hack/consumer.sh).
consumer: localapi
	GO=$(GO) bash hack/consumer.sh

# The version being released (docs/development.md, "Releasing"): the sub-modules'
# requirements of the library and the adapter, and go.work's replacements.
version:
	@[ -n "$(V)" ] || { echo "usage: make version V=vX.Y.Z"; exit 2; }
	cd tools/release && GOWORK=off $(GO) run . version $(V)

# Until a version is published: writes a module proxy of this tree (under
# the user's cache directory, or OUT=DIR) and prints the environment that
# makes the go command use it (README.md, "Install"):
#   eval "$(make -s -C path/to/kinformer install-env)"
install-env:
	@cd tools/release && GOWORK=off GOFLAGS= $(GO) run . env $(if $(OUT),-out "$(OUT)")

# go mod tidy of every module. The sub-modules require the library at the
# version being released, which no proxy has yet: tidy (which ignores the
# workspace) reads it from a file proxy of this tree, and the checksums of
# that provisional build are not kept.
tidy:
	$(LIB) $(GO) mod tidy
	cd tools/release && GOWORK=off $(GO) mod tidy
	d=$$(mktemp -d) && trap 'rm -rf "$$d"' EXIT && \
	(cd tools/release && GOWORK=off $(GO) run . proxy -out "$$d") >/dev/null && \
	for m in cmd/kinformer controllerruntime tools/bench; do \
		(cd $$m && GOWORK=off GOFLAGS=-mod=mod GONOSUMDB=github.com/kinformer/kinformer \
			GOPROXY="file://$$d,$$($(GO) env GOPROXY)" $(GO) mod tidy) || exit 1; \
		sed -i '/^github.com\/kinformer\/kinformer[ /]/d' $$m/go.sum; \
	done

# Every fuzz target for a while (FUZZTIME each; FUZZTIME_SLOW for the one
# that writes files); their seed corpora (testdata/fuzz) also run as plain
# tests above. Budgets are counts of executions, not durations: with a
# duration, Go 1.26's fuzzing coordinator can report "context deadline
# exceeded" as a failure when the time runs out on a loaded machine
# (golang/go#75804, fixed in Go 1.27). FUZZTIME=30s still works by hand.
FUZZTIME ?= 20000x
FUZZTIME_SLOW ?= 10000x
fuzz:
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzLoad$$' -fuzztime $(FUZZTIME_SLOW) ./internal/snapshot
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzReader$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzRewriteMeta$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzMetaSurgery$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzLazy$$' -fuzztime $(FUZZTIME) ./internal/protowatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzDecode$$' -fuzztime $(FUZZTIME) ./internal/squash
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzDecodeObject$$' -fuzztime $(FUZZTIME) ./internal/persist
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzDecodeEvent$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzDecodeList$$' -fuzztime $(FUZZTIME) ./internal/jsonwatch
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzKeys$$' -fuzztime $(FUZZTIME) .
	$(LIB) $(GO) test -run '^$$' -fuzz '^FuzzProto$$' -fuzztime $(FUZZTIME) ./internal/projection

# Unit tests only: no API server needed.
unit:
	KINFORMER_SKIP_APISERVER=1 $(LIB) $(GO) test -race -count=1 ./...
	cd cmd/kinformer && KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...
	cd controllerruntime && KINFORMER_SKIP_APISERVER=1 $(GO) test -race -count=1 ./...

# The real kube-apiserver + etcd of tools/localapi (its own module), built
# as internal/testenv builds it: into $(go env GOCACHE)/../kinformer-localapi
# (or $KINFORMER_LOCALAPI, a directory or an already built binary), with
# the version of k8s.io/kubernetes it requires. Cold, this compiles about
# 2,000 packages: 7-12 minutes on 2 idle cores, 20-25 or more on busy ones,
# with a line a minute meanwhile; warm, seconds.
localapi:
	$(LIB) $(GO) run ./internal/testenv/localapi/build >/dev/null

# controller-runtime's own cache test suite (pkg/cache, on envtest with
# kube-apiserver and etcd built from tools/localapi). `test` runs it with
# --kinformer (after the other tests). CRSUITE_ARGS are passed on:
# --kinformer (the default: kcr.NewCache), --clientgo, or '' for
# controller-runtime's own cache.
CRSUITE_ARGS ?= --kinformer
crsuite:
	GO=$(GO) bash hack/crsuite.sh $(CRSUITE_ARGS)

vet:
	$(LIB) $(GO) vet ./...
	cd cmd/kinformer && $(GO) vet ./...
	cd controllerruntime && $(GO) vet ./...
	cd tools/bench && $(GO) vet ./...
	cd tools/release && GOWORK=off $(GO) vet ./...
	cd tools/localapi && GOWORK=off $(GO) vet ./...
	cd tools/kubectl && GOWORK=off $(GO) vet ./...

fmt:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi
