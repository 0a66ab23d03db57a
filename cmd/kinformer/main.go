// Command kinformer keeps a live, in-memory copy of Kubernetes objects with
// the kinformer library and shows every change as it happens.
//
// Usage:
//
//	kinformer watch RESOURCE [-n NAMESPACE | -A] [-l SELECTOR] [--field-selector SELECTOR]
//	          [--fields PATH,...] [--resync DURATION] [--state-dir DIR] [-o table|json]
//	kinformer serve RESOURCE... [--listen 127.0.0.1:8080] [-n NAMESPACE | -A] [-l SELECTOR]
//	          [--field-selector SELECTOR] [--fields PATH,...] [--resync DURATION] [--state-dir DIR] [--compact]
//	          [--accept-hosts REGEXP] [--sse-buffer N] [--max-sse-clients N] [--max-connections N]
//	          [--shard-group NAME [--shard-namespace NAMESPACE] [--shard-members PATTERN,...]
//	           [--shard-identity ID] [--lease-duration 15s]]
//
// It follows kubectl's conventions, with kubectl's own connection flags
// (k8s.io/cli-runtime): --kubeconfig (or $KUBECONFIG), --context, --cluster,
// --user, --server, --token, --as, --as-group, --certificate-authority,
// --insecure-skip-tls-verify, --request-timeout and the rest; the
// in-cluster configuration when there is no kubeconfig; -n/--namespace
// (default: the context's namespace, else "default"), -A/--all-namespaces,
// -l/--selector and --field-selector. RESOURCE is resolved like kubectl
// does, by client-go's RESTMapper over the server's discovery (read once per
// process): plural ("configmaps"), singular ("configmap"), short name
// ("cm"), kind ("ConfigMap"), or qualified by group ("deployments.apps",
// "configmaps." for the core group) or by version and group
// ("deployments.v1.apps", "configmaps.v1"); custom resources included.
//
// "watch" lists RESOURCE, then prints an ADDED event for every object and
// every change after that. With -o json it prints exactly one JSON object
// per line:
//
//	{"type":"ADDED","key":"ns/name","resourceVersion":"123","object":{...}}
//
// where type is ADDED, MODIFIED, DELETED, BOOKMARK (no object) or ERROR
// (with "error" instead of the object), key is the cache key
// ("namespace/name", or "name" for cluster-scoped objects) and
// resourceVersion is the one the informer had reached with the event. With
// -o table (the default) it prints rows like `kubectl get -w`, with an EVENT
// column first, and no bookmarks. While the initial list runs, progress is
// shown on stderr if stderr is a terminal. SIGINT or SIGTERM stops it
// cleanly, with a one-line summary of the events seen on stderr; a second
// signal exits at once (status 130).
//
// With --state-dir DIR, watch and serve keep each cache in a file in DIR
// (one per cluster, resource, namespace and selectors), and the next run
// with the same flags starts from it: watch prints the objects as they were
// (RESTORED in the table; ADDED with "cause":"restore" in JSON), then what
// changed meanwhile (DELETED, MODIFIED, ADDED); serve serves them at once,
// ready once caught up. A file that cannot be used is reported on stderr
// and set aside, and the informer lists as usual. The files are private
// (0600, in a directory only the user may write); --state-key-file FILE
// (or $KINFORMER_STATE_KEY) encrypts the objects in them (AES-256-GCM), and
// without it Secrets are not kept at all. A file is bound to the cluster
// it was written from: another cluster reached at the same address does
// not get it.
//
// With --fields PATH,..., watch and serve keep only those fields of each
// object (the library's Options.Fields: paths in JSON names, such as
// metadata.labels,spec.nodeName,status.phase; name, namespace, uid and
// resourceVersion always), and the rest is skipped unread; a path a
// built-in resource does not have is a usage error.
//
// With --compact, serve keeps each cached object as bytes and decodes it
// for every request that reads it (the library's Options.Compact): much
// less memory for large caches, a decode per object served.
//
// "serve" keeps an informer for each RESOURCE and serves the caches
// read-only over HTTP on 127.0.0.1:8080 (--listen): /objects, /events
// (server-sent events shaped like watch -o json), /metrics, /healthz,
// /readyz and a live page at /; see `kinformer serve --help`. While bound
// to a loopback address it answers only requests for loopback names
// (localhost, 127.0.0.1, [::1]) and those --accept-hosts matches, against
// DNS rebinding; slow or stalled clients are cut off, and connections,
// request headers, concurrent /objects requests and event streams are
// capped.
//
// With --shard-group NAME, several serve processes split every RESOURCE
// between them (package sharding: a Lease per process, labelled
// kinformer.io/shard-group=NAME, in --shard-namespace, by default the
// pod's: one where only the group writes Leases, as whoever writes Leases
// there decides what the group serves): each caches and serves only the objects
// whose metadata.uid hashes into its share; a process killed is taken over
// within --lease-duration and a few seconds, one stopped gives its share up
// at once. /stats and the live page show the members, this process's
// ranges and its object count per resource.
//
// Named kubectl-kinformer and put on $PATH, it is a kubectl plugin:
// `kubectl kinformer watch pods`.
//
// Exit codes:
//
//	0  ok: success, including a clean stop on SIGINT or SIGTERM
//	1  error: any other error
//	2  usage: unknown command or flag, missing or extra argument
//	3  unknown resource: not found through discovery, or 404 when listing
//	4  bad selector: the server rejected --selector or --field-selector (400)
//	5  unreachable: cannot reach the cluster, or no usable configuration
//	6  forbidden: forbidden or unauthorized (403, 401)
package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"path/filepath"
	"strings"
	"syscall"

	"github.com/spf13/pflag"
)

func main() {
	os.Exit(run(os.Args, os.Stdout, os.Stderr))
}

// progName is how the user invoked us, for usage and error messages:
// "kubectl kinformer" when run as a kubectl plugin.
func progName(arg0 string) string {
	name := filepath.Base(arg0)
	name = strings.TrimSuffix(name, ".exe")
	if plugin, ok := strings.CutPrefix(name, "kubectl-"); ok && plugin != "" {
		// kubectl maps "kubectl foo-bar" to kubectl-foo_bar.
		return "kubectl " + strings.ReplaceAll(plugin, "_", "-")
	}
	if name == "" || name == "." || name == string(filepath.Separator) {
		return "kinformer"
	}
	return name
}

// command is one subcommand.
type command struct {
	name   string
	hidden bool
	short  string
	run    func(ctx context.Context, env *env, args []string) error
	// flags returns a new flag set with the command's flags (nil: none).
	flags func() *pflag.FlagSet
}

// env is what a command needs from the process.
type env struct {
	prog   string
	stdout io.Writer
	stderr io.Writer
	// isTerminal reports whether a writer is a terminal (for progress).
	isTerminal func(w io.Writer) bool
}

var commands = []*command{
	{name: "watch", short: "sync RESOURCE, then print every change as it happens", run: runWatch,
		flags: func() *pflag.FlagSet { return new(watchFlags).flagSet() }},
	{name: "serve", short: "serve the caches of RESOURCEs read-only over HTTP, with a live page", run: runServe,
		flags: func() *pflag.FlagSet { return new(serveFlags).flagSet() }},
	{name: "state", short: "state prune --state-dir DIR: remove the state files no informer will use", run: runState,
		flags: func() *pflag.FlagSet { return new(stateFlags).flagSet() }},
	{name: "version", short: "print the version", run: runVersion},
	{name: "help", short: "show this help", run: nil},
	{name: "demo-traffic", hidden: true, short: "create, update and delete configmaps in a loop (for the demo)", run: runTraffic,
		flags: func() *pflag.FlagSet { return new(trafficFlags).flagSet() }},
}

func findCommand(name string) *command {
	for _, c := range commands {
		if c.name == name {
			return c
		}
	}
	return nil
}

// run is main without os.Exit, for tests.
func run(args []string, stdout, stderr io.Writer) int {
	arg0 := args[0]
	e := &env{prog: progName(arg0), stdout: stdout, stderr: stderr, isTerminal: isTerminal}
	args = args[1:]

	name, rest, err := splitCommand(args)
	if err != nil {
		return e.fail(err)
	}
	switch name {
	case "", "help":
		if name == "" && len(rest) == 0 {
			e.usage(stderr)
			return exitUsage
		}
		if len(rest) > 0 && name == "help" {
			if c := findCommand(rest[0]); c != nil && c.run != nil {
				return run([]string{arg0, c.name, "--help"}, stdout, stderr)
			}
		}
		e.usage(stdout)
		return exitOK
	}
	c := findCommand(name)
	if c == nil || c.run == nil {
		return e.fail(usageErrorf("unknown command %q", name))
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, os.Interrupt, syscall.SIGTERM)
	defer signal.Stop(sigs)
	finished := make(chan struct{})
	defer close(finished)
	go handleSignals(sigs, cancel, finished, func(code int) {
		fmt.Fprintf(stderr, "%s: interrupted again, exiting at once\n", e.prog)
		os.Exit(code)
	})
	return e.fail(c.run(ctx, e, rest))
}

// handleSignals stops the command gracefully (cancel) on the first signal,
// and exits at once (exit(130)) on a second one, for a stop that hangs. It
// returns when the command has finished. It must not wait on the context
// cancel cancels: that is done at once, and a second signal would never be
// seen.
func handleSignals(sigs <-chan os.Signal, cancel func(), finished <-chan struct{}, exit func(code int)) {
	select {
	case <-sigs:
	case <-finished:
		return
	}
	cancel()
	select {
	case <-sigs:
		exit(130) // 128+SIGINT, as shells report an interrupted command
	case <-finished:
	}
}

// valueFlags returns the flags of every command that take a value ("-n",
// "--namespace"), so that splitCommand can skip "-n NAMESPACE" in front of
// the command.
func valueFlags() map[string]bool {
	out := map[string]bool{}
	for _, c := range commands {
		if c.flags == nil {
			continue
		}
		c.flags().VisitAll(func(f *pflag.Flag) {
			if f.NoOptDefVal != "" {
				return // a boolean: the flag alone means true
			}
			out["--"+f.Name] = true
			if f.Shorthand != "" {
				out["-"+f.Shorthand] = true
			}
		})
	}
	return out
}

// splitCommand finds the subcommand: the first argument that is neither a
// flag nor a flag's value. Flags before it are passed on to it, as kubectl
// allows "kubectl -n kube-system get pods".
func splitCommand(args []string) (string, []string, error) {
	takesValue := valueFlags()
	for i := 0; i < len(args); i++ {
		a := args[i]
		switch {
		case a == "-h" || a == "--help" || a == "-help":
			return "help", nil, nil
		case a == "--":
			return "", nil, usageErrorf("missing command")
		case strings.HasPrefix(a, "-"):
			if takesValue[a] {
				i++ // its value
			}
		default:
			rest := append(append([]string{}, args[:i]...), args[i+1:]...)
			return a, rest, nil
		}
	}
	if len(args) > 0 {
		return "", nil, usageErrorf("missing command")
	}
	return "", nil, nil
}

func (e *env) usage(w io.Writer) {
	p := e.prog
	fmt.Fprintf(w, `%[1]s keeps a live, in-memory copy of Kubernetes objects and shows every change.

Usage:
  %[1]s watch RESOURCE [flags]
  %[1]s serve RESOURCE... [flags]

Commands:
`, p)
	for _, c := range commands {
		if !c.hidden {
			fmt.Fprintf(w, "  %-9s %s\n", c.name, c.short)
		}
	}
	fmt.Fprintf(w, `
Examples:
  %[1]s watch pods -A
  %[1]s watch cm -n kube-system -o json
  %[1]s watch deployments.apps -l app=web --resync 10m
  %[1]s watch cm -A --state-dir ~/.kinformer
  %[1]s serve pods deployments.apps -A --listen 127.0.0.1:8080
  %[1]s serve configmaps -A --shard-group cm-cache --shard-namespace cm-cache --listen 127.0.0.1:0   # 3 of these: a third each

Run '%[1]s watch --help' or '%[1]s serve --help' for the flags.

Exit codes:
%[2]s`, p, exitCodesHelp("  "))
}
