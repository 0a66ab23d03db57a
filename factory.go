package kinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"sync"
	"time"
	"unsafe"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/flowcontrol"
)

// ErrFactoryStopped is returned by Shared and Dynamic after Factory.Stop:
// a stopped factory would never start the informer it returned.
var ErrFactoryStopped = errors.New("kinformer: factory stopped")

// FactoryOptions configure a Factory. The zero value (or nil) is valid.
type FactoryOptions struct {
	// Registerer receives the metrics of every informer of the factory
	// (one Metrics, see NewMetrics). Default: no metrics.
	Registerer prometheus.Registerer

	// Logger is the informers' logger, for those whose Options leave it
	// nil. Default: as Options.Logger's.
	Logger *slog.Logger

	// Scheme maps Go types to kinds for Shared, and decodes them. Default:
	// client-go's kubernetes/scheme.Scheme (every built-in type); give your
	// own, with your typed custom resources added, to share those.
	Scheme *runtime.Scheme

	// StateDir, if set, is every informer's Options.StateDir, unless its
	// first consumer gives one: each keeps its cache in its own file there,
	// and starts warm after a restart (see Options.StateDir). Default:
	// none.
	StateDir string

	// Sharding, if set, is every informer's Options.Sharding, unless its
	// first consumer gives one: each caches and handles only this
	// replica's share of its resource (a *sharding.Sharding; see Sharder).
	// Default: none.
	Sharding Sharder
}

// Factory makes shared informers, for programs where several controllers
// want the same resource: however many consumers ask for a resource (in a
// namespace, with selectors), there is one informer, one cache, one list
// and one watch on the wire.
//
// The factory owns its informers' lifetime: each runs on a goroutine the
// factory starts (Start, or Shared after Start) and Stop joins. Consumers
// add handlers and read caches, but do not Start, Run or Stop a shared
// informer themselves; StopShared stops one alone.
//
// A Factory is safe for concurrent use.
type Factory struct {
	cfg    *rest.Config
	scheme *runtime.Scheme
	codecs runtime.NegotiatedSerializer
	log    *slog.Logger
	reg    prometheus.Registerer
	state  string  // FactoryOptions.StateDir
	shard  Sharder // FactoryOptions.Sharding

	// Set up on first use, because NewFactory returns no error.
	setupOnce sync.Once
	setupErr  error
	base      *rest.Config // cfg with the shared rate limiter and user agent
	http      *http.Client // shared by every client of the factory
	mapper    *restmapper.DeferredDiscoveryRESTMapper
	dyn       *dynamic.DynamicClient
	metrics   *Metrics // nil without a Registerer

	mu      sync.Mutex // guards clients, entries, retired, started and stopped
	clients map[schema.GroupVersion]*rest.RESTClient
	entries map[factoryKey]*factoryEntry
	retired []*factoryEntry // stopped, perhaps not yet ended
	started bool
	stopped bool
}

// factoryKey is what makes two requests one informer.
type factoryKey struct {
	typ       reflect.Type // T: a typed and a dynamic informer never share
	gvr       schema.GroupVersionResource
	namespace string // "" for all namespaces, and for cluster-scoped resources
	label     string // canonical form, where it parses
	field     string
}

// factoryEntry is one shared informer.
type factoryEntry struct {
	resource string         // "pods", "deployments.apps": its Name, and named in errors
	inf      sharedInformer // an *Informer[T] of the key's type
	opts     any            // the *Options[T] it was made with, defaulted
	keyFunc  uintptr        // funcID of its KeyFunc as given (0: the default)
	indexes  map[string]uintptr
	// onHandler reports whether the caller runs one of its handlers.
	onHandler func() bool
	cancel    context.CancelFunc // nil until started
	done      chan struct{}      // closed when its Run has returned; nil until started
}

// sharedInformer is what the factory does with an *Informer[T] of any T.
type sharedInformer interface {
	Run(context.Context) error
	WaitForSync(context.Context) error
	dropMetrics()
}

// NewFactory returns a factory of informers that talk to the server cfg
// describes, through one HTTP client and one client-side rate limiter (as a
// clientset). A nil opts means the defaults. Nothing is sent to the server
// until the first Shared or Dynamic, which returns any error in cfg.
func NewFactory(cfg *rest.Config, opts *FactoryOptions) *Factory {
	var o FactoryOptions
	if opts != nil {
		o = *opts
	}
	f := &Factory{cfg: cfg, scheme: o.Scheme, log: o.Logger, reg: o.Registerer, state: o.StateDir, shard: o.Sharding,
		clients: map[schema.GroupVersion]*rest.RESTClient{}, entries: map[factoryKey]*factoryEntry{}}
	if f.scheme == nil {
		f.scheme = clientgoscheme.Scheme
		f.codecs = rest.CodecFactoryForGeneratedClient(clientgoscheme.Scheme, clientgoscheme.Codecs).WithoutConversion()
	} else {
		f.codecs = rest.CodecFactoryForGeneratedClient(f.scheme, serializer.NewCodecFactory(f.scheme)).WithoutConversion()
	}
	return f
}

func (f *Factory) setup() error {
	f.setupOnce.Do(func() { f.setupErr = f.connect() })
	return f.setupErr
}

// connect makes what every informer of the factory shares, as
// kubernetes.NewForConfig does for its clients.
func (f *Factory) connect() error {
	if f.cfg == nil {
		return errors.New("kinformer: NewFactory: nil *rest.Config")
	}
	cfg := rest.CopyConfig(f.cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return errors.New("kinformer: NewFactory: Burst must be positive when QPS is set and RateLimiter is not")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		return fmt.Errorf("kinformer: NewFactory: %w", err)
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("kinformer: NewFactory: %w", err)
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return fmt.Errorf("kinformer: NewFactory: %w", err)
	}
	if f.reg != nil {
		if f.metrics, err = NewMetrics(f.reg); err != nil {
			return err
		}
	}
	f.base, f.http, f.dyn = cfg, hc, dyn
	f.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return nil
}

// remap runs a RESTMapper lookup, and once more after refreshing discovery
// if the server did not know the kind or resource: its CRD may have been
// installed since discovery was cached.
func remap[R any](f *Factory, lookup func() (R, error)) (R, error) {
	r, err := lookup()
	if meta.IsNoMatchError(err) {
		f.mapper.Reset()
		r, err = lookup()
	}
	return r, err
}

// Shared returns the factory's informer of T's resource in namespace (""
// for all namespaces; ignored for a cluster-scoped resource) with opts'
// selectors, making it on first request: the same *Informer[T] for the same
// type, namespace, label selector and field selector. T's kind comes from
// the factory's scheme and its resource from the server's discovery, which
// is cached and refreshed once when a kind is not found (a CRD installed
// since).
//
// Consumers of one informer must agree on its options, and an error says
// which they do not: Transform and KeyFunc (the same function, or both nil
// for the default: Go can only compare a function's code, so closures of
// one function literal count as the same), KeepManagedFields,
// DisableStreamingList, DisableDirectDecoding, PageSize, WatchTimeout,
// IdleMargin, Backoff (after defaults), StateDir, StateNoSync and Sharding. Two exceptions merge instead:
//   - Indexers are added to the informer's, before it has started (an
//     error after, wrapping ErrRunning); an index already there under the
//     same name must be the same function.
//   - ResyncPeriod: the informer resyncs at the shortest period asked for
//     before it started. A resync only fires events for differences, so
//     resyncing more often than a consumer asked changes nothing it sees.
//     After the start, asking for a shorter period than the informer's is
//     an error.
//
// The factory sets Name (the resource, "pods" or "deployments.apps") and
// Metrics; Logger defaults to FactoryOptions.Logger. The first consumer's
// Logger is the informer's.
//
// Built-in types are listed in protobuf, and watched with kinformer's
// direct decoder, as through a clientset; other types in JSON.
func Shared[T Object](f *Factory, namespace string, opts *Options[T]) (*Informer[T], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("kinformer: Shared[%s]: want a pointer to a struct type registered in the scheme (Dynamic for unstructured objects)", t)
	}
	obj, _ := reflect.New(t.Elem()).Interface().(runtime.Object)
	gvk, err := f.kindOf(obj)
	if err != nil {
		return nil, fmt.Errorf("kinformer: Shared[%s]: %w", t, err)
	}
	listKind := gvk.GroupVersion().WithKind(gvk.Kind + "List")
	if !f.scheme.Recognizes(listKind) {
		return nil, fmt.Errorf("kinformer: Shared[%s]: the scheme has no list kind %s", t, listKind)
	}
	mapping, err := remap(f, func() (*meta.RESTMapping, error) { return f.mapper.RESTMapping(gvk.GroupKind(), gvk.Version) })
	if err != nil {
		return nil, fmt.Errorf("kinformer: Shared[%s]: %w", t, err)
	}
	k, o := keyOf(f, t, mapping, namespace, opts)
	protobuf := supportsProtobuf(obj) && func() bool { l, err := f.scheme.New(listKind); return err == nil && supportsProtobuf(l) }()
	return share(f, k, o, func(o *Options[T]) (*Informer[T], error) {
		client, err := f.restClientLocked(gvk.GroupVersion())
		if err != nil {
			return nil, err
		}
		lw := &restListerWatcher{client: client, namespace: k.namespace, resource: k.gvr.Resource, kind: gvk.Kind, protobuf: protobuf,
			newList: func() (runtime.Object, error) { return f.scheme.New(listKind) }}
		return New[T](lw, o), nil
	})
}

// Dynamic returns the factory's informer of the resource gvr as
// unstructured objects (custom resources without Go types), shared as
// Shared's are. The resource must be known to the server's discovery
// (refreshed once if it is not), which also says whether it is namespaced.
func (f *Factory) Dynamic(gvr schema.GroupVersionResource, namespace string, opts *Options[*unstructured.Unstructured]) (*Informer[*unstructured.Unstructured], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	mapping, err := remap(f, func() (*meta.RESTMapping, error) {
		gvk, err := f.mapper.KindFor(gvr)
		if err != nil {
			return nil, err
		}
		return f.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	})
	if err != nil {
		return nil, fmt.Errorf("kinformer: Dynamic(%s): %w", gvr, err)
	}
	k, o := keyOf(f, reflect.TypeFor[*unstructured.Unstructured](), mapping, namespace, opts)
	return share(f, k, o, func(o *Options[*unstructured.Unstructured]) (*Informer[*unstructured.Unstructured], error) {
		return New[*unstructured.Unstructured](f.dyn.Resource(k.gvr).Namespace(k.namespace), o), nil
	})
}

// kindOf returns the one kind obj's type is registered as.
func (f *Factory) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, unversioned, err := f.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	if unversioned {
		return schema.GroupVersionKind{}, fmt.Errorf("%T is an unversioned type, not a resource", obj)
	}
	gvks = slices.DeleteFunc(gvks, func(k schema.GroupVersionKind) bool { return k.Version == runtime.APIVersionInternal })
	if len(gvks) != 1 {
		return schema.GroupVersionKind{}, fmt.Errorf("%T is registered as %d kinds %v, want one", obj, len(gvks), gvks)
	}
	return gvks[0], nil
}

// keyOf returns the sharing key of a request, and its options with what
// the factory sets.
func keyOf[T Object](f *Factory, t reflect.Type, mapping *meta.RESTMapping, namespace string, opts *Options[T]) (factoryKey, Options[T]) {
	var o Options[T]
	if opts != nil {
		o = *opts
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		namespace = ""
	}
	k := factoryKey{typ: t, gvr: mapping.Resource, namespace: namespace, label: o.LabelSelector, field: o.FieldSelector}
	// "a=1,b=2" and "b=2, a=1" select the same; a selector that does not
	// parse stays as it is, for the server to refuse.
	if s, err := labels.Parse(o.LabelSelector); err == nil {
		k.label = s.String()
	}
	if s, err := fields.ParseSelector(o.FieldSelector); err == nil {
		k.field = s.String()
	}
	o.Name = mapping.Resource.GroupResource().String()
	o.Metrics = f.metrics
	if o.StateDir == "" {
		o.StateDir = f.state
	}
	if nilSharder(o.Sharding) {
		o.Sharding = f.shard
	}
	if o.StateKey == "" && f.cfg != nil {
		// What a dynamic client cannot say: the server, resource and
		// namespace. (A typed informer's client says it itself.)
		o.StateKey = f.cfg.Host + " " + mapping.Resource.String() + " namespace=" + namespace
	}
	if o.Logger == nil {
		o.Logger = f.log
	}
	return k, o
}

// share returns the informer of k, merging o into it, or makes it with
// mk (called with f.mu held) and starts it if the factory has started.
func share[T Object](f *Factory, k factoryKey, o Options[T], mk func(*Options[T]) (*Informer[T], error)) (*Informer[T], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, ErrFactoryStopped
	}
	if e := f.entries[k]; e != nil {
		inf := e.inf.(*Informer[T])
		if err := merge(inf, e, o); err != nil {
			return nil, fmt.Errorf("kinformer: shared informer of %s: %w", describe(k, e.resource), err)
		}
		return inf, nil
	}
	inf, err := mk(&o)
	if err != nil {
		return nil, err
	}
	d := o.withDefaults()
	e := &factoryEntry{resource: o.Name, inf: inf, opts: &d, keyFunc: keyFuncID(o.KeyFunc), indexes: map[string]uintptr{},
		onHandler: inf.disp.onHandlerGoroutine}
	for name, fn := range o.Indexers {
		e.indexes[name] = funcID(fn)
	}
	f.entries[k] = e
	if f.started {
		f.startLocked(e)
	}
	return inf, nil
}

// describe names a shared informer in errors.
func describe(k factoryKey, resource string) string {
	s := resource
	if k.namespace != "" {
		s += " in namespace " + k.namespace
	}
	if k.label != "" {
		s += " with labels " + k.label
	}
	if k.field != "" {
		s += " with fields " + k.field
	}
	return s
}

// merge checks that o can share inf, whose entry is e, and adds its
// indexes and resync period. Nothing changes if it returns an error.
func merge[T Object](inf *Informer[T], e *factoryEntry, o Options[T]) error {
	have, want := e.opts.(*Options[T]), o.withDefaults()
	var diff []string
	for _, c := range []struct {
		name string
		same bool
	}{
		{"Transform", funcID(have.Transform) == funcID(want.Transform)},
		{"KeyFunc", e.keyFunc == keyFuncID(o.KeyFunc)},
		{"KeepManagedFields", have.KeepManagedFields == want.KeepManagedFields},
		{"DisableStreamingList", have.DisableStreamingList == want.DisableStreamingList},
		{"DisableDirectDecoding", have.DisableDirectDecoding == want.DisableDirectDecoding},
		{"PageSize", have.PageSize == want.PageSize},
		{"WatchTimeout", have.WatchTimeout == want.WatchTimeout},
		{"IdleMargin", have.IdleMargin == want.IdleMargin},
		{"Backoff", have.Backoff == want.Backoff},
		{"StateDir", have.StateDir == want.StateDir},
		{"StateNoSync", have.StateNoSync == want.StateNoSync},
		{"Sharding", sameSharder(have.Sharding, want.Sharding)},
	} {
		if !c.same {
			diff = append(diff, c.name)
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("already made with a different %s", strings.Join(diff, ", "))
	}

	added := map[string]IndexFunc[T]{}
	for name, fn := range want.Indexers {
		id, ok := e.indexes[name]
		switch {
		case !ok:
			added[name] = fn
		case id != funcID(fn):
			return fmt.Errorf("index %q already exists with another function", name)
		}
	}
	resync := have.ResyncPeriod
	if p := want.ResyncPeriod; p > 0 && (resync <= 0 || p < resync) {
		resync = p
	}
	if resync != have.ResyncPeriod && inf.isStarted() {
		now := "does not resync"
		if have.ResyncPeriod > 0 {
			now = "resyncs every " + have.ResyncPeriod.String()
		}
		return fmt.Errorf("%w: it %s, and cannot resync every %s now", ErrRunning, now, want.ResyncPeriod)
	}
	if len(added) > 0 {
		if err := inf.AddIndexers(added); err != nil {
			return err
		}
		for name, fn := range added {
			e.indexes[name] = funcID(fn)
		}
	}
	if resync != have.ResyncPeriod {
		if err := inf.setResync(resync); err != nil {
			return err
		}
		have.ResyncPeriod = resync
	}
	return nil
}

// isStarted reports whether the informer has ever run.
func (inf *Informer[T]) isStarted() bool {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.started
}

// setResync changes the resync period of an informer that has never run:
// its loop reads the period only once running.
func (inf *Informer[T]) setResync(d time.Duration) error {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	if inf.started {
		return fmt.Errorf("%w: the resync period can only change before the informer starts", ErrRunning)
	}
	inf.loop.opts.ResyncPeriod = d
	return nil
}

// funcID identifies a function value (0 for nil). Go cannot compare
// functions, and reflect shows only their code, which two closures of one
// literal share even when they captured different values. A func value is
// one pointer, to its closure (code and captured variables; a static one
// for a function without captures): that pointer is its identity. The same
// value passed twice is the same; two closures are different, even equal
// ones (a conservative error, never a wrong sharing).
func funcID(fn any) uintptr {
	v := reflect.ValueOf(fn)
	if !v.IsValid() || v.Kind() != reflect.Func || v.IsNil() {
		return 0
	}
	p := reflect.New(v.Type()) // a *func: read the func value's one word
	p.Elem().Set(v)
	return uintptr(*(*unsafe.Pointer)(p.UnsafePointer()))
}

// keyFuncID is funcID of a KeyFunc, with MetaNamespaceKey given
// explicitly the same as none (the default).
func keyFuncID[T Object](fn KeyFunc[T]) uintptr {
	if fn == nil || goruntime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() == metaNamespaceKeyName {
		return 0
	}
	return funcID(fn)
}

// metaNamespaceKeyName is the name the runtime gives every instantiation of
// MetaNamespaceKey named in non-generic code ("….MetaNamespaceKey[...]").
// (Named in generic code, as in Options' default, it is a wrapper closure
// instead, with another name and code.)
var metaNamespaceKeyName = goruntime.FuncForPC(reflect.ValueOf(MetaNamespaceKey[*metav1.PartialObjectMetadata]).Pointer()).Name()

// Start starts every informer the factory has made, and makes Shared and
// Dynamic start the ones made later at once. Each runs on a goroutine of
// the factory until Stop or StopShared. Start returns at once; it is a
// no-op on a started or stopped factory.
func (f *Factory) Start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started || f.stopped {
		return
	}
	f.started = true
	for _, e := range f.entries {
		f.startLocked(e)
	}
}

func (f *Factory) startLocked(e *factoryEntry) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.inf.Run(ctx); err != nil && f.log != nil {
			// Someone else started it: it runs, but not under the factory.
			f.log.Warn("kinformer: a shared informer was started outside its factory", "resource", e.resource, "error", err.Error())
		}
	}()
}

// WaitForSync waits until every informer the factory has made so far has
// synced (nil), until one fails in a way retrying cannot fix (the first
// such error, [IsPersistent], prefixed with the resource: "configmaps:
// …", apierrors.IsForbidden and the like still work on it), or until ctx
// ends (ctx.Err()). Informers keep retrying in every case. Call Start
// first: informers that do not run never sync.
func (f *Factory) WaitForSync(ctx context.Context) error {
	f.mu.Lock()
	entries := make(map[factoryKey]*factoryEntry, len(f.entries))
	for k, e := range f.entries {
		entries[k] = e
	}
	f.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	for k, e := range entries {
		g.Go(func() error {
			err := e.inf.WaitForSync(gctx)
			if err == nil || gctx.Err() != nil && errors.Is(err, gctx.Err()) {
				return err
			}
			return fmt.Errorf("%s: %w", describe(k, e.resource), err)
		})
	}
	err := g.Wait()
	if err != nil && ctx.Err() != nil && !IsPersistent(err) {
		return ctx.Err()
	}
	return err
}

// Stop stops every informer of the factory and waits until their
// goroutines have ended. The factory is then done: Start does nothing,
// Shared and Dynamic return ErrFactoryStopped. The informers keep their
// caches, which consumers may still read.
//
// Called from a handler of one of the factory's informers, Stop cannot
// wait (the handler would wait for itself): it stops them and returns, and
// a later Stop from elsewhere waits.
func (f *Factory) Stop() {
	f.mu.Lock()
	f.stopped = true
	for _, e := range f.entries {
		f.retireLocked(e)
	}
	clear(f.entries)
	retired := slices.Clone(f.retired)
	f.mu.Unlock()
	wait(retired)
}

// StopShared stops a shared informer alone (its CRD was deleted, say) and
// waits until it has ended, leaving the factory's other informers running.
// The factory forgets it: a later Shared or Dynamic makes a new one. It
// reports whether inf was the factory's. As Stop, called from a handler of
// the factory's informers it does not wait.
func StopShared[T Object](f *Factory, inf *Informer[T]) bool {
	f.mu.Lock()
	var found *factoryEntry
	for k, e := range f.entries {
		if e.inf == sharedInformer(inf) {
			found = e
			delete(f.entries, k)
			f.retireLocked(e)
			break
		}
	}
	f.mu.Unlock()
	if found == nil {
		return false
	}
	wait([]*factoryEntry{found})
	return true
}

// retireLocked stops e and keeps it until its goroutine has ended, for
// Stop to join.
func (f *Factory) retireLocked(e *factoryEntry) {
	if e.cancel != nil {
		e.cancel()
	}
	e.inf.dropMetrics()
	f.retired = slices.DeleteFunc(f.retired, func(r *factoryEntry) bool { return r.ended() })
	f.retired = append(f.retired, e)
}

// ended reports whether e's goroutine has ended, or never began.
func (e *factoryEntry) ended() bool {
	if e.done == nil {
		return true
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// wait waits for the goroutines of stopped entries, unless called from a
// handler of one of them: that one would wait for itself, and another
// could be waiting for this one.
func wait(entries []*factoryEntry) {
	for _, e := range entries {
		if e.onHandler() {
			return
		}
	}
	for _, e := range entries {
		if e.done != nil {
			<-e.done
		}
	}
}

// restClientLocked returns the factory's REST client for a group version,
// configured as client-go's generated clients are.
func (f *Factory) restClientLocked(gv schema.GroupVersion) (*rest.RESTClient, error) {
	if c := f.clients[gv]; c != nil {
		return c, nil
	}
	cfg := rest.CopyConfig(f.base)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = f.codecs
	c, err := rest.RESTClientForConfigAndClient(cfg, f.http)
	if err != nil {
		return nil, fmt.Errorf("kinformer: client for %s: %w", gv, err)
	}
	f.clients[gv] = c
	return c, nil
}

// supportsProtobuf reports whether the protobuf serializer can decode
// into obj (the generated types of k8s.io/api can).
func supportsProtobuf(obj runtime.Object) bool {
	_, ok := obj.(interface {
		Reset()
		Unmarshal([]byte) error
	})
	return ok
}

// restListerWatcher lists and watches one resource on a REST client, as a
// clientset's typed client does. It also offers GetClient and GetNamespace,
// like those clients, so that the informer decodes its watches itself
// (direct.go).
type restListerWatcher struct {
	client    rest.Interface
	namespace string // "": all namespaces, or cluster-scoped
	resource  string
	kind      string
	protobuf  bool // ask for protobuf, unless the config says otherwise
	newList   func() (runtime.Object, error)
}

func (lw *restListerWatcher) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := lw.newList()
	if err != nil {
		return nil, err
	}
	err = lw.client.Get().
		UseProtobufAsDefaultIfPreferred(lw.protobuf).
		NamespaceIfScoped(lw.namespace, lw.namespace != "").
		Resource(lw.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	if err != nil {
		return nil, err
	}
	return list, nil
}

func (lw *restListerWatcher) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return lw.client.Get().
		UseProtobufAsDefaultIfPreferred(lw.protobuf).
		NamespaceIfScoped(lw.namespace, lw.namespace != "").
		Resource(lw.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

func (lw *restListerWatcher) GetClient() rest.Interface { return lw.client }
func (lw *restListerWatcher) GetNamespace() string      { return lw.namespace }

// resourceName tells the direct decoder the resource the factory's
// discovery found, so that it does not look it up again (direct.go).
func (lw *restListerWatcher) resourceName() string { return lw.resource }

// kindName tells the direct decoder the kind its objects have (the
// scheme's), and jsonOnly that types without protobuf are watched in JSON.
func (lw *restListerWatcher) kindName() string { return lw.kind }
func (lw *restListerWatcher) jsonOnly() bool   { return !lw.protobuf }

// timeoutOf is the client-side timeout client-go's clients give a request
// with TimeoutSeconds.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
