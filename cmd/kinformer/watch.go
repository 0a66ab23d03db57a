package main

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"

	"github.com/kinformer/kinformer"
)

const watchLong = `
Lists RESOURCE, prints an ADDED event for every object, then every change
as it happens, until interrupted (SIGINT or SIGTERM), with a summary of the
events seen on stderr.

RESOURCE is resolved through discovery: plural, singular or short name, or
kind, optionally qualified as NAME.GROUP or NAME.VERSION.GROUP
(pods, pod, po, Pod, deployments.apps, configmaps. for the core group).

-o json prints one JSON object per line:
  {"type":"ADDED","key":"ns/name","resourceVersion":"123","object":{...}}
type is ADDED, MODIFIED, DELETED, BOOKMARK (no object) or ERROR (with
"error" instead of the object).

--state-dir DIR keeps the cache in a file in DIR, and a later watch with
the same flags starts from it: first the objects as they were when the
last one stopped, then what changed meanwhile, as events (DELETED for the
objects deleted, MODIFIED, ADDED), then every change as it happens.
Restored objects read RESTORED in the table's EVENT column; with -o json
they are ADDED lines with "cause":"restore" after the resourceVersion.
Once caught up, one line on stderr says so: "restored 1,234 configmaps
from FILE (rv 5678), caught up in 412ms". A file that cannot be used is
reported on stderr and set aside, and the watch lists everything as
without the flag. --state-key-file FILE (or
$KINFORMER_STATE_KEY) encrypts the objects in the file; without it
Secrets are not kept.

--namespace-selector SELECTOR watches RESOURCE in the namespaces whose
labels match SELECTOR (tenant=acme, "team in (a,b)"), one watch per
namespace, and follows the Namespace objects: a namespace labelled later
joins (its objects read JOINED in the EVENT column; with -o json, ADDED
lines with "cause":"join"), one unlabelled or deleted leaves (LEFT; DELETED
with "cause":"leave"). It needs permission to list and watch namespaces.
A namespace where RESOURCE may not be listed and watched stops the watch
at start (forbidden, naming it); with --skip-forbidden-namespaces it is
left out instead, said on stderr, and the permissions are checked again
every minute: a namespace granted later joins, one revoked leaves. With
--state-dir each namespace has its own state file; a namespace that
leaves takes its files with it (one that joins again lists).

A custom resource whose CustomResourceDefinition is deleted: one line on
stderr says so ("the definition of widgets.example.com was deleted"),
the objects the watch still holds end as DELETED lines with
"cause":"gone" (table: GONE), each failed attempt is an ERROR line with
the 404, and the watch goes on, listing again with backoff: if the CRD
is created again, its objects come as ADDED.
`

type watchFlags struct {
	cluster     clusterFlags
	nsSelector  string
	skipDenied  bool
	output      string
	resync      time.Duration
	syncTimeout time.Duration
	stateDir    string
	stateKeys   stateKeys
	verbose     bool
}

func (f *watchFlags) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("watch", pflag.ContinueOnError)
	fs.StringVarP(&f.output, "output", "o", "table", "output format: table or json")
	fs.DurationVar(&f.resync, "resync", 0, "re-list from the server this often, as a consistency check (0: never)")
	fs.DurationVar(&f.syncTimeout, "sync-timeout", 0, "give up if the initial list has not completed after this long (0: wait)")
	bindStateDir(fs, &f.stateDir)
	bindStateKeyFile(fs, &f.stateKeys)
	fs.StringVar(&f.nsSelector, "namespace-selector", "", "watch the namespaces whose labels match this selector, following them as they change (e.g. tenant=acme)")
	bindSkipForbidden(fs, &f.skipDenied)
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log the informer's retries and re-lists on stderr")
	f.cluster.bind(fs, true)
	return fs
}

func runWatch(ctx context.Context, e *env, args []string) error {
	var f watchFlags
	fs := f.flagSet()
	if err := parseFlags(e, fs, args, "watch RESOURCE [flags]", watchLong); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return usageErrorf("watch: missing RESOURCE (for example: %s watch pods)", e.prog)
	case fs.NArg() > 1:
		return usageErrorf("watch: want one RESOURCE, got %d: %q", fs.NArg(), fs.Args())
	case f.output != "table" && f.output != "json":
		return usageErrorf("watch: unknown output format %q: want table or json", f.output)
	case f.resync < 0:
		return usageErrorf("watch: --resync must not be negative")
	case f.cluster.allNamespaces && fs.Changed("namespace"):
		return usageErrorf("watch: --namespace and --all-namespaces are mutually exclusive")
	case f.nsSelector != "" && (f.cluster.allNamespaces || fs.Changed("namespace")):
		return usageErrorf("watch: --namespace-selector chooses the namespaces: not with --namespace or --all-namespaces")
	}
	if f.nsSelector != "" {
		if _, err := labels.Parse(f.nsSelector); err != nil {
			return usageErrorf("watch: --namespace-selector %q: %v", f.nsSelector, err)
		}
	}
	if f.skipDenied && f.nsSelector == "" {
		return usageErrorf("watch: --skip-forbidden-namespaces goes with --namespace-selector")
	}
	if err := f.stateKeys.load(e.warn); err != nil {
		return err
	}

	warnStateDir(e, f.stateDir)
	cfg, ns, err := f.cluster.load(userAgent())
	if err != nil {
		return err
	}
	resolver, err := newResolver(ctx, cfg, e.warn)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	res, err := resolver.resolve(ctx, fs.Arg(0))
	if err != nil {
		return stoppedOr(ctx, err)
	}
	f.stateKeys.warnSecrets(e, res, f.stateDir)
	if err := checkFields(res, f.cluster.fields); err != nil {
		return err
	}
	if f.nsSelector != "" && !res.namespaced {
		return usageErrorf("watch: --namespace-selector: %s is not namespaced", res)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	var lw lister = dyn.Resource(res.gvr)
	scope := ""
	if res.namespaced && !f.cluster.allNamespaces {
		lw, scope = dyn.Resource(res.gvr).Namespace(ns), ns
	}
	prog := &progress{lister: lw}

	logger := newNoteLogger(e.warn)
	if f.verbose {
		logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}
	opts := &kinformer.Options[*unstructured.Unstructured]{
		LabelSelector: f.cluster.selector,
		FieldSelector: f.cluster.fieldSelector,
		ResyncPeriod:  f.resync,
		Logger:        logger,
		Name:          res.String(), // also names the state file
		StateDir:      f.stateDir,
		StateKey:      stateKey(cfg, res, scope),
		StateKeys:     f.stateKeys.keys,
		Fields:        f.cluster.fields,
	}
	var src watchSource
	if f.nsSelector != "" {
		opts.Name, opts.StateDir, opts.StateKey, opts.StateKeys = "", "", "", nil // the factory's
		ns := kinformer.Namespaces{Selector: f.nsSelector, IfAllowed: f.skipDenied}
		src, err = newViewSource(cfg, res, ns, kinformer.FactoryOptions{Logger: logger, StateDir: f.stateDir, StateKeys: f.stateKeys.keys}, opts)
		if err != nil {
			return stoppedOr(ctx, err)
		}
	} else {
		src = informerSource{kinformer.New[*unstructured.Unstructured](prog, opts)}
	}

	out := newOutput(e, f.output, res.namespaced && (f.cluster.allNamespaces || f.nsSelector != ""))
	out.gone.res = res
	var lastErr atomic.Pointer[error]
	var pending func() int
	pending = src.addHandler(func(ev kinformer.Event[*unstructured.Unstructured]) {
		out.count(ev)
		if ev.Type == kinformer.Error && !isStateError(ev.Err) {
			lastErr.Store(&ev.Err)
			if !src.hasSynced() && kinformer.IsPersistent(ev.Err) {
				return // WaitForSync returns it; do not say it twice
			}
		}
		// Pending counts this event too: flush when the queue is drained.
		out.event(ev, pending() <= 1)
	})

	runCtx, stop := context.WithCancel(ctx)
	defer stop()
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		src.run(runCtx)
	}()
	start := time.Now()
	syncedAt := make(chan time.Time, 1)
	if e.isTerminal(e.stderr) {
		go out.showProgress(runCtx, prog, src.len, syncedAt, res.String(), start)
	}

	waitCtx := runCtx
	if f.syncTimeout > 0 {
		var cancel context.CancelFunc
		waitCtx, cancel = context.WithTimeout(runCtx, f.syncTimeout)
		defer cancel()
	}
	err = src.waitForSync(waitCtx)
	if err == nil {
		if line := restoreLine(e.prog, res.String(), src.restores(), src.startup().ListTook); line != "" {
			out.restoreNote(line)
		}
		syncedAt <- time.Now()
		<-runCtx.Done() // watch until SIGINT or SIGTERM
	}
	stop()
	<-ran
	stopped := err == nil || ctx.Err() != nil // synced, or stopped by a signal
	out.finish(time.Since(start), stopped)

	switch {
	case stopped:
		return nil // a clean exit
	case f.nsSelector != "" && !f.skipDenied:
		return forbiddenNamespace(err)
	case errors.Is(err, context.DeadlineExceeded):
		msg := fmt.Sprintf("the initial list of %s did not complete within %v", res, f.syncTimeout)
		if p := lastErr.Load(); p != nil {
			code, m := classify(*p)
			if code == exitError {
				code = exitUnreachable
			}
			return &codedError{code: code, msg: msg + "; last error: " + m, err: *p}
		}
		return &codedError{code: exitUnreachable, msg: msg, err: err}
	}
	return err
}

// lister is the dynamic client's resource interface, narrowed to what an
// informer needs.
type lister interface {
	List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// progress counts the objects of the initial list as they arrive, for the
// progress line: the items of each page of a paged list, or the ADDED
// events of a streaming list (a watch with sendInitialEvents) until the
// bookmark that ends them.
type progress struct {
	lister
	listed atomic.Int64
}

func (p *progress) List(ctx context.Context, opts metav1.ListOptions) (*unstructured.UnstructuredList, error) {
	if opts.Continue == "" {
		p.listed.Store(0)
	}
	l, err := p.lister.List(ctx, opts)
	if err == nil && l != nil {
		p.listed.Add(int64(len(l.Items)))
	}
	return l, err
}

func (p *progress) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := p.lister.Watch(ctx, opts)
	if err != nil || opts.SendInitialEvents == nil || !*opts.SendInitialEvents {
		return w, err
	}
	p.listed.Store(0)
	cw := &countingWatch{Interface: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go cw.forward(&p.listed)
	return cw, nil
}

// countingWatch forwards a streaming list's events, counting the initial
// ADDED events.
type countingWatch struct {
	watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *countingWatch) ResultChan() <-chan watch.Event { return w.out }

func (w *countingWatch) Stop() {
	w.stopOnce.Do(func() { close(w.stop) })
	w.Interface.Stop()
}

func (w *countingWatch) forward(n *atomic.Int64) {
	defer close(w.out)
	initial := true
	for ev := range w.Interface.ResultChan() {
		if initial {
			switch ev.Type {
			case watch.Added:
				n.Add(1)
			case watch.Bookmark:
				if m, err := meta.Accessor(ev.Object); err == nil && m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true" {
					initial = false
				}
			}
		}
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func userAgent() string {
	return "kinformer/" + version()
}
