#!/usr/bin/env bash
# The consumer check: kinformer's modules as a user outside this repository
# gets them, at the version being released.
#
#  1. `make install-env` (README.md, "Install": the lines a user runs
#     before the version is published) writes a file-based module proxy
#     holding the library, controllerruntime and cmd/kinformer at that
#     version, from the working tree (as the go command would make them
#     from the tags), and prints the environment that uses it, which this
#     check then runs under: the proxy first, and no checksum-database
#     lookup for kinformer's modules (which the database has never seen).
#  2. In a fresh module in a temporary directory (hack/consumer), with no
#     workspace and no replace, and only that proxy plus the modules already
#     downloaded (the local module cache, read as a second file proxy):
#     `go get` the library and the controller-runtime module, build a
#     controller-runtime manager on kcr.NewCache and a client-go program on
#     clientgo.Wrap, and `go install .../cmd/kinformer@VERSION`.
#  3. Against the local API server: the manager reconciles a ConfigMap read
#     from its cache, the client-go program sees one through its handler and
#     lister, `kinformer version` names the version and `kinformer watch`
#     shows both ConfigMaps.
#
# It fails if any module does not resolve, build or run as a user gets it:
# a sub-module that needs a replace, a requirement on an unreleased version,
# a file missing from a module zip, a package that only builds in the
# workspace. Dependencies are checked against the repository's go.sum files.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
GO=${GO:-go}
say() { printf 'consumer: %s\n' "$*" >&2; }

work=$(mktemp -d "${TMPDIR:-/tmp}/kinformer-consumer.XXXXXX")
localapi_pid=
cleanup() {
	local status=$?
	if [ -n "$localapi_pid" ]; then
		kill -TERM "$localapi_pid" 2>/dev/null || true
		wait "$localapi_pid" 2>/dev/null || true
	fi
	chmod -R u+w "$work" 2>/dev/null || true
	rm -rf "$work"
	exit "$status"
}
trap cleanup EXIT

modcache=$(cd "$root" && GOWORK=off "$GO" env GOMODCACHE)
localapi=${KINFORMER_LOCALAPI:-$(GOWORK=off "$GO" env GOCACHE)/../kinformer-localapi}
# A directory (as for internal/testenv and `make localapi`) holds the binary.
[ -d "$localapi" ] && localapi=$localapi/localapi
[ -x "$localapi" ] || { say "no local API server at $localapi: run make localapi"; exit 1; }

# 1. The proxy, and the environment a user sets to use it (README.md,
# "Install"): exactly the lines `make install-env` prints.
lines=$(cd "$root" && make -s install-env GO="$GO" OUT="$work/proxy")
version=$(sed -n 's/^# kinformer \(v[^,]*\),.*/\1/p' <<<"$lines")
[ -n "$version" ] || { say "make install-env printed no version:"; printf '%s\n' "$lines" >&2; exit 1; }
say "modules at $version in a file proxy; the environment:"
printf '%s\n' "$lines" >&2
eval "$lines"

# 2. A user's module, under those lines. kinformer's modules exist only in
# the file proxy; every other module comes from the local module cache
# (read as a proxy, added after the file proxy), or, for one the
# repository's builds never needed, from the usual proxy. Checksums are
# checked as a user's are: kinformer's modules are not looked up (the
# lines' GONOSUMDB), every other one must match the repository's go.sum.
# Its own module cache, so that nothing of a previous
# run (another tree at the same version) is reused; -trimpath, so that the
# compiled dependencies stay in the build cache from one run to the next
# whatever the temporary paths.
export GOWORK=off GOFLAGS="-mod=mod -trimpath" GOTOOLCHAIN=local
case $GOPROXY in
"file://$work/proxy"*) ;;
*) say "the lines do not put the file proxy first: GOPROXY=$GOPROXY"; exit 1 ;;
esac
export GOPROXY="file://$work/proxy,file://$modcache/cache/download,${GOPROXY#*,}"
export GOMODCACHE="$work/modcache" GOBIN="$work/bin"
cp -r "$root/hack/consumer" "$work/consumer"
cd "$work/consumer"
# The repository's recorded checksums: a dependency that differs fails.
cat "$root/go.sum" "$root/controllerruntime/go.sum" "$root/cmd/kinformer/go.sum" | sort -u >go.sum
"$GO" get "github.com/kinformer/kinformer@$version" "github.com/kinformer/kinformer/controllerruntime@$version"
"$GO" build -o "$work/bin/" ./...
"$GO" install "github.com/kinformer/kinformer/cmd/kinformer@$version"
say "built: $(cd "$work/bin" && echo *)"
got=$("$work/bin/kinformer" version)
[ "$got" = "kinformer $version" ] || { say "kinformer version says '$got', want 'kinformer $version'"; exit 1; }

# 3. Run them.
"$localapi" --data-dir "$work/data" >"$work/ready" 2>"$work/localapi.log" </dev/null &
localapi_pid=$!
for ((i = 0; ; i++)); do
	[[ -s "$work/ready" && $(<"$work/ready") == *'"ready":true'* ]] && break
	if ! kill -0 "$localapi_pid" 2>/dev/null || ((i > 1800)); then
		say "the local API server did not become ready; its log:"
		tail -n 30 "$work/localapi.log" >&2
		exit 1
	fi
	sleep 0.1
done
kubeconfig=$(sed -n 's/.*"kubeconfig":"\([^"]*\)".*/\1/p' "$work/ready")

KUBECONFIG=$kubeconfig "$work/bin/manager" --namespace consumer
KUBECONFIG=$kubeconfig "$work/bin/clientgo" --namespace consumer
"$work/bin/kinformer" watch configmaps -n consumer -o json --kubeconfig "$kubeconfig" >"$work/watch.json" 2>"$work/watch.err" &
watch_pid=$!
for ((i = 0; i < 300; i++)); do
	grep -q '"name":"kcr-check"' "$work/watch.json" && grep -q '"name":"clientgo-check"' "$work/watch.json" && break
	sleep 0.1
done
kill -INT "$watch_pid"
if ! wait "$watch_pid"; then
	say "kinformer watch did not stop cleanly:"
	cat "$work/watch.err" >&2
	exit 1
fi
for name in kcr-check clientgo-check; do
	grep -q "\"name\":\"$name\"" "$work/watch.json" || { say "kinformer watch did not show $name:"; cat "$work/watch.json" "$work/watch.err" >&2; exit 1; }
done
say "kinformer watch showed both ConfigMaps"
say "ok: the library, controllerruntime and cmd/kinformer at $version resolve, build and run as a user gets them"
