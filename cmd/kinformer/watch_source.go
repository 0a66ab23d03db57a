package main

import (
	"context"
	"errors"
	"strings"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
)

// watchSource is what watch watches and serve serves for one resource:
// one informer, or a view over one informer per namespace a selector
// chooses (--namespace-selector).
type watchSource interface {
	// addHandler registers fn for every event, and returns how many events
	// it has queued.
	addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) (pending func() int)
	// run runs until ctx ends, and has stopped everything when it returns.
	run(ctx context.Context)
	waitForSync(ctx context.Context) error
	// waitForRV waits until the cache is at rv or later (the informer's
	// WaitForResourceVersion); a view, whose namespaces have no common
	// version, does not wait.
	waitForRV(ctx context.Context, rv string) error
	hasSynced() bool
	len() int
	// lastError is the persistent error that goes on (one of the view's
	// informers': the oldest), and since when.
	lastError() (error, time.Time)
	// reconnecting says whether the informer (one of the view's: the one
	// reconnecting longest) has lost its list or watch and waits to try
	// again, and since when (kinformer.Informer.Reconnecting).
	reconnecting() (bool, time.Time)
	// resourceVersion is the informer's; "" for a view (its namespaces'
	// informers each have their own).
	resourceVersion() string
	shardStatus() kinformer.ShardStatus
	// list returns the objects of namespace ("" for all).
	list(namespace string) []*unstructured.Unstructured
	// keyed returns the keys of namespace's objects ("" for all), and a
	// get for them that goes straight to the cache holding each.
	keyed(namespace string) (keys []string, get func(key string) (*unstructured.Unstructured, bool))
	get(key string) (*unstructured.Unstructured, bool)
	key(o *unstructured.Unstructured) string
	compact() bool
	// startup is how the start went (kinformer.Informer.Startup); for a
	// view, its slowest informer's, objects summed.
	startup() kinformer.Startup
	// restores are what its informers restored from their state files
	// as they started (none without --state-dir, or without a file).
	restores() []kinformer.StateRestore
}

type informerSource struct {
	inf *kinformer.Informer[*unstructured.Unstructured]
}

func (s informerSource) addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) func() int {
	reg := s.inf.AddHandler(fn)
	return reg.Pending
}

func (s informerSource) run(ctx context.Context)               { _ = s.inf.Run(ctx) }
func (s informerSource) waitForSync(ctx context.Context) error { return s.inf.WaitForSync(ctx) }
func (s informerSource) waitForRV(ctx context.Context, rv string) error {
	return s.inf.WaitForResourceVersion(ctx, rv)
}
func (s informerSource) hasSynced() bool                    { return s.inf.HasSynced() }
func (s informerSource) len() int                           { return s.inf.Cache().Len() }
func (s informerSource) lastError() (error, time.Time)      { return s.inf.LastError() }
func (s informerSource) reconnecting() (bool, time.Time)    { return s.inf.Reconnecting() }
func (s informerSource) resourceVersion() string            { return s.inf.ResourceVersion() }
func (s informerSource) shardStatus() kinformer.ShardStatus { return s.inf.ShardStatus() }
func (s informerSource) key(o *unstructured.Unstructured) string {
	return s.inf.Cache().Key(o)
}
func (s informerSource) compact() bool { return s.inf.Cache().Compact() }

func (s informerSource) startup() kinformer.Startup { return s.inf.Startup() }

func (s informerSource) restores() []kinformer.StateRestore {
	if r := s.inf.Startup().Restored; r.File != "" {
		return []kinformer.StateRestore{r}
	}
	return nil
}

func (s informerSource) list(namespace string) []*unstructured.Unstructured {
	if namespace == "" {
		return s.inf.Cache().List()
	}
	objs, _ := s.inf.Cache().ByIndex(kinformer.IndexNamespace, namespace)
	return objs
}

func (s informerSource) keyed(namespace string) ([]string, func(string) (*unstructured.Unstructured, bool)) {
	if namespace == "" {
		return s.inf.Cache().ListKeys(), s.get
	}
	keys, _ := s.inf.Cache().IndexKeys(kinformer.IndexNamespace, namespace)
	return keys, s.get
}

func (s informerSource) get(key string) (*unstructured.Unstructured, bool) {
	return s.inf.Cache().GetByKey(key)
}

// viewSource is a factory's view of res over the namespaces selector
// chooses.
type viewSource struct {
	f *kinformer.Factory
	v *kinformer.View[*unstructured.Unstructured]
	// shared: the factory serves other views too, and is started and
	// stopped by its owner (serve), not by run.
	shared bool
	// packed: the factory's caches are compact (FactoryOptions.Compact).
	packed bool
}

func newViewSource(cfg *rest.Config, res resource, ns kinformer.Namespaces, fo kinformer.FactoryOptions, opts *kinformer.Options[*unstructured.Unstructured]) (*viewSource, error) {
	f := kinformer.NewFactory(cfg, &fo)
	v, err := kinformer.DynamicView(f, res.gvr, ns, opts)
	if err != nil {
		f.Stop()
		return nil, err
	}
	return &viewSource{f: f, v: v, packed: fo.Compact}, nil
}

func (s *viewSource) addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) func() int {
	h := func(e kinformer.Event[*unstructured.Unstructured]) { fn(e) }
	vr := s.v.AddHandlerFuncs(kinformer.HandlerFuncs[*unstructured.Unstructured]{Added: h, Modified: h, Deleted: h, Bookmark: h, Error: h})
	return func() int {
		n := 0
		for _, reg := range vr.Registrations() {
			n += reg.Pending()
		}
		return n
	}
}

func (s *viewSource) run(ctx context.Context) {
	if !s.shared {
		s.f.Start()
	}
	<-ctx.Done()
	s.v.Close()
	if !s.shared {
		s.f.Stop()
	}
}

func (s *viewSource) waitForSync(ctx context.Context) error   { return s.v.WaitForSync(ctx) }
func (s *viewSource) hasSynced() bool                         { return s.v.HasSynced() }
func (s *viewSource) waitForRV(context.Context, string) error { return nil }

func (s *viewSource) lastError() (err error, since time.Time) {
	for _, inf := range s.v.Informers() {
		if e, t := inf.LastError(); e != nil && (err == nil || t.Before(since)) {
			err, since = e, t
		}
	}
	return err, since
}

func (s *viewSource) reconnecting() (r bool, since time.Time) {
	for _, inf := range s.v.Informers() {
		if ir, t := inf.Reconnecting(); ir && (!r || t.Before(since)) {
			r, since = true, t
		}
	}
	return r, since
}

func (s *viewSource) resourceVersion() string                 { return "" }
func (s *viewSource) shardStatus() kinformer.ShardStatus      { return kinformer.ShardStatus{} }
func (s *viewSource) key(o *unstructured.Unstructured) string { return kinformer.MetaNamespaceKey(o) }
func (s *viewSource) compact() bool                           { return s.packed }

func (s *viewSource) startup() kinformer.Startup {
	out := kinformer.Startup{Synced: true, HandlersDone: true}
	for _, inf := range s.v.Informers() {
		st := inf.Startup()
		out.Started = out.Started || st.Started
		out.Synced = out.Synced && st.Synced
		out.HandlersDone = out.HandlersDone && st.HandlersDone
		out.ListTook, out.HandlersTook = max(out.ListTook, st.ListTook), max(out.HandlersTook, st.HandlersTook)
		out.Objects, out.Expected = out.Objects+st.Objects, out.Expected+st.Expected
	}
	return out
}

func (s *viewSource) restores() []kinformer.StateRestore {
	var out []kinformer.StateRestore
	for _, inf := range s.v.Informers() {
		if r := inf.Startup().Restored; r.File != "" {
			out = append(out, r)
		}
	}
	return out
}

func (s *viewSource) list(namespace string) []*unstructured.Unstructured {
	return s.v.Select(namespace, nil)
}

// keyed takes each informer's keys, and finds an object in the
// informers of its key's namespace only (one, in a view), not in each.
func (s *viewSource) keyed(namespace string) ([]string, func(string) (*unstructured.Unstructured, bool)) {
	var out []string
	caches := map[string][]*kinformer.Cache[*unstructured.Unstructured]{}
	for _, inf := range s.v.Informers() {
		c := inf.Cache()
		var keys []string
		if namespace == "" {
			keys = c.ListKeys()
		} else {
			keys, _ = c.IndexKeys(kinformer.IndexNamespace, namespace)
		}
		seen := map[string]bool{}
		for _, k := range keys {
			if ns, _, ok := strings.Cut(k, "/"); ok && !seen[ns] {
				seen[ns] = true
				caches[ns] = append(caches[ns], c)
			}
		}
		out = append(out, keys...)
	}
	return out, func(key string) (*unstructured.Unstructured, bool) {
		ns, _, _ := strings.Cut(key, "/")
		for _, c := range caches[ns] {
			if o, ok := c.GetByKey(key); ok {
				return o, true
			}
		}
		return nil, false
	}
}

func (s *viewSource) get(key string) (*unstructured.Unstructured, bool) { return s.v.GetByKey(key) }

func (s *viewSource) len() int {
	n := 0
	for _, inf := range s.v.Informers() {
		n += inf.Cache().Len()
	}
	return n
}

// --skip-forbidden-namespaces: a view's namespaces where the resource may
// not be listed and watched are left out (kinformer.Namespaces.IfAllowed)
// rather than stopping watch or serve at start.

const skipForbiddenUsage = "with --namespace-selector: leave out the namespaces where RESOURCE may not be listed and watched (checked again every minute), instead of stopping"

func bindSkipForbidden(fs *pflag.FlagSet, skip *bool) {
	fs.BoolVar(skip, "skip-forbidden-namespaces", false, skipForbiddenUsage)
}

// forbiddenNamespace is err, a view's failure to sync; if forbidden (one
// of its namespaces), it also names the flag that would leave such
// namespaces out.
func forbiddenNamespace(err error) error {
	var st apierrors.APIStatus
	if !apierrors.IsForbidden(err) || !errors.As(err, &st) || st.Status().Details != nil && st.Status().Details.Kind == "namespaces" {
		return err // not the resource's (the selector's list of namespaces)
	}
	code, msg := classify(err)
	return &codedError{code: code, msg: msg + " (--skip-forbidden-namespaces leaves out the namespaces where it may not list and watch)", err: err}
}
