package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Registration identifies a handler added with AddEventHandler, AddHandler
// or AddHandlerFuncs; pass it to RemoveEventHandler.
type Registration struct {
	l interface{ pending() int }
}

// Pending returns how many events wait in the handler's queue: a measure of
// how far behind it is.
func (r *Registration) Pending() int {
	if r == nil || r.l == nil {
		return 0
	}
	return r.l.pending()
}

// HandlerFuncs is one ordered registration with a callback per event type:
// the callbacks of one registration are called one at a time, in the order
// of the events, so Added, Modified and Deleted of one object always arrive
// in the server's order. A nil callback means the type is not wanted.
type HandlerFuncs[T Object] struct {
	Added, Modified, Deleted, Bookmark, Error func(Event[T])
}

func (h HandlerFuncs[T]) mask() uint8 {
	var m uint8
	for i, fn := range [...]func(Event[T]){h.Added, h.Modified, h.Deleted, h.Bookmark, h.Error} {
		if fn != nil {
			m |= 1 << i
		}
	}
	return m
}

func (h HandlerFuncs[T]) call(e Event[T]) {
	var fn func(Event[T])
	switch e.Type {
	case Added:
		fn = h.Added
	case Modified:
		fn = h.Modified
	case Deleted:
		fn = h.Deleted
	case Bookmark:
		fn = h.Bookmark
	case Error:
		fn = h.Error
	}
	if fn != nil {
		fn(e)
	}
}

// listener is one registration: its handler, the event types it wants, and
// its own queue, drained by its own goroutine while the informer runs. The
// queue is unbounded: a slow handler never stalls the watch or the other
// handlers, and the price is memory, one Event per event it lags behind
// (objects themselves are shared with the cache). Registration.Pending tells
// how far behind a handler is.
type listener[T Object] struct {
	mask uint8
	fn   func(Event[T])
	log  *slog.Logger // where panics go

	mu      sync.Mutex // guards queue; removed is set under it too
	queue   []Event[T]
	removed atomic.Bool   // read without mu between events
	wake    chan struct{} // capacity 1: "the queue may be non-empty"
	// backlog counts events queued or being handled, for Pending.
	backlog atomic.Int64
}

func newListener[T Object](mask uint8, fn func(Event[T]), log *slog.Logger) *listener[T] {
	return &listener[T]{mask: mask, fn: fn, log: log, wake: make(chan struct{}, 1)}
}

func (l *listener[T]) wants(t EventType) bool {
	bit, _ := t.bit()
	return l.mask&bit != 0
}

func (l *listener[T]) pending() int { return int(max(l.backlog.Load(), 0)) }

// push appends an event to the queue; it never blocks.
func (l *listener[T]) push(e Event[T]) {
	l.mu.Lock()
	if l.removed.Load() {
		l.mu.Unlock()
		return
	}
	l.queue = append(l.queue, e)
	l.backlog.Add(1)
	l.mu.Unlock()
	l.signal()
}

func (l *listener[T]) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// remove drops the queue and stops further deliveries; a call in progress
// completes.
func (l *listener[T]) remove() {
	l.mu.Lock()
	l.removed.Store(true)
	l.queue = nil
	l.backlog.Store(0)
	l.mu.Unlock()
	l.signal()
}

// run delivers queued events in order until ctx is done or the listener is
// removed. Events still queued when ctx ends stay queued for the next run.
func (l *listener[T]) run(ctx context.Context) {
	for {
		l.mu.Lock()
		if l.removed.Load() {
			l.mu.Unlock()
			return
		}
		batch := l.queue
		l.queue = nil
		l.mu.Unlock()

		for i := range batch {
			if ctx.Err() != nil {
				l.requeue(batch[i:])
				return
			}
			if !l.call(batch[i]) {
				return // removed
			}
			l.backlog.Add(-1)
			var zero Event[T]
			batch[i] = zero // let the object go as soon as it is handled
		}
		if len(batch) > 0 {
			continue
		}
		select {
		case <-ctx.Done():
			return
		case <-l.wake:
		}
	}
}

// requeue puts undelivered events back in front of any that arrived since.
func (l *listener[T]) requeue(rest []Event[T]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed.Load() {
		return
	}
	l.queue = append(append(make([]Event[T], 0, len(rest)+len(l.queue)), rest...), l.queue...)
}

// call runs the handler unless the listener was removed, recovering a panic
// so that one faulty handler neither kills the process nor keeps the next
// events from being delivered. It reports whether the listener is still
// registered.
func (l *listener[T]) call(e Event[T]) (registered bool) {
	if l.removed.Load() {
		return false
	}
	registered = true
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("kinformer: event handler panicked",
				"type", string(e.Type), "key", e.Key, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	l.fn(e)
	return true
}

// dispatcher holds an informer's registrations and runs their goroutines
// while the informer runs.
//
// Its lock orders the writer's updates against new registrations: the
// writer holds it for reading while it updates the cache and queues the
// events of that update, and a new registration holds it for writing while
// it replays the cache, so that a new handler sees each object exactly
// once before its live events.
type dispatcher[T Object] struct {
	mu        sync.RWMutex // guards listeners, runCtx and runWG
	listeners map[*Registration]*listener[T]
	runCtx    context.Context // non-nil while running
	runWG     *sync.WaitGroup // joins the listener goroutines of this run
}

// add registers l, first queueing Added for every object in c if l wants
// Added.
func (d *dispatcher[T]) add(l *listener[T], c *Cache[T], rv func() string) *Registration {
	reg := &Registration{l: l}
	d.mu.Lock()
	defer d.mu.Unlock()
	if l.wants(Added) {
		c.mu.RLock()
		at := rv()
		for key, obj := range c.items {
			l.queue = append(l.queue, Event[T]{Type: Added, Object: obj, Key: key, ResourceVersion: at, Cause: CauseReplay})
		}
		c.mu.RUnlock()
		l.backlog.Add(int64(len(l.queue)))
	}
	if d.listeners == nil {
		d.listeners = map[*Registration]*listener[T]{}
	}
	d.listeners[reg] = l
	if d.runCtx != nil {
		d.startLocked(l)
	}
	return reg
}

// startLocked runs l for the current run; d.mu must be held.
func (d *dispatcher[T]) startLocked(l *listener[T]) {
	ctx, wg := d.runCtx, d.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		l.run(ctx)
	}()
}

// remove unregisters reg; its handler is not called again.
func (d *dispatcher[T]) remove(reg *Registration) {
	d.mu.Lock()
	l, ok := d.listeners[reg]
	delete(d.listeners, reg)
	d.mu.Unlock()
	if ok {
		l.remove()
	}
}

// start runs every listener until ctx ends.
func (d *dispatcher[T]) start(ctx context.Context) {
	d.mu.Lock()
	defer d.mu.Unlock()
	d.runCtx, d.runWG = ctx, &sync.WaitGroup{}
	for _, l := range d.listeners {
		d.startLocked(l)
	}
}

// join waits for the listener goroutines of the run that start began,
// once its context has ended.
func (d *dispatcher[T]) join() {
	d.mu.Lock()
	wg := d.runWG
	d.runCtx, d.runWG = nil, nil
	d.mu.Unlock()
	wg.Wait()
}

// emitLocked queues e for every listener that wants it; d.mu must be held
// (for reading suffices).
func (d *dispatcher[T]) emitLocked(e Event[T]) {
	for _, l := range d.listeners {
		if l.wants(e.Type) {
			l.push(e)
		}
	}
}

// emit queues e for every listener that wants it.
func (d *dispatcher[T]) emit(e Event[T]) {
	d.mu.RLock()
	d.emitLocked(e)
	d.mu.RUnlock()
}
