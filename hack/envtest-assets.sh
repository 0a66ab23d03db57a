#!/usr/bin/env bash
# Builds the kube-apiserver and etcd binaries that envtest (controller-runtime's
# test environment) starts, from source, and prints their directory as the last
# line of stdout:
#
#   export KUBEBUILDER_ASSETS=$(bash hack/envtest-assets.sh)
#
# Both are built from the tools/localapi module (tools/localapi/cmd/kube-apiserver
# and tools/localapi/cmd/etcd), so they use the same k8s.io/kubernetes and etcd
# versions as localapi and share its build cache: when localapi is built, only
# the two main packages are left to compile and link. Cold (nothing in the
# build cache) this compiles k8s.io/kubernetes's apiserver: many minutes on 2
# cores. When nothing changed, go build finds both binaries up to date and
# this takes a few seconds.
#
# The directory is $(go env GOCACHE)/../kinformer-envtest unless
# KINFORMER_ENVTEST_DIR is set. kubectl is not built (envtest only needs it
# for Environment.ControlPlane.KubeCtl).
#
# Everything but the directory goes to stderr.
#
# Environment:
#   KINFORMER_ENVTEST_DIR  where to put the binaries
#   GO                     the go command (default: go)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
say() { printf 'envtest-assets: %s\n' "$*" >&2; }

out=${KINFORMER_ENVTEST_DIR:-$("$GO" env GOCACHE)/../kinformer-envtest}
mkdir -p "$out"
out=$(cd "$out" && pwd)

cd "$root/tools/localapi"
# A build of this module only, whatever the caller's workspace or flags.
# No VCS stamp: with one, every commit of the repository would relink.
export GOWORK=off GOFLAGS=-buildvcs=false

# kube-apiserver --version reports what the release build would: the
# version of k8s.io/kubernetes in tools/localapi/go.mod (only the link step
# depends on these flags, so the compiled packages stay shared with localapi).
kver=$("$GO" list -m -f '{{.Version}}' k8s.io/kubernetes)
if [[ $kver =~ ^v([0-9]+)\.([0-9]+)\. ]]; then
	kmajor=${BASH_REMATCH[1]} kminor=${BASH_REMATCH[2]}
else
	say "unexpected k8s.io/kubernetes version '$kver' in tools/localapi/go.mod"
	exit 1
fi
pkg=k8s.io/component-base/version
ldflags="-X $pkg.gitVersion=$kver -X $pkg.gitMajor=$kmajor -X $pkg.gitMinor=$kminor -X $pkg.gitTreeState=clean"

# One build at a time into this directory (two callers at once would write
# the same files).
exec 8>"$out/build.lock"
flock 8

start=$SECONDS
[ -x "$out/kube-apiserver" ] || say "building kube-apiserver $kver (first time, with a cold build cache: many minutes on 2 cores)"
"$GO" build -ldflags "$ldflags" -o "$out/kube-apiserver" ./cmd/kube-apiserver
[ -x "$out/etcd" ] || say "building etcd"
"$GO" build -o "$out/etcd" ./cmd/etcd

# Both must at least run.
"$out/kube-apiserver" --version >&2
etcdv=$("$out/etcd" --version)
echo "${etcdv%%$'\n'*}" >&2
say "kube-apiserver and etcd in $out ($((SECONDS - start)) s)"

exec 8>&-
echo "$out"
