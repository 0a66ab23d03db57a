package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kinformer/kinformer"
)

// An entry is one informer of a cache: its kind and form, the informer
// controller-runtime sees (sharedInformer), and how it is read. With
// informers.go, a restatement of controller-runtime v0.25.2's
// pkg/cache/internal/informers.go.

// form is how a kind is cached: as its Go type, unstructured, or metadata
// only. One kind may be cached in each form, by separate informers.
type form uint8

const (
	structured form = iota
	unstructuredForm
	metadataForm
)

// forms names each form, in logs.
var forms = [...]string{structured: "typed", unstructuredForm: "unstructured", metadataForm: "metadata"}

func formOf(obj runtime.Object) form {
	switch obj.(type) {
	case runtime.Unstructured:
		return unstructuredForm
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return metadataForm
	}
	return structured
}

type entryKey struct {
	gvk  schema.GroupVersionKind
	form form
}

// entry is one kind's informer in one namespace cache. The factory owns
// the runs of its informers: the cache acquires one (Factory.Typed and the
// like) and gives it back (kinformer.Release), and never runs or stops it
// itself. Only an informer of cache.Options.NewInformer, which is not the
// factory's, is run by the cache (own).
type entry struct {
	sii    toolscache.SharedIndexInformer
	reader reader
	own    bool               // an informer of cache.Options.NewInformer, run by the cache
	cancel context.CancelFunc // own: stops its run; nil until started
	// release gives the factory's informer back: the last release stops
	// it. Called once, when the entry is removed.
	release func()
	// wait, for a kinformer informer, waits for its sync and returns at
	// once an error retrying cannot fix (a 403): a Get of a kind the
	// manager may not list fails with it, rather than waiting out its
	// context. Nil for cache.Options.NewInformer's.
	wait func(context.Context) error
	// lastError is the kinformer informer's LastError (nil for
	// NewInformer's).
	lastError func() (error, time.Time)
	// startup is the kinformer informer's Startup (nil for NewInformer's).
	startup func() kinformer.Startup
	// gone: the entry was removed, or the cache has stopped (IsStopped).
	gone atomic.Bool
	// log is the informer's logger (its kind and namespace); clusterWide
	// says it lists every namespace, or a cluster-scoped kind.
	log         *slog.Logger
	clusterWide bool
	// told: a read that made it has said so (implicitly).
	told atomic.Bool
	// watchErr is the watch error handler of a kinformer informer (nil
	// for NewInformer's); heard says it has been called.
	watchErr toolscache.WatchErrorHandlerWithContext
	heard    atomic.Bool
	// resource names the informer's resource ("pods", "deployments.apps").
	resource string
	// startLine is what the Info line of a kinformer informer's start
	// says (resource, form, mode); nil for NewInformer's.
	startLine []any
}

// hearing wraps h, e's watch error handler, to note that it was called.
func (e *entry) hearing(h toolscache.WatchErrorHandlerWithContext) toolscache.WatchErrorHandlerWithContext {
	return func(ctx context.Context, r *toolscache.Reflector, err error) {
		e.heard.Store(true)
		h(ctx, r, err)
	}
}

// replayMissed gives e's watch error handler the informer's failure that
// goes on (LastError: forbidden, not found, a bad selector), if it has
// heard none. The factory may have started the informer, and its first
// list may have failed, before the handler was set: that Error event went
// to no handler of this cache, and the next attempt comes only after a
// backoff (800 ms, growing to 30 s). Called once the entry is made,
// without the cache's lock: h is the user's.
func (e *entry) replayMissed(ctx context.Context) {
	if e.watchErr == nil || e.lastError == nil {
		return
	}
	err, _ := e.lastError()
	if err == nil || e.heard.Swap(true) {
		return
	}
	// client-go gives a handler the reflector that failed; this one only
	// names the informer, as kinformer's client-go adapter's does.
	r := toolscache.NewReflectorWithOptions(&toolscache.ListWatch{}, nil, toolscache.NewStore(toolscache.MetaNamespaceKeyFunc),
		toolscache.ReflectorOptions{Name: e.resource, TypeDescription: e.resource})
	e.watchErr(ctx, r, err)
}

// logStart says, at Info, that e's informer (a kinformer one) has
// started: its kind, resource, form and mode (plain, compact, projected
// with the fields kept, or compact+projected: clientgo.Mode's words),
// one line per informer a namespace cache starts.
func (e *entry) logStart() {
	if e.log == nil || e.startLine == nil {
		return
	}
	e.log.Info("kinformer: informer started", e.startLine...)
}

// startAttrs is the attributes of e's start line (logStart).
func startAttrs(resource string, f form, projected []string, compact bool) []any {
	attrs := []any{"resource", resource, "form", forms[f]}
	switch {
	case len(projected) > 0 && compact:
		return append(attrs, "mode", "compact+projected", "fields", strings.Join(projected, ","))
	case len(projected) > 0:
		return append(attrs, "mode", "projected", "fields", strings.Join(projected, ","))
	case compact:
		return append(attrs, "mode", "compact")
	}
	return append(attrs, "mode", "plain")
}

// IsKinformer reports whether inf, an informer a kcr cache handed out
// (GetInformer, GetInformerForKind), is kinformer's: true for the
// informers kcr makes on its kinformer Factory (in every namespace, for
// a cache of several), false for those of cache.Options.NewInformer and
// for any other cache's.
func IsKinformer(inf cache.Informer) bool {
	switch i := inf.(type) {
	case sharedInformer:
		return true
	case *multiInformer:
		infs := i.informers()
		for _, one := range infs {
			if !IsKinformer(one) {
				return false
			}
		}
		return len(infs) > 0
	}
	return false
}

// implicitly says, once, that a read (a Get or List of a kind nothing
// asked the cache for) started e, keyed k: an informer that lists and
// watches the kind, and caches it, until the cache stops. (One implicit
// Node informer can hold gigabytes.)
func (e *entry) implicitly(k entryKey) {
	if e.log == nil || !e.told.CompareAndSwap(false, true) {
		return
	}
	e.log.Info("kinformer: a read started an informer for this kind: it lists, watches and caches it until the cache stops "+
		"(shape it with cache.Options.ByObject; keep the kind out of the cache with client.CacheOptions.DisableFor, "+
		"or make such reads fail with cache.Options.ReaderFailOnMissingInformer)",
		"clusterWide", e.clusterWide, "form", forms[k.form])
}

// sharedInformer is a factory's informer as a namespace cache hands it
// out: once this cache has given it back or stopped (the factory may run
// it on for other caches), it says IsStopped and refuses new handlers and
// indexes, as controller-runtime's own informers do once removed.
type sharedInformer struct {
	toolscache.SharedIndexInformer
	e *entry
}

func (s sharedInformer) IsStopped() bool { return s.e.gone.Load() }

// errStopped is client-go's answer to a handler or an index added to a
// stopped informer.
func (s sharedInformer) errStopped(what any) error {
	return fmt.Errorf("%v was not added to shared informer because it has stopped already", what)
}

func (s sharedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandler(h)
}

func (s sharedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, period time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, period)
}

func (s sharedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
}

func (s sharedInformer) AddIndexers(indexers toolscache.Indexers) error {
	if s.IsStopped() {
		return s.errStopped("indexers")
	}
	err := s.SharedIndexInformer.AddIndexers(indexers)
	if errors.Is(err, kinformer.ErrFields) {
		return s.e.readsLeftOut(slices.Sorted(maps.Keys(indexers)))
	}
	return err
}

// readsLeftOut is the error of indexes (by name) found reading fields the
// kind's projection leaves out (kinformer's AddIndexers checks): in kcr's
// terms, naming IndexField's field and the option to change, not the
// index names and values kinformer checked.
func (e *entry) readsLeftOut(names []string) error {
	what := make([]string, len(names))
	for i, name := range names {
		if field, ok := strings.CutPrefix(name, fieldIndexPrefix); ok {
			what[i] = fmt.Sprintf("IndexField %q", field)
		} else {
			what[i] = fmt.Sprintf("index %q", name)
		}
	}
	kind := e.reader.gvk.Kind
	return fieldsError(fmt.Sprintf("kcr: %s of %s reads a field that kcr.Options.ByObject[%s].Fields leaves out (the cache keeps %s): add it there",
		strings.Join(what, " or "), kind, kind, e.reader.projected))
}

// fieldsError is an error of kcr.Options.ByObject's Fields: it wraps
// kinformer.ErrFields, whose text (the library's Options.Fields) it does
// not repeat.
type fieldsError string

func (e fieldsError) Error() string { return string(e) }
func (e fieldsError) Unwrap() error { return kinformer.ErrFields }
