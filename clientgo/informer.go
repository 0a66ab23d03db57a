package clientgo

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/wait"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/util/watchlist"
	"k8s.io/klog/v2"

	"github.com/kinformer/kinformer"
)

// minimumResyncPeriod is client-go's: a shorter handler resync is raised
// to it.
const minimumResyncPeriod = time.Second

// crashPause is client-go's pause after a handler's recovered panic (its
// processorListener sleeps a second before the next notification): a
// handler that always panics, with utilruntime.ReallyCrash off, does not
// spin through its queue.
const crashPause = time.Second

// NewSharedIndexInformer is client-go's cache.NewSharedIndexInformer on a
// kinformer informer: it lists and watches through lw, caches objects of
// example's type, resyncs each handler every
// defaultEventHandlerResyncPeriod (0: never) unless it asks for its own
// period, and indexes with indexers. client-go's namespace index
// (cache.NamespaceIndex with cache.MetaNamespaceIndexFunc) is kinformer's
// built-in one, built only when first queried.
//
// lw's client is not visible to kinformer, so objects are decoded by it;
// use Wrap over kinformer.New with a clientset's typed client, or a
// kinformer.Factory, to keep kinformer's own decoders, and for kinformer's
// own options (Compact: a cache of bytes).
func NewSharedIndexInformer(lw cache.ListerWatcher, example runtime.Object, defaultEventHandlerResyncPeriod time.Duration, indexers cache.Indexers) cache.SharedIndexInformer {
	opts := &kinformer.Options[kinformer.Object]{Name: typeName(example)}
	var extra cache.Indexers
	for name, f := range indexers {
		if name == kinformer.IndexNamespace && sameFunc(f, cache.MetaNamespaceIndexFunc) {
			continue // the built-in namespace index
		}
		if extra == nil {
			extra = cache.Indexers{}
		}
		extra[name] = f
	}
	inf := kinformer.New[kinformer.Object](listerWatcher{lw}, opts)
	s := newInformer(inf, fmt.Sprintf("%T", example), defaultEventHandlerResyncPeriod, lw)
	if err := s.AddIndexers(extra); err != nil {
		// Only a nil IndexFunc can fail on a new informer.
		panic(fmt.Sprintf("clientgo.NewSharedIndexInformer: %v", err))
	}
	return s
}

// Wrap returns inf as a client-go SharedIndexInformer, with no default
// handler resync: it is WrapWithResync(inf, 0). Where a resync period is
// at hand (a client-go factory's, a NewSharedIndexInformer's), use
// WrapWithResync or ForFactory, or it is lost. Its handlers and indexes are
// inf's; its Run runs inf (or, if inf already runs, from a Factory for
// example, waits with it until stopped).
func Wrap[T kinformer.Object](inf *kinformer.Informer[T]) cache.SharedIndexInformer {
	return WrapWithResync(inf, 0)
}

// WrapWithResync is Wrap with a default handler resync period, as
// NewSharedIndexInformer's defaultEventHandlerResyncPeriod: every handler
// that asks for no period of its own gets OnUpdate(obj, obj) for every
// cached object that often (0: never).
func WrapWithResync[T kinformer.Object](inf *kinformer.Informer[T], defaultEventHandlerResyncPeriod time.Duration) cache.SharedIndexInformer {
	typ := reflect.TypeFor[T]().String()
	if reflect.TypeFor[T]().Kind() == reflect.Interface {
		typ = inf.Name()
	}
	return newInformer(inf, typ, defaultEventHandlerResyncPeriod, nil)
}

// typeName names example's type for kinformer's logs and metrics: "pods"
// style names are a Factory's; here, its kind in lower case.
func typeName(example runtime.Object) string {
	t := reflect.TypeOf(example)
	if t == nil {
		return "object"
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return strings.ToLower(t.Name())
}

// listerWatcher is a client-go ListerWatcher in kinformer's shape.
type listerWatcher struct{ lw cache.ListerWatcher }

func (a listerWatcher) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	if lw, ok := a.lw.(cache.ListerWithContext); ok {
		return lw.ListWithContext(ctx, opts)
	}
	return a.lw.List(opts)
}

func (a listerWatcher) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if lw, ok := a.lw.(cache.WatcherWithContext); ok {
		return lw.WatchWithContext(ctx, opts)
	}
	return a.lw.Watch(opts)
}

// ProbeClient passes on lw's REST client if it offers one (see
// kinformer.Options.ProbeAfter): a plain cache.ListWatch hides its client,
// and its watches' connections are then not probed.
func (a listerWatcher) ProbeClient() rest.Interface {
	if p, ok := a.lw.(interface{ ProbeClient() rest.Interface }); ok {
		return p.ProbeClient()
	}
	return nil
}

// IsWatchListSemanticsUnSupported passes on what lw says of itself (a fake
// client cannot stream its lists).
func (a listerWatcher) IsWatchListSemanticsUnSupported() bool {
	return watchlist.DoesClientNotSupportWatchListSemantics(a.lw)
}

// informer is a kinformer informer as a client-go SharedIndexInformer.
type informer[T kinformer.Object] struct {
	inf           *kinformer.Informer[T]
	typ           string // the object type, for names ("*v1.Pod")
	defaultResync time.Duration
	indexer       *indexer[T]
	reflector     *cache.Reflector // never run: what watch error handlers are given

	mu          sync.Mutex // guards everything below
	started     bool
	stopped     bool
	runCtx      context.Context // the run's; nil when not running
	resyncCheck time.Duration   // client-go's resyncCheckPeriod: the shortest handler resync
	handlers    map[*handle[T]]struct{}
	watchErr    cache.WatchErrorHandlerWithContext
	errReg      *kinformer.Registration
}

func newInformer[T kinformer.Object](inf *kinformer.Informer[T], typ string, resync time.Duration, lw cache.ListerWatcher) *informer[T] {
	if lw == nil {
		lw = &cache.ListWatch{}
	}
	s := &informer[T]{
		inf:           inf,
		typ:           typ,
		defaultResync: resync,
		resyncCheck:   resync,
		handlers:      map[*handle[T]]struct{}{},
		reflector: cache.NewReflectorWithOptions(lw, nil, cache.NewStore(cache.MetaNamespaceKeyFunc),
			cache.ReflectorOptions{Name: typ, TypeDescription: typ}),
	}
	s.indexer = &indexer[T]{c: inf.Cache(), s: s}
	// Errors go to the watch error handler, client-go's default until one
	// is set: kinformer's Error events are what its list and watch met.
	s.errReg = inf.AddHandlerFuncs(kinformer.HandlerFuncs[T]{Error: s.watchError})
	return s
}

// watchError passes an error of the informer's lists and watches to the
// watch error handler (client-go's default one until one is set), with the
// context of RunWithContext: its logger is the one klog.FromContext gives
// there. A routine reconnect (kinformer.Event.Routine: the server down or
// busy, before the backoff has grown), which client-go's reflector
// retries without calling its handler either, is logged at V(4) through
// that logger instead: the one classification kinformer's own log, its
// backoff and kcr's go by.
func (s *informer[T]) watchError(e kinformer.Event[T]) {
	s.mu.Lock()
	h, ctx := s.watchErr, s.runCtx
	s.mu.Unlock()
	if ctx == nil {
		ctx = context.Background()
	}
	if e.Routine {
		klog.FromContext(ctx).V(4).Info("Watch failed, reconnecting", "reflector", s.typ, "type", s.typ, "failure", e.Failure.String(), "err", e.Err)
		return
	}
	if h == nil {
		h = cache.DefaultWatchErrorHandler
	}
	h(ctx, s.reflector, e.Err)
}

func (s *informer[T]) GetStore() cache.Store     { return s.indexer }
func (s *informer[T]) GetIndexer() cache.Indexer { return s.indexer }

func (s *informer[T]) GetController() cache.Controller { return controller[T]{s} }

func (s *informer[T]) Run(stopCh <-chan struct{}) {
	s.RunWithContext(wait.ContextForChannel(stopCh))
}

// RunWithContext runs the informer until ctx ends, once: as client-go's,
// a second Run returns at once, and a stopped informer stays stopped
// (IsStopped), refusing new handlers. If the kinformer informer already
// runs (a Factory's), it waits until ctx ends without starting it again.
func (s *informer[T]) RunWithContext(ctx context.Context) {
	s.mu.Lock()
	if s.started {
		s.mu.Unlock()
		klog.FromContext(ctx).Info("Warning: the sharedIndexInformer has started, run more than once is not allowed")
		return
	}
	s.started = true
	runCtx, cancel := context.WithCancel(ctx)
	s.runCtx = runCtx
	s.mu.Unlock()
	// client-go's %T cannot tell a kinformer informer from its own behind
	// the interface: say once that this one is, and how it caches.
	klog.FromContext(ctx).Info("Starting kinformer informer", "resource", s.inf.Name(), "type", s.typ, "mode", s.mode())

	if err := s.inf.Run(runCtx); errors.Is(err, kinformer.ErrRunning) {
		<-runCtx.Done()
	}

	s.mu.Lock()
	s.stopped = true
	s.runCtx = nil
	s.mu.Unlock()
	cancel()
}

// stopping returns a channel closed when the current run ends; nil (never
// closed) when the informer does not run.
func (s *informer[T]) stopping() <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.runCtx == nil {
		return nil
	}
	return s.runCtx.Done()
}

func (s *informer[T]) HasSynced() bool { return s.inf.HasSynced() }

func (s *informer[T]) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{name: "SharedIndexInformer " + s.typ, done: s.inf.Synced()}
}

func (s *informer[T]) LastSyncResourceVersion() string { return s.inf.ResourceVersion() }

func (s *informer[T]) SetWatchErrorHandler(handler cache.WatchErrorHandler) error {
	if handler == nil {
		return s.SetWatchErrorHandlerWithContext(nil)
	}
	return s.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) { handler(r, err) })
}

// SetWatchErrorHandlerWithContext sets what is called with each error the
// informer's lists and watches meet (its Error events), before the start.
// The Reflector it is given is never run: it carries the informer's name.
func (s *informer[T]) SetWatchErrorHandlerWithContext(handler cache.WatchErrorHandlerWithContext) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("informer has already started")
	}
	s.watchErr = handler
	return nil
}

// SetTransform sets the transform, before the start. It is kinformer's
// Options.Transform: it runs after managedFields are dropped, and an
// error (or an object of another type) skips the object with an Error
// event naming it.
func (s *informer[T]) SetTransform(handler cache.TransformFunc) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.started {
		return errors.New("informer has already started")
	}
	return s.inf.SetTransform(Transform[T](handler))
}

// Transform is a client-go TransformFunc as kinformer's Options.Transform
// of T (nil for nil): an object of another type than the one it was given
// is an error, which skips the object with an Error event naming it.
func Transform[T kinformer.Object](fn cache.TransformFunc) func(T) (T, error) {
	if fn == nil {
		return nil
	}
	return func(obj T) (T, error) {
		out, err := fn(obj)
		if err != nil {
			return obj, err
		}
		t, ok := out.(T)
		if !ok {
			return obj, fmt.Errorf("the transform returned a %T, not a %T", out, obj)
		}
		return t, nil
	}
}

func (s *informer[T]) IsStopped() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.stopped
}

// AddIndexers adds indexes before or while the informer runs; each is
// built from the cached objects. As client-go's, it fails once the
// informer has stopped, and for a name that is taken (adding client-go's
// namespace index where kinformer's built-in one is does nothing).
func (s *informer[T]) AddIndexers(indexers cache.Indexers) error {
	s.mu.Lock()
	stopped := s.stopped
	s.mu.Unlock()
	if stopped {
		return errors.New("indexer was not added because it has stopped already")
	}
	return s.indexer.AddIndexers(indexers)
}

// controller is the informer as a cache.Controller.
type controller[T kinformer.Object] struct{ s *informer[T] }

func (c controller[T]) Run(stopCh <-chan struct{})          { c.s.Run(stopCh) }
func (c controller[T]) RunWithContext(ctx context.Context)  { c.s.RunWithContext(ctx) }
func (c controller[T]) HasSynced() bool                     { return c.s.HasSynced() }
func (c controller[T]) HasSyncedChecker() cache.DoneChecker { return c.s.HasSyncedChecker() }
func (c controller[T]) LastSyncResourceVersion() string     { return c.s.LastSyncResourceVersion() }
