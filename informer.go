package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Informer lists and watches one resource, keeps a Cache of it in sync with
// the API server, and delivers every change to the registered handlers.
//
// Contract:
//   - Every handler sees the events of one object in the order the server
//     produced them. Handlers run on their own goroutine each, one event at
//     a time; a slow handler delays only itself (its queue grows, see
//     Registration.Pending), never the watch or the other handlers.
//   - The cache is updated before the event is queued, so a handler may find
//     the cache ahead of the event it is handling, never behind.
//   - Objects in events and in the cache are shared: do not modify them.
//   - A re-list (after 410 Gone, or a resync) is diffed against the cache:
//     Deleted for vanished objects, Added for new ones, Modified only for
//     objects whose resourceVersion changed.
//   - A stopped informer keeps its cache and resourceVersion; started again
//     it resumes from them, so the events after a restart are the changes
//     made while it was stopped.
//
// An Informer is safe for concurrent use. Create it with New.
type Informer[T Object] struct {
	opts    Options[T]
	listFn  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
	cache   *Cache[T]
	log     *slog.Logger

	rv     atomic.Pointer[string] // last resourceVersion seen; written by the loop only
	synced atomic.Bool
	// noStreaming records that the server refused a streaming list; read
	// and written by the loop only (runs never overlap).
	noStreaming bool
	// direct opens watches that kinformer decodes itself (protowatch.go);
	// nil when lw's own Watch is used. Read and written by the loop only.
	direct *directSource[T]
	// sharer interns strings and shares equal labels and annotations maps
	// between objects (intern.go); used by the loop only.
	sharer sharer

	runMu  sync.Mutex         // guards ctx, cancel and done
	ctx    context.Context    // the current run's context; nil when stopped
	cancel context.CancelFunc // cancels the current run; nil when stopped
	done   chan struct{}      // closed when the current run has fully ended

	// handlersMu guards listeners, runCtx and runWG. The loop holds it for
	// reading while it updates the cache and queues the event, and
	// AddEventHandler holds it for writing while it replays the cache to a
	// new handler, so that a new handler sees each object exactly once
	// before its live events.
	handlersMu sync.RWMutex
	listeners  map[*Registration]*listener[T]
	runCtx     context.Context // non-nil while running
	runWG      *sync.WaitGroup // joins the listener goroutines of this run

	syncMu  sync.Mutex    // guards syncErr and syncCh
	syncErr error         // the last persistent error before the first sync
	syncCh  chan struct{} // closed (and replaced) when synced or syncErr change
}

// New returns an informer for the resource lw lists and watches, typically
// a client-go resource client such as clientset.CoreV1().Pods(namespace);
// Go infers L from it. T must be the item type of L's list. A nil opts
// means the defaults. The informer does nothing until Start or Run.
func New[T Object, L runtime.Object](lw ListerWatcher[L], opts *Options[T]) *Informer[T] {
	o := opts.withDefaults()
	inf := &Informer[T]{
		opts:      o,
		listFn:    func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) { return lw.List(ctx, lo) },
		watchFn:   lw.Watch,
		cache:     NewCache(o.KeyFunc, o.Indexers),
		log:       o.Logger,
		listeners: map[*Registration]*listener[T]{},
		syncCh:    make(chan struct{}),
	}
	inf.noStreaming = o.DisableStreamingList || !mayStream(lw)
	if !o.DisableDirectDecoding {
		inf.direct = newDirectSource[T](lw, o.KeepManagedFields, o.Transform == nil)
	}
	return inf
}

// Cache returns the informer's cache.
func (inf *Informer[T]) Cache() *Cache[T] { return inf.cache }

// ResourceVersion returns the last resourceVersion the informer has seen,
// from a list, an event or a bookmark; "" before the first list.
func (inf *Informer[T]) ResourceVersion() string {
	if p := inf.rv.Load(); p != nil {
		return *p
	}
	return ""
}

// HasSynced reports whether the cache has been filled by a complete list.
// It stays true across Stop and Start.
func (inf *Informer[T]) HasSynced() bool { return inf.synced.Load() }

// WaitForSync blocks until the cache is synced (nil), until ctx ends
// (ctx.Err()), or until listing fails in a way retrying cannot fix — 403,
// 401, 404, a bad selector — and returns that error. The informer itself
// keeps retrying with backoff in every case.
func (inf *Informer[T]) WaitForSync(ctx context.Context) error {
	for {
		if inf.synced.Load() {
			return nil
		}
		inf.syncMu.Lock()
		err, ch := inf.syncErr, inf.syncCh
		inf.syncMu.Unlock()
		if err != nil {
			return err
		}
		if inf.synced.Load() {
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// setSyncState records the outcome of a list for WaitForSync.
func (inf *Informer[T]) setSyncState(synced bool, persistent error) {
	inf.syncMu.Lock()
	defer inf.syncMu.Unlock()
	if synced {
		inf.synced.Store(true)
	}
	inf.syncErr = persistent
	close(inf.syncCh)
	inf.syncCh = make(chan struct{})
}

// AddEventHandler registers fn for events of type t. It returns
// ErrUnknownEventType for any t other than Added, Modified, Deleted,
// Bookmark or Error. A handler for Added registered when the cache already
// holds objects first receives Added for each of them, then live events.
func (inf *Informer[T]) AddEventHandler(t EventType, fn func(Event[T])) (*Registration, error) {
	bit, ok := t.bit()
	if !ok {
		return nil, fmt.Errorf("%w %q: want one of ADDED, MODIFIED, DELETED, BOOKMARK, ERROR", ErrUnknownEventType, string(t))
	}
	if fn == nil {
		return nil, fmt.Errorf("kinformer: nil handler for %s", t)
	}
	return inf.addListener(bit, fn), nil
}

// AddHandler registers fn for events of every type, delivered in one
// ordered stream: use it when the order between an object's Added,
// Modified and Deleted matters to one consumer. Like AddEventHandler, it
// first receives Added for every object already cached.
func (inf *Informer[T]) AddHandler(fn func(Event[T])) *Registration {
	if fn == nil {
		fn = func(Event[T]) {} // a registration that ignores everything
	}
	return inf.addListener(1<<len(eventTypes)-1, fn)
}

func (inf *Informer[T]) addListener(mask uint8, fn func(Event[T])) *Registration {
	l := newListener(mask, fn, inf.log)
	reg := &Registration{l: l}
	inf.handlersMu.Lock()
	defer inf.handlersMu.Unlock()
	if l.wants(Added) {
		rv := inf.ResourceVersion()
		for _, obj := range inf.cache.List() {
			l.push(Event[T]{Type: Added, Object: obj, ResourceVersion: rv})
		}
	}
	inf.listeners[reg] = l
	if inf.runCtx != nil {
		inf.startListener(l)
	}
	return reg
}

// startListener runs l for the current run; handlersMu must be held.
func (inf *Informer[T]) startListener(l *listener[T]) {
	ctx, wg := inf.runCtx, inf.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.run(ctx)
	}()
}

// RemoveEventHandler unregisters a handler; its queued events are dropped.
// An unknown or nil registration is a no-op.
func (inf *Informer[T]) RemoveEventHandler(reg *Registration) {
	inf.handlersMu.Lock()
	l, ok := inf.listeners[reg]
	delete(inf.listeners, reg)
	inf.handlersMu.Unlock()
	if ok {
		l.remove()
	}
}

// emit queues e for every listener that wants it; handlersMu must be held
// (for reading suffices).
func (inf *Informer[T]) emit(e Event[T]) {
	for _, l := range inf.listeners {
		if l.wants(e.Type) {
			l.push(e)
		}
	}
}

// Start runs the informer in the background. It is a no-op if the informer
// is already running.
func (inf *Informer[T]) Start() {
	ctx, done, ok := inf.begin(context.Background())
	if !ok {
		return
	}
	go inf.run(ctx, done)
}

// Stop stops the informer and waits until its goroutines have ended,
// including handler calls in progress. Events not yet delivered stay queued
// and are delivered when the informer is started again. Stop is a no-op on
// a stopped informer. Stop waits for the handlers, so a handler (or a
// Transform, KeyFunc or IndexFunc) must not call it: cancel Run's context
// instead.
func (inf *Informer[T]) Stop() {
	inf.runMu.Lock()
	cancel, done := inf.cancel, inf.done
	inf.runMu.Unlock()
	if cancel == nil {
		return
	}
	cancel()
	<-done
}

// Run runs the informer until ctx ends or Stop is called, then returns nil
// once every goroutine it started has ended. It returns ErrRunning at once
// if the informer is already running.
func (inf *Informer[T]) Run(ctx context.Context) error {
	ctx, done, ok := inf.begin(ctx)
	if !ok {
		return ErrRunning
	}
	inf.run(ctx, done)
	return nil
}

// begin marks the informer running, unless it already is.
// A run whose context has ended but that is still winding down is waited
// for, so that Start or Run right after a cancellation is not lost.
func (inf *Informer[T]) begin(parent context.Context) (context.Context, chan struct{}, bool) {
	for {
		inf.runMu.Lock()
		if inf.done == nil {
			break
		}
		if inf.ctx.Err() == nil {
			inf.runMu.Unlock()
			return nil, nil, false
		}
		done := inf.done
		inf.runMu.Unlock()
		<-done
	}
	defer inf.runMu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	inf.ctx, inf.cancel, inf.done = ctx, cancel, make(chan struct{})
	return ctx, inf.done, true
}

func (inf *Informer[T]) run(ctx context.Context, done chan struct{}) {
	inf.handlersMu.Lock()
	inf.runCtx, inf.runWG = ctx, &sync.WaitGroup{}
	for _, l := range inf.listeners {
		inf.startListener(l)
	}
	inf.handlersMu.Unlock()

	inf.loop(ctx) // returns once ctx is done

	inf.handlersMu.Lock()
	wg := inf.runWG
	inf.runCtx, inf.runWG = nil, nil
	inf.handlersMu.Unlock()
	wg.Wait()

	inf.runMu.Lock()
	inf.cancel()
	inf.ctx, inf.cancel, inf.done = nil, nil, nil
	inf.runMu.Unlock()
	close(done)
}
