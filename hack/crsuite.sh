#!/usr/bin/env bash
# Runs controller-runtime's own cache test suite (sigs.k8s.io/controller-runtime
# pkg/cache: Ginkgo specs on envtest, a real kube-apiserver and etcd):
#
#   bash hack/crsuite.sh                    # against controller-runtime's own cache (baseline)
#   bash hack/crsuite.sh --kinformer [DIR]  # with kcr.NewCache in place of cache.New
#   bash hack/crsuite.sh --clientgo         # controller-runtime's cache on kinformer's clientgo informers
#
# It copies the controller-runtime module (CR_VERSION, from the module cache)
# to a work directory, builds kube-apiserver and etcd from source
# (hack/envtest-assets.sh) for KUBEBUILDER_ASSETS, and runs
# `go test ./pkg/cache/` there. Ginkgo's output goes to a log file in the
# work directory; at the end the script prints Ginkgo's summary line and the
# failed specs, and exits non-zero if the suite did not pass.
# In every mode it adds one file to the suite, kinformer_bootstrap_test.go:
# specs wait once for the "kubernetes" Service the API server creates just
# after it starts, which specs that run first would otherwise race.
#
# With --kinformer, every reference to cache.New in pkg/cache/cache_test.go
# and pkg/cache/informer_cache_test.go (calls, and the function passed as a
# value to CacheTest and the like) becomes kcr.NewCache, imported as
#   kcr "github.com/kinformer/kinformer/controllerruntime"
# and the copy's go.mod requires that module, replaced by DIR (default: the
# repository's controllerruntime directory), with github.com/kinformer/kinformer
# replaced by this repository.
#
# Options:
#   --kinformer [DIR]  run the suite on the kinformer adapter module in DIR
#   --clientgo         run it on controller-runtime's own cache with
#                      NewInformer = clientgo.NewSharedIndexInformer (where a
#                      test gives no NewInformer of its own): every informer
#                      is kinformer's, through the client-go adapter
#   --race             go test -race (as controller-runtime's CI runs it; slower)
#   -v, --verbose      also stream the test output to stderr while it runs
#   -- ARGS            more go test arguments, e.g. -- -ginkgo.focus='Multi-Namespace'
#
# Environment:
#   CR_VERSION        controller-runtime version (default v0.25.2)
#   CRSUITE_TIMEOUT   go test -timeout (default 30m)
#   CRSUITE_WORK      work directory (default $(go env GOCACHE)/../kinformer-crsuite/<mode>;
#                     it is replaced on every run and kept afterwards)
#   GO                the go command (default: go)
set -euo pipefail

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
GO=${GO:-go}
CR_VERSION=${CR_VERSION:-v0.25.2}
timeout=${CRSUITE_TIMEOUT:-30m}
adapter_mod=github.com/kinformer/kinformer/controllerruntime
say() { printf 'crsuite: %s\n' "$*" >&2; }
die() {
	say "$*"
	exit 2
}

mode=own kdir='' race=() verbose=0 extra=()
while (($#)); do
	case $1 in
	--kinformer)
		mode=kinformer
		if (($# > 1)) && [[ $2 != -* ]]; then
			kdir=$2
			shift
		fi
		;;
	--kinformer=*) mode=kinformer kdir=${1#*=} ;;
	--clientgo) mode=clientgo ;;
	--race) race=(-race) ;;
	-v | --verbose) verbose=1 ;;
	--)
		shift
		extra=("$@")
		break
		;;
	-h | --help)
		sed -n '2,/^set -euo/p' "${BASH_SOURCE[0]}" | sed '$d; s/^# \{0,1\}//'
		exit 0
		;;
	*) die "unknown argument '$1' (see --help)" ;;
	esac
	shift
done

# The adapter module must exist before anything slow happens.
if [ "$mode" = kinformer ]; then
	kdir=${kdir:-$root/controllerruntime}
	[ -d "$kdir" ] || die "--kinformer: no directory $kdir (the $adapter_mod module does not exist yet?)"
	kdir=$(cd "$kdir" && pwd)
	[ -f "$kdir/go.mod" ] || die "--kinformer: no go.mod in $kdir: it must be the $adapter_mod module (does it exist yet?)"
	kmod=$(sed -n 's/^module[[:space:]]\{1,\}"\{0,1\}\([^"[:space:]]*\)"\{0,1\}[[:space:]]*$/\1/p' "$kdir/go.mod")
	[ "$kmod" = "$adapter_mod" ] || die "--kinformer: $kdir/go.mod is module '$kmod', not $adapter_mod"
fi

# Everything below uses the copy's go.mod only.
export GOWORK=off GOFLAGS=-buildvcs=false

# 1. controller-runtime's source, from the module cache.
src=$(cd / && "$GO" mod download -json "sigs.k8s.io/controller-runtime@$CR_VERSION" | sed -n 's/^[[:space:]]*"Dir": "\(.*\)",\{0,1\}$/\1/p')
[ -f "$src/go.mod" ] || die "could not download sigs.k8s.io/controller-runtime@$CR_VERSION"

work=${CRSUITE_WORK:-$("$GO" env GOCACHE)/../kinformer-crsuite/$mode}
mkdir -p "$work"
work=$(cd "$work" && pwd)
# One run per work directory at a time: another one (a `make test` of
# another checkout on the same machine) is waited for.
exec 8>"$work.lock"
if ! flock -n 8; then
	say "another crsuite run is using $work: waiting for it to end"
	flock 8
fi
# A stable path keeps the build cache warm from one run to the next.
mod=$work/controller-runtime
chmod -R u+w "$mod" 2>/dev/null || true
rm -rf "$mod"
cp -R "$src" "$mod"
chmod -R u+w "$mod"
say "controller-runtime $CR_VERSION copied to $mod"

# 1b. Every mode: specs wait once for the API server's bootstrap Service.
# Several specs read the "kubernetes" Service in "default", which the API
# server creates shortly after envtest sees it up: run first (Ginkgo's
# random order), they fail whatever the cache (seen once: an informer
# synced with no Service, then Get said not found).
cat >"$mod/pkg/cache/kinformer_bootstrap_test.go" <<'GO'
package cache_test

import (
	"context"
	"sync"
	"time"

	. "github.com/onsi/ginkgo/v2"
	. "github.com/onsi/gomega"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Written by kinformer's hack/crsuite.sh: see there.
var bootstrapped sync.Once

var _ = BeforeEach(func() {
	bootstrapped.Do(func() {
		Eventually(func() error {
			_, err := clientset.CoreV1().Services("default").Get(context.Background(), "kubernetes", metav1.GetOptions{})
			return err
		}).WithTimeout(time.Minute).WithPolling(100 * time.Millisecond).Should(Succeed())
	})
})
GO

# 2. With --kinformer: kcr.NewCache for every cache.New in the suite.
if [ "$mode" = kinformer ]; then
	gofmt=$("$GO" env GOROOT)/bin/gofmt
	count() { { grep -o "$1" "$2" || true; } | wc -l; }
	total=0
	for f in pkg/cache/cache_test.go pkg/cache/informer_cache_test.go; do
		file=$mod/$f
		grep -q '^[[:space:]]*"sigs.k8s.io/controller-runtime/pkg/cache"$' "$file" ||
			die "$f does not import sigs.k8s.io/controller-runtime/pkg/cache as cache; the rewrite needs updating"
		before=$(count '\bkcr\.NewCache\b' "$file")
		# gofmt -r rewrites expressions only (not comments or strings), every
		# cache.New selector: calls and the function value alike.
		"$gofmt" -r 'cache.New -> kcr.NewCache' -w "$file"
		n=$(($(count '\bkcr\.NewCache\b' "$file") - before))
		((n > 0)) || die "no cache.New reference in $f; the rewrite needs updating"
		# The import, next to controller-runtime's cache; gofmt sorts it in.
		sed -i 's|^\([[:space:]]*\)"sigs.k8s.io/controller-runtime/pkg/cache"$|&\n\1kcr "'"$adapter_mod"'"|' "$file"
		"$gofmt" -w "$file"
		say "rewrote $n cache.New references to kcr.NewCache in $f"
		total=$((total + n))
	done
	say "rewrote $total cache.New references in all"
	(
		cd "$mod"
		"$GO" mod edit \
			-require="$adapter_mod@v0.0.0" \
			-replace="$adapter_mod=$kdir" \
			-replace="github.com/kinformer/kinformer=$root"
		"$GO" mod tidy
	) || die "could not add the adapter module to the copy's go.mod"
	say "go.mod: $adapter_mod => $kdir, github.com/kinformer/kinformer => $root"
	say "the suite builds with $(cd "$mod" && "$GO" list -m -f '{{.Path}} {{.Version}}' k8s.io/client-go)"
fi

# 2b. With --clientgo: controller-runtime's cache, its informers kinformer's.
if [ "$mode" = clientgo ]; then
	gofmt=$("$GO" env GOROOT)/bin/gofmt
	for f in pkg/cache/cache_test.go pkg/cache/informer_cache_test.go; do
		"$gofmt" -r 'cache.New -> kcgNewCache' -w "$mod/$f"
	done
	n=$({ grep -o '\bkcgNewCache\b' "$mod/pkg/cache/cache_test.go" "$mod/pkg/cache/informer_cache_test.go" || true; } | wc -l)
	((n > 0)) || die "no cache.New reference rewritten; the rewrite needs updating"
	cat >"$mod/pkg/cache/kclientgo_test.go" <<'GO'
package cache_test

import (
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kclientgo "github.com/kinformer/kinformer/clientgo"
)

// kcgNewCache is controller-runtime's cache.New with kinformer's
// client-go informers, unless the test brings its own.
func kcgNewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	if opts.NewInformer == nil {
		opts.NewInformer = kclientgo.NewSharedIndexInformer
	}
	return cache.New(cfg, opts)
}
GO
	(
		cd "$mod"
		"$GO" mod edit -require="github.com/kinformer/kinformer@v0.0.0" -replace="github.com/kinformer/kinformer=$root"
		"$GO" mod tidy
	) || die "could not add github.com/kinformer/kinformer to the copy's go.mod"
	say "rewrote $n cache.New references to kcgNewCache (cache.New with NewInformer: clientgo.NewSharedIndexInformer)"
fi

# 3. envtest's binaries.
KUBEBUILDER_ASSETS=$(bash "$root/hack/envtest-assets.sh" | tail -n 1)
export KUBEBUILDER_ASSETS
say "KUBEBUILDER_ASSETS=$KUBEBUILDER_ASSETS"

# 4. The suite. go test's -v (not Ginkgo's -ginkgo.v) because without it
# go test prints nothing but "ok" for a passing package, not Ginkgo's summary.
#
# envtest starts etcd and kube-apiserver in process groups of their own, with
# their data and certificates in temporary directories; when the test binary
# dies before its AfterSuite (go test's -timeout, a crash) they stay running.
# So the test gets a TMPDIR of its own, and afterwards any process still
# running with that directory on its command line was started by this run and
# is stopped.
tmp=$work/tmp
# shellcheck disable=SC2317 # (run by the EXIT trap)
leftovers() {
	local p pid args
	for p in /proc/[0-9]*; do
		pid=${p#/proc/}
		[ "$pid" != $$ ] || continue
		# Builtins only: this reads every process's command line.
		{ mapfile -d '' -t args <"$p/cmdline"; } 2>/dev/null || continue
		if [[ "${args[*]}" == *"$tmp/"* ]]; then echo "$pid"; fi
	done
}
# shellcheck disable=SC2317 # (run by the EXIT trap)
sweep() {
	local pids i
	mapfile -t pids < <(leftovers)
	((${#pids[@]})) || return 0
	say "stopping process(es) the suite left running: ${pids[*]}"
	kill -TERM "${pids[@]}" 2>/dev/null || true
	for ((i = 0; i < 50; i++)); do
		mapfile -t pids < <(leftovers)
		((${#pids[@]})) || return 0
		sleep 0.1
	done
	kill -KILL "${pids[@]}" 2>/dev/null || true
}
trap 'sweep; rm -rf "$tmp"' EXIT
trap 'exit 130' INT TERM
rm -rf "$tmp"
mkdir -p "$tmp"
log=$work/go-test.log
say "running go test ./pkg/cache/ (mode $mode${race:+, -race}, timeout $timeout; log: $log)"
start=$SECONDS
status=0
gotest=("$GO" test -v "${race[@]}" -count=1 -timeout "$timeout" ./pkg/cache/ -ginkgo.no-color "${extra[@]}")
if ((verbose)); then
	(cd "$mod" && TMPDIR=$tmp "${gotest[@]}") 2>&1 | tee "$log" >&2 || status=$?
else
	(cd "$mod" && TMPDIR=$tmp "${gotest[@]}") >"$log" 2>&1 || status=$?
fi
elapsed=$((SECONDS - start))

# 5. Ginkgo's summary, e.g.
#   Ran 276 of 276 Specs in 94.1 seconds
#   SUCCESS! -- 276 Passed | 0 Failed | 0 Pending | 0 Skipped
# and, when specs failed, its "Summarizing N Failures:" list.
ran=$(grep -E '^Ran [0-9]+ of [0-9]+ Specs' "$log" | tail -n 1 || true)
result=$(grep -E '^(SUCCESS|FAIL)! .*[0-9]+ Passed \| [0-9]+ Failed' "$log" | tail -n 1 || true)
failures=$(sed -n '/^Summarizing [0-9]* Failure/,/^Ran [0-9]* of/p' "$log" | sed '$d' | grep -E '^[[:space:]]*\[(FAIL|PANICKED|TIMEDOUT|INTERRUPTED|ABORTED)\]' || true)
echo "controller-runtime $CR_VERSION pkg/cache, mode $mode: go test exit status $status, ${elapsed} s"
if [ -n "$ran" ]; then
	echo "$ran"
	echo "$result"
else
	echo "no Ginkgo summary (the suite did not build or did not finish); from $log:"
	if grep -q 'panic: ' "$log"; then
		# (after Ginkgo's progress dots, on the same line)
		grep -m 1 -A 3 'panic: ' "$log" | sed '1s/^.*panic: /panic: /'
	else
		tail -n 40 "$log"
	fi
fi
if [ -n "$failures" ]; then
	echo "failed specs:"
	echo "$failures"
fi
# The package's plain Go tests (TestSource runs the Ginkgo suite).
failed_tests=$(grep -E '^[[:space:]]*--- FAIL: ' "$log" | grep -v -- '--- FAIL: TestSource ' || true)
if [ -n "$failed_tests" ]; then
	echo "failed Go tests:"
	echo "$failed_tests"
fi
if ((status == 0)) && [[ $result != SUCCESS!* ]]; then
	status=1
fi
exit "$status"
