#!/usr/bin/env bash
# The kinformer demo, on a machine with nothing but Go (and bash):
#
#   bash hack/demo.sh          # Ctrl-C stops it
#   DEMO_SECONDS=10 bash hack/demo.sh   # stops by itself after 10 s
#
# It builds the local kube-apiserver + etcd (tools/localapi; the first build
# compiles kube-apiserver, about 2,000 packages: 7-12 minutes on 2 idle
# cores, 20-25 or more on busy ones, with a line a minute meanwhile; then
# seconds) and the kinformer command, starts the server on a fresh
# temporary data dir, runs a traffic generator (`kinformer demo-traffic`:
# creates, updates and deletes configmaps in namespaces demo-1 and demo-2),
# and runs `kinformer watch configmaps -A` in the foreground. On Ctrl-C (or
# SIGTERM, or after DEMO_SECONDS) the watch prints its summary, then the
# generator and the server are stopped and the data dir removed: nothing is
# left running.
#
# Environment:
#   DEMO_SECONDS        stop after this many seconds of watching (default: run until Ctrl-C)
#   DEMO_OUTPUT         table (default) or json
#   KINFORMER_LOCALAPI  an already built localapi binary to use instead of building it,
#                       or the directory to build it in
#   KINFORMER_BIN       an already built kinformer binary to use instead of building it
#   GO                  the go command (default: go)
set -euo pipefail

# Job control: every background job gets its own process group, so a Ctrl-C
# at the terminal reaches this script only, which stops the jobs in order
# (watch first, for its summary; the server last) and whole groups at a time.
set -m

root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
cd "$root"
GO=${GO:-go}
seconds=${DEMO_SECONDS:-0}
output=${DEMO_OUTPUT:-table}
case $seconds in
'' | *[!0-9]*)
	echo "demo: DEMO_SECONDS must be a whole number of seconds, not '$seconds'" >&2
	exit 2
	;;
esac

say() { printf 'demo: %s\n' "$*" >&2; }

localapi_pid='' traffic_pid='' watch_pid='' timer_pid='' ready=0
work=$(mktemp -d "${TMPDIR:-/tmp}/kinformer-demo.XXXXXX")
# Absolute: the kinformer command is built from its own directory.
case $work in /*) ;; *) work=$root/$work ;; esac

# nap SECONDS: sleep in a builtin (a read that times out on a FIFO nobody
# writes), so that no foreground job takes the terminal and its Ctrl-C.
mkfifo "$work/nap"
exec 9<>"$work/nap"
nap() { read -r -t "$1" -u 9 _ || true; }

# stop_group PID: SIGTERM the process group PID leads and wait for its
# leader to exit; after 5 s send a second SIGTERM (localapi takes it as
# "exit now", useful when it is interrupted while still starting up), and
# after 10 s SIGKILL the group.
stop_group() {
	local pid=$1 i
	[ -n "$pid" ] || return 0
	kill -TERM -- "-$pid" 2>/dev/null || kill -TERM "$pid" 2>/dev/null || return 0
	for ((i = 0; i < 100; i++)); do
		kill -0 "$pid" 2>/dev/null || break
		((i == 50)) && { kill -TERM -- "-$pid" 2>/dev/null || true; }
		nap 0.1
	done
	kill -KILL -- "-$pid" 2>/dev/null || true
	wait "$pid" 2>/dev/null || true
}

cleanup() {
	local status=$?
	trap - EXIT INT TERM
	stop_group "$timer_pid"
	stop_group "$watch_pid"
	stop_group "$traffic_pid"
	if ((ready)); then
		stop_group "$localapi_pid"
	elif [ -n "$localapi_pid" ]; then
		# Interrupted while starting: it may not handle signals yet, and
		# its data dir is about to go anyway.
		kill -KILL -- "-$localapi_pid" 2>/dev/null || true
		wait "$localapi_pid" 2>/dev/null || true
	fi
	exec 9>&-
	rm -rf "$work"
	say "stopped; nothing left running"
	exit "$status"
}
trap cleanup EXIT
# Until the watch runs, an interrupt just ends the script (and cleanup runs).
trap 'exit 130' INT TERM

say "work dir $work"

# 1. Build.
if [ -n "${KINFORMER_LOCALAPI:-}" ] && [ -f "$KINFORMER_LOCALAPI" ]; then
	localapi=$KINFORMER_LOCALAPI
else
	# Built as `make localapi` and internal/testenv build it, at the same
	# path, so the three share one build. It prints the path on stdout, and
	# on stderr what it builds and, while a first build compiles, a line a
	# minute.
	localapi=$(GOWORK=off GOFLAGS='' "$GO" run ./internal/testenv/localapi/build)
fi
if [ -n "${KINFORMER_BIN:-}" ] && [ -x "$KINFORMER_BIN" ]; then
	kinformer=$KINFORMER_BIN
else
	kinformer=$work/kinformer
	# cmd/kinformer is its own module: build it from its directory.
	(cd cmd/kinformer && "$GO" build -o "$kinformer" .)
fi

# 2. Start the server and wait for its ready line.
"$localapi" --data-dir "$work/data" >"$work/ready" 2>"$work/localapi.log" </dev/null &
localapi_pid=$!
say "starting the local API server (pid $localapi_pid)"
for ((i = 0; ; i++)); do
	# Builtins only in this loop: with job control, an external command
	# would take the terminal, and a Ctrl-C with it.
	[[ -s "$work/ready" && $(<"$work/ready") == *'"ready":true'* ]] && break
	if ! kill -0 "$localapi_pid" 2>/dev/null || ((i > 1500)); then
		say "the local API server did not become ready; its log:"
		tail -n 30 "$work/localapi.log" >&2
		exit 1
	fi
	nap 0.1
done
kubeconfig=$(sed -n 's/.*"kubeconfig":"\([^"]*\)".*/\1/p' "$work/ready")
server=$(sed -n 's/.*"server":"\([^"]*\)".*/\1/p' "$work/ready")
ready=1
say "local API server ready at $server"

# 3. Traffic.
"$kinformer" demo-traffic --kubeconfig "$kubeconfig" >"$work/traffic.log" 2>&1 </dev/null &
traffic_pid=$!
say "traffic generator running (pid $traffic_pid): configmaps in namespaces demo-1, demo-2"

# 4. Watch, until Ctrl-C, SIGTERM or DEMO_SECONDS.
say "try it yourself meanwhile: $kinformer watch cm -A -o json --kubeconfig $kubeconfig"
"$kinformer" watch configmaps -A -o "$output" --kubeconfig "$kubeconfig" </dev/null &
watch_pid=$!
say "watching configmaps in all namespaces (pid $watch_pid); Ctrl-C stops everything"
trap 'kill -INT "$watch_pid" 2>/dev/null || true' INT TERM
if ((seconds > 0)); then
	(
		sleep "$seconds"
		kill -INT "$watch_pid" 2>/dev/null
	) </dev/null &
	timer_pid=$!
fi
# wait returns early (>128) when a trapped signal arrives: wait again until
# the watch has really exited, and exit with its status.
status=0
while :; do
	wait "$watch_pid" && status=0 || status=$?
	((status > 128)) || break
	kill -0 "$watch_pid" 2>/dev/null && continue
	# It has exited: its own status, unless that was what wait just said.
	wait "$watch_pid" 2>/dev/null && status=0 || { s=$?; ((s == 127)) || status=$s; }
	break
done
watch_pid=''
exit "$status"
