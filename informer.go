package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"sync"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/mutation"
	"github.com/kinformer/kinformer/internal/status"
	"github.com/kinformer/kinformer/internal/store"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Object is what an informer caches: any Kubernetes object with metadata,
// such as *corev1.Pod, *unstructured.Unstructured or
// *metav1.PartialObjectMetadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// ListerWatcher is the shape of every client-go resource client: the typed
// clientset (clientset.CoreV1().Pods(ns)), the dynamic client
// (dyn.Resource(gvr).Namespace(ns)) and the metadata client. L is the list
// type the client returns, for example *corev1.PodList; Go infers it.
type ListerWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// KeyFunc returns the cache key of an object.
type KeyFunc[T Object] func(obj T) string

// MetaNamespaceKey is the default key: "namespace/name", or just "name" for
// cluster-scoped objects.
func MetaNamespaceKey[T Object](obj T) string { return store.MetaNamespaceKey(obj) }

// Informer lists and watches one resource, keeps a Cache of it in sync with
// the API server, and delivers every change to the registered handlers.
//
// Contract:
//   - Every registration sees the events of one object in the order the
//     server produced them. Registrations are independent of each other:
//     each runs on its own goroutine, one event at a time, and a slow one
//     delays only itself (its queue grows, see Registration.Pending), never
//     the watch or the other registrations. A consumer that folds state from
//     several event types registers them together ([Informer.AddHandlerFuncs]
//     or [Informer.AddHandler]), not as separate registrations.
//   - The cache is updated before the event is queued, so a handler may find
//     the cache ahead of the event it is handling, never behind.
//   - Objects in events and in the cache are shared: do not modify them.
//   - A re-list (after 410 Gone, or a resync) is diffed against the cache:
//     Deleted for vanished objects, Added for new ones, Modified only for
//     objects whose resourceVersion changed; their Cause is CauseRelist.
//   - A stopped informer keeps its cache and resourceVersion; started again
//     it resumes from them, so the events after a restart are the changes
//     made while it was stopped.
//
// An Informer is safe for concurrent use. Create it with New.
type Informer[T Object] struct {
	cache  *Cache[T]
	status *status.Status
	disp   dispatcher[T]
	// resends are the ResendEvery schedules, run by each run.
	resends resender
	log     *slog.Logger // the informer's own logs
	hlog    *slog.Logger // handler panics: never discarded by default
	name    string
	obs     *observer // nil without Options.Metrics
	// mutationPanics: the environment said "panic" at New (EnvMutationDetector).
	mutationPanics bool
	// detector is the mutation detector (Options.DetectMutations), which
	// each run runs; nil: off. Set before the first run, under runMu.
	detector *mutation.Detector[T]

	// loop is the watch loop and its state (the writer of cache and
	// status among them). Runs never overlap, so it passes from one run's
	// goroutine to the next. Other goroutines touch it only before the
	// first run, under runMu (SetTransform, the mutation detector), to
	// offer it a configuration while it runs (reconfigure), or through
	// what it publishes: status, the cache and, if sharded, shard.
	loop *loop[T]

	shard   *sharePublished // the loop's share, if sharded (Options.Sharding)
	sharder Sharder         // Options.Sharding

	runMu   sync.Mutex         // guards cfg, started, ctx, cancel and done
	cfg     *config[T]         // the configuration: the loop's, or offered to it (reconfigure)
	started bool               // has ever run
	ctx     context.Context    // the current run's context; nil when stopped
	cancel  context.CancelFunc // cancels the current run; nil when stopped
	done    chan struct{}      // closed when the current run has fully ended
}

// New returns an informer for the resource lw lists and watches, typically
// a client-go resource client such as clientset.CoreV1().Pods(namespace);
// Go infers L from it. A nil opts means the defaults. The informer does
// nothing until Start or Run.
//
// T must be the item type of L's list: New panics, naming both, if L is a
// list whose items are not T (New[*corev1.Pod] over a ConfigMaps client).
func New[T Object, L runtime.Object](lw ListerWatcher[L], opts *Options[T]) *Informer[T] {
	return newInformer(lw, opts, nil)
}

// newInformer is New of objType's objects (nil: T's; Factory.Typed's
// interface T).
func newInformer[T Object, L runtime.Object](lw ListerWatcher[L], opts *Options[T], objType reflect.Type) *Informer[T] {
	checkItemType[T, L]()
	o := compile(opts, objType)
	log := o.Logger
	hlog := o.Logger
	if log == nil {
		log = slog.New(slog.DiscardHandler)
		hlog = slog.Default()
	}
	if opts != nil && opts.Name != "" {
		log, hlog = log.With("resource", o.Name), hlog.With("resource", o.Name)
	}
	inf := &Informer[T]{
		cache:  newCache(cacheKeyFunc(o), o.Indexers),
		status: status.New(),
		log:    log,
		hlog:   hlog,
		name:   o.Name,
	}
	if o.Compact && !inf.cache.s.SetCompact(o.objectType(), !o.CompactUncompressed, o.Sharding != nil) {
		o.Compact = false
		hlog.Warn("kinformer: Options.Compact ignored: the objects' type is an interface, there is no type to decode the cache's bytes into", "type", o.objectType().String())
	}
	if o.Metrics != nil {
		inf.obs = newObserver(o.Metrics, o.Name)
		inf.disp.obs = inf.obs
		inf.obs.source = &metricSource{
			name:    o.Name,
			objects: inf.cache.Len,
			synced:  inf.HasSynced,
			depth:   inf.disp.depth,
			last:    inf.status.LastEventTime,
			failing: func() bool { err, _ := inf.LastError(); return err != nil },
			startup: inf.startupBusy,
		}
		o.Metrics.add(inf.obs.source)
	}
	src := describe.Of(lw)
	inf.loop = newLoop(lw, src, o, inf.cache, inf.status, &inf.disp, log, inf.obs)
	inf.cfg = o
	if err := o.fieldsErr; err != nil {
		// An informer that cannot keep what was asked does not start.
		hlog.Error("kinformer: " + err.Error())
		inf.status.Fail(err)
		inf.status.SetSync(false, err)
	}
	inf.resends.resend = func(reg *Registration) { inf.Resend(reg) }
	inf.resends.synced = inf.Synced
	envOn, panics := mutationEnv()
	inf.mutationPanics = panics
	if !o.Compact && (envOn || o.DetectMutations || src.DetectMutations) {
		inf.detectMutations()
	}
	if sh := inf.loop.sh; sh != nil {
		inf.shard, inf.sharder = sh.pub, o.Sharding
		inf.disp.admit = func(e Event[T]) admission { return admit(sh.pub, e) }
	}
	return inf
}

// cacheKeyFunc is o's KeyFunc for newCache: nil for the default, which the
// cache then knows it has (a key is namespace/name: a compact cache can
// take objects undecoded).
func cacheKeyFunc[T Object](o *config[T]) KeyFunc[T] {
	if o.defaultKey {
		return nil
	}
	return o.KeyFunc
}

// Name returns the informer's name: Options.Name, or its default.
func (inf *Informer[T]) Name() string { return inf.name }

// checkItemType panics if L is a list type (a struct with an Items slice)
// whose items are neither T nor what T points to.
func checkItemType[T Object, L runtime.Object]() {
	lt := reflect.TypeFor[L]()
	if lt.Kind() != reflect.Pointer || lt.Elem().Kind() != reflect.Struct {
		return // an interface or an unusual list: checked per item when listing
	}
	f, ok := lt.Elem().FieldByName("Items")
	if !ok || f.Type.Kind() != reflect.Slice {
		return
	}
	item, want := f.Type.Elem(), reflect.TypeFor[T]()
	if item == want || reflect.PointerTo(item) == want {
		return
	}
	if item.Kind() == reflect.Interface || item == reflect.TypeFor[runtime.RawExtension]() {
		return // items of any type (metav1.List): checked one by one
	}
	if want.Kind() == reflect.Interface && (item.Implements(want) || reflect.PointerTo(item).Implements(want)) {
		return
	}
	panic(fmt.Sprintf("kinformer.New: the client lists %s, whose items are %s, not %s", lt, item, want))
}

// AddIndexers adds indexes to the informer's cache, before it starts or
// while it runs (client-go's AddIndexers): each new index is built from
// the objects cached at that moment and kept up to date from then on; the
// informer's writes wait while it is built. It returns an error naming the
// index if one of that name exists, or wrapping ErrFields if one reads
// fields Options.Fields leave out, and adds none of them then.
func (inf *Informer[T]) AddIndexers(indexers map[string]IndexFunc[T]) error {
	fields := inf.configuration().fields
	if err := checkReads(fields, nil, indexers); err != nil {
		return fmt.Errorf("kinformer: AddIndexers: %w", err)
	}
	return inf.cache.s.AddIndexers(indexFuncs(indexers))
}

// Cache returns the informer's cache.
func (inf *Informer[T]) Cache() *Cache[T] { return inf.cache }

// ResourceVersion returns the last resourceVersion the informer has seen,
// from a list, an event or a bookmark; "" before the first list.
func (inf *Informer[T]) ResourceVersion() string { return inf.status.ResourceVersion() }

// HasSynced reports whether the cache has been filled by a complete list.
// It stays true across Stop and Start.
func (inf *Informer[T]) HasSynced() bool { return inf.status.Synced.Load() }

// Synced returns a channel that is closed once the informer has synced
// (HasSynced), to wait for it in a select; unlike WaitForSync it does not
// end on a persistent error.
func (inf *Informer[T]) Synced() <-chan struct{} { return inf.status.WhenSynced() }

// WaitForSync blocks until the cache is synced (nil), until ctx ends
// (ctx.Err()), or until listing fails in a way retrying cannot fix — 403,
// 401, 404, a bad selector ([IsPersistent]) — and returns that error. The
// informer itself keeps retrying with backoff in every case. After a
// Factory's consumer asked a running informer for more fields, it also
// waits until the re-list that gives its objects those fields has ended
// (HasSynced stays true meanwhile).
func (inf *Informer[T]) WaitForSync(ctx context.Context) error {
	return inf.status.WaitSync(ctx)
}

// WaitForResourceVersion blocks until the cache reflects resourceVersion
// rv or a later one (nil), or until ctx ends (ctx.Err()). A controller that
// has just written an object waits for its write's resourceVersion before
// reading the cache again, instead of acting twice on a stale cache.
// resourceVersions are compared as Kubernetes defines it for one resource
// (k8s.io/apimachinery/pkg/util/resourceversion); an rv that is not a
// well-formed resourceVersion is an error at once.
func (inf *Informer[T]) WaitForResourceVersion(ctx context.Context, rv string) error {
	if _, err := resourceversion.CompareResourceVersion(rv, rv); err != nil {
		return fmt.Errorf("kinformer: WaitForResourceVersion: %w", err)
	}
	return inf.status.WaitRV(ctx, rv)
}

// LastError returns the last persistent error ([IsPersistent]: 403, 404,
// …) of the informer's lists and watches, and since when such errors have
// gone on; nil once a list or watch works again (a passing failure after a
// 403 does not clear it: it does not show the permission is back). Unlike WaitForSync it
// also tells an informer that synced and then lost its permission or its
// resource (a CRD deleted): the cache is then frozen at its last state, and
// a readiness check should say so.
func (inf *Informer[T]) LastError() (err error, since time.Time) {
	return inf.status.LastError()
}

// Reconnecting reports whether the informer has lost its list or watch
// (the server down or refusing, the way to it cut) and is waiting to try
// again, and since when; false once a list or watch works again. Unlike
// LastError it also covers routine failures (a first reconnect after a
// cut connection): a synced informer that is reconnecting serves its
// cache as it was, and falls behind the server until it is back.
func (inf *Informer[T]) Reconnecting() (reconnecting bool, since time.Time) {
	since = inf.status.ReconnectingSince()
	return !since.IsZero(), since
}

// AddEventHandler registers fn for events of type t. It returns
// ErrUnknownEventType for any t other than Added, Modified, Deleted,
// Bookmark or Error. A handler for Added registered when the cache already
// holds objects first receives Added for each of them (CauseReplay), then
// live events.
//
// Each registration runs independently of the others: a handler for
// Deleted may run before a separately registered handler for Added has
// seen the same object. To fold state from several types, register them
// together with AddHandlerFuncs.
func (inf *Informer[T]) AddEventHandler(t EventType, fn func(Event[T])) (*Registration, error) {
	bit, ok := t.bit()
	if !ok {
		return nil, fmt.Errorf("%w %q: want one of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR", ErrUnknownEventType, string(t))
	}
	if fn == nil {
		return nil, fmt.Errorf("kinformer: nil handler for %s", t)
	}
	return inf.addListener(bit, fn, fn), nil
}

// AddHandlerFuncs registers callbacks for several event types as one
// ordered registration: they are called one at a time, in the order of the
// events, so an object's Added always comes before its Modified and
// Deleted. Like AddEventHandler, Added first receives every object already
// cached.
func (inf *Informer[T]) AddHandlerFuncs(h HandlerFuncs[T]) *Registration {
	return inf.addListener(h.mask(), h.call, h.Added, h.Modified, h.Deleted, h.Bookmark, h.Error)
}

// AddHandler registers fn for events of every type, delivered in one
// ordered stream, as AddHandlerFuncs with the same function for each type.
func (inf *Informer[T]) AddHandler(fn func(Event[T])) *Registration {
	if fn == nil {
		fn = func(Event[T]) {} // a registration that ignores everything
	}
	return inf.addListener(1<<len(eventTypes)-1, fn, fn)
}

// addListener registers fn; named is the functions it calls, the first
// of which names the handler (run.go).
func (inf *Informer[T]) addListener(mask uint8, fn func(Event[T]), named ...func(Event[T])) *Registration {
	l := newListener(mask, fn, inf.hlog)
	l.name = handlerName(named)
	return inf.disp.add(l, inf.cache, inf.status.ResourceVersion, inf.status.Synced.Load)
}

// Resend queues, for reg alone, a Modified event for every cached object,
// with Old the same object and Cause CauseResend, after the events already
// queued for it: client-go's periodic resync of a handler, which a
// controller uses to look at every object again. It is not a re-list and
// nothing is asked of the server (Options.ResyncPeriod re-lists). It
// returns how many events it queued: 0 if reg is not registered or does
// not handle Modified.
func (inf *Informer[T]) Resend(reg *Registration) int {
	if reg == nil {
		return 0
	}
	return inf.disp.resend(reg, inf.cache, inf.status.ResourceVersion)
}

// RemoveEventHandler unregisters a handler: its queued events are dropped,
// and once RemoveEventHandler returns the handler is not running and will
// never be called again (it waits for a call in progress to end). A handler
// may remove itself; its current call then completes after the removal.
// Any other caller waits: a handler removing another registration too (two
// handlers that remove each other from their calls at once wait for each
// other for ever), and a goroutine a handler starts to remove itself (the
// handler must not wait for that goroutine). An unknown or nil
// registration is a no-op.
func (inf *Informer[T]) RemoveEventHandler(reg *Registration) {
	inf.resends.set(reg, 0)
	inf.disp.remove(reg)
}

// Leave unregisters reg the way a [View] lets an informer go: reg is given
// no new events, but first handles those already queued for it, then
// Deleted, with [CauseLeave], for every object cached at that point of its
// stream (if it wants Deleted), and is then removed. The returned channel
// is closed once it is (at once for an unknown or nil registration). The
// informer must run for the events to be handled: release or stop it after
// the channel is closed. A RemoveEventHandler of reg meanwhile ends the
// leave at once.
func (inf *Informer[T]) Leave(reg *Registration) <-chan struct{} {
	done := make(chan struct{})
	if reg == nil {
		close(done)
		return done
	}
	inf.leave(reg, func() { close(done) })
	return done
}

// leave is Leave, calling left once reg has left.
func (inf *Informer[T]) leave(reg *Registration, left func()) {
	inf.resends.set(reg, 0)
	inf.disp.leave(reg, inf.cache, inf.status.ResourceVersion, left)
}

// SetTransform sets Options.Transform of an informer that has never run
// (client-go's SetTransform); nil removes it. It returns ErrStarted once
// the informer has started. A Factory's informer is shared: its Transform
// is every consumer's.
func (inf *Informer[T]) SetTransform(fn func(T) (T, error)) error {
	return inf.reconfigure("the transform", false, func(c *config[T]) { c.Transform = fn })
}

// detectMutations turns the mutation detector on, before the informer
// first runs.
func (inf *Informer[T]) detectMutations() {
	d, hook := newDetector[T](inf.hlog, inf.obs, inf.mutationPanics, inf.status.ResourceVersion, inf.disp.emit, inf.disp.fence)
	inf.detector = d
	inf.loop.detectMutations(hook, &d.Found)
}

// detectingMutations reports whether the mutation detector is on.
func (inf *Informer[T]) detectingMutations() bool {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.detector != nil
}

// Fields returns the paths of the fields the informer's cache keeps
// (Options.Fields, with what is always kept, or a Factory's consumers'
// union), sorted; nil if it keeps whole objects. After a Factory widened
// them while the informer ran, they are the new ones, which cached objects
// have once WaitForSync returns.
func (inf *Informer[T]) Fields() []string {
	if f := inf.configuration().fields; f != nil {
		return f.Paths()
	}
	return nil
}
