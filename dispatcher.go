package kinformer

import (
	"bytes"
	"context"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer/internal/store"
)

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
	// goroutines holds the ids of the running listener goroutines, also
	// of those removed but still in their last call: a handler calling
	// Stop is not waited for by itself (see curGoroutineID).
	goroutines sync.Map                 // int64 -> struct{}
	obs        *observer                // counts events; nil without metrics
	admit      func(Event[T]) admission // listener.admit of every listener; nil for none
	handled    progress                 // listener.handled of every listener
}

// depth returns the events queued for all registrations and the age of the
// oldest.
func (d *dispatcher[T]) depth() (events int, oldest time.Duration) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, l := range d.listeners {
		events += l.pending()
		oldest = max(oldest, l.oldest())
	}
	return events, oldest
}

// add registers l, first queueing Added for every object in c if l wants
// Added. If synced, the cache is complete: l is synced once it has
// handled that replay; else once it has handled the first list's events.
func (d *dispatcher[T]) add(l *listener[T], c *Cache[T], rv func() string, isSynced func() bool) *Registration {
	reg := &Registration{l: l}
	l.admit = d.admit
	l.handled = &d.handled
	d.mu.Lock()
	defer d.mu.Unlock()
	// Read under d.mu: the writer marks the first sync under it too, so a
	// registration is either marked by it or finds it synced here.
	synced := isSynced()
	if l.wants(Added) {
		at := rv()
		now := time.Now().UnixNano()
		l.enqueue(now, func(put func(queued[T])) {
			c.s.Each(func(key string, r store.Ref[T]) {
				put(entryOf(c, Event[T]{Type: Added, Key: key, ResourceVersion: at, Cause: CauseReplay}, r, store.Ref[T]{}, now))
			})
		})
	}
	if synced {
		l.markSynced()
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

// resend queues for reg alone a Modified event, with Old the same object
// and CauseResend, for every object in c. It holds d.mu for writing, as add
// does, so that the events take their place in reg's stream after the
// changes already queued and before the next ones. It returns how many it
// queued; 0 if reg is not registered or does not want Modified.
func (d *dispatcher[T]) resend(reg *Registration, c *Cache[T], rv func() string) int {
	d.mu.Lock()
	defer d.mu.Unlock()
	l, ok := d.listeners[reg]
	if !ok || l.leaving || !l.wants(Modified) {
		return 0
	}
	at := rv()
	now := time.Now().UnixNano()
	n := l.enqueue(now, func(put func(queued[T])) {
		c.s.Each(func(key string, r store.Ref[T]) {
			put(entryOf(c, Event[T]{Type: Modified, Key: key, ResourceVersion: at, Cause: CauseResend}, r, r, now))
		})
	})
	if n > 0 {
		l.signal()
	}
	return n
}

// leave ends reg the way a View lets an informer go: reg gets no new
// events, but first handles those already queued for it, then Deleted,
// with CauseLeave, for every object in c at this point of its stream (if
// it wants Deleted); then it is removed and left is called, once: at once
// if it had nothing left to handle or was not registered; when the leave
// already under way ends if it was leaving. It holds d.mu
// for writing, as add does, so that the Deleted follow exactly the events
// reg was given. A leaving registration keeps its place across the
// informer's runs: a stop holds its events, the next run delivers them.
func (d *dispatcher[T]) leave(reg *Registration, c *Cache[T], rv func() string, left func()) {
	d.mu.Lock()
	l, ok := d.listeners[reg]
	if !ok {
		d.mu.Unlock()
		left()
		return
	}
	if l.leaving {
		// Leaving already: left is called when that leave ends.
		l.alsoOnLeft(left)
		d.mu.Unlock()
		return
	}
	at := rv()
	now := time.Now().UnixNano()
	l.startLeave(now, func(put func(queued[T])) {
		c.s.Each(func(key string, r store.Ref[T]) {
			put(entryOf(c, Event[T]{Type: Deleted, Key: key, ResourceVersion: at, Cause: CauseLeave}, r, store.Ref[T]{}, now))
		})
	}, func() { d.remove(reg) }, left)
	d.mu.Unlock()
	l.signal()
	l.checkLeft() // nothing left to handle: gone now
}

// registered reports whether reg is one of d's registrations.
func (d *dispatcher[T]) registered(reg *Registration) bool {
	d.mu.RLock()
	defer d.mu.RUnlock()
	_, ok := d.listeners[reg]
	return ok
}

// startLocked runs l for the current run; d.mu must be held.
func (d *dispatcher[T]) startLocked(l *listener[T]) {
	ctx, wg := d.runCtx, d.runWG
	wg.Add(1)
	go func() {
		defer wg.Done()
		id := curGoroutineID()
		d.goroutines.Store(id, struct{}{})
		defer d.goroutines.Delete(id)
		l.run(ctx, id)
	}()
}

// remove unregisters reg; once it returns, its handler is not running
// (unless remove was called by that handler) and is never called again.
func (d *dispatcher[T]) remove(reg *Registration) {
	d.mu.Lock()
	l, ok := d.listeners[reg]
	delete(d.listeners, reg)
	d.mu.Unlock()
	if ok {
		l.remove()
		for _, fn := range l.takeLeft() {
			fn() // removed while leaving: it has left
		}
	}
}

// onHandlerGoroutine reports whether the caller is one of the listeners'
// goroutines: a handler.
func (d *dispatcher[T]) onHandlerGoroutine() bool {
	_, ok := d.goroutines.Load(curGoroutineID())
	return ok
}

// curGoroutineID returns the id of the calling goroutine, from the first
// line of its stack ("goroutine 42 [running]:"). It is read once when a
// listener's goroutine starts, and by RemoveEventHandler (only while the
// handler is in a call), Stop, a Start during a stop, and the Factory's
// stops; never per event.
//
// Why an id, when Go discourages telling goroutines apart: to keep two
// promises at once. To any caller, RemoveEventHandler returns only when
// the handler is not running, and Stop only when no handler is running; to
// a handler, it may call either on itself. Take a handler in a call, and a
// RemoveEventHandler of it (or its informer's Stop) that began meanwhile.
// If another goroutine called it, it must wait for the call (a controller
// that removes its handler, then closes the channel the handler sends on,
// relies on that); if the handler called it, from within that call,
// waiting is a deadlock. The informer's state is the same in both — one
// call in progress, one removal or stop begun — so only the caller's
// identity tells them apart, and a goroutine's id is the only identity Go
// offers. Each design without it loses one promise:
//   - a value given to the handler (a context or token in Event, a method
//     on it): the calls handlers make today, RemoveEventHandler(reg) and
//     Stop(), carry none, so they would deadlock;
//   - a removal that never waits, with a separate wait (client-go: its
//     RemoveEventHandler returns while callbacks may still run, and
//     ShutDownEventHandler waits but "MUST NOT be called from within the
//     event handler's own callbacks"): RemoveEventHandler would return
//     while the handler runs, and the wait would deadlock from a handler;
//   - Stop that cancels and waits on a channel closed after Run's join:
//     that is what it does; it still has to choose whether to wait;
//   - state the listener sets around the call: it is the same for every
//     caller.
//
// A caller is told apart only as a goroutine: a handler that has another
// goroutine make the call, and waits for that goroutine, deadlocks (that
// goroutine waits like any other caller). Were the stack's format ever to
// change, every id would read 0 and every caller would look like a
// handler: Stop and RemoveEventHandler would stop waiting, never
// deadlock; TestHandlerGoroutineID says so.
func curGoroutineID() int64 {
	var buf [64]byte
	b := buf[:runtime.Stack(buf[:], false)]
	b = bytes.TrimPrefix(b, []byte("goroutine "))
	if i := bytes.IndexByte(b, ' '); i > 0 {
		b = b[:i]
	}
	id, _ := strconv.ParseInt(string(b), 10, 64)
	return id
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

// update runs fn, which changes the cache (and the state file) and queues
// the events of that change through its publisher, under the dispatcher's
// read lock: a registration added meanwhile (add, which holds the lock
// for writing while it replays the cache) sees each object exactly once,
// either in its replay or in the events, never in both or neither.
//
// The informer's locks nest in one order: the dispatcher's outermost
// (here, and in add, resend, fence and marks, which take a listener's
// lock or read the cache under it); inside it the persister's (a
// persist.Batch) or a listener's (push, or resend holding it while it
// reads the cache); the cache's innermost (wmu, then mu), taken and
// released by its own methods. Nothing takes an outer lock while holding
// an inner one. The flusher and readers take one lock at a time.
func (d *dispatcher[T]) update(fn func(publisher[T])) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	fn(publisher[T]{d})
}

// publisher queues the events of one update; valid only inside it.
type publisher[T Object] struct{ d *dispatcher[T] }

// emit queues e for every listener that wants it.
func (p publisher[T]) emit(e Event[T]) { p.emitQueued(queued[T]{e: e}) }

// emitQueued queues q for every listener that wants its event (a lazy
// one is shared: the first to deliver it decodes it).
func (p publisher[T]) emitQueued(q queued[T]) {
	p.d.obs.event(q.e.Type)
	for _, l := range p.d.listeners {
		if !l.leaving && l.wants(q.e.Type) {
			l.push(q)
		}
	}
}

// markSynced marks every registration without a sync mark: called once the
// first list's (or the catch-up's) events are queued.
func (p publisher[T]) markSynced() {
	for _, l := range p.d.listeners {
		l.markSynced()
	}
}

// fence makes every handler call that has ended happen before fence
// returns (in the memory model's sense): each listener's goroutine takes
// its lock as a call ends. The mutation detector's check reads objects a
// handler may have changed; without it the race detector would report the
// handler's change, under -race, before the detector could.
func (d *dispatcher[T]) fence() {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, l := range d.listeners {
		l.mu.Lock()
		l.mu.Unlock()
	}
}

// emit queues e for every listener that wants it, alone.
func (d *dispatcher[T]) emit(e Event[T]) {
	d.update(func(p publisher[T]) { p.emit(e) })
}

// marks returns how many events each listener has been given so far.
func (d *dispatcher[T]) marks() map[*listener[T]]int64 {
	d.mu.RLock()
	defer d.mu.RUnlock()
	m := make(map[*listener[T]]int64, len(d.listeners))
	for _, l := range d.listeners {
		m[l] = l.given()
	}
	return m
}

// reached reports whether each listener has handled the events marks
// counted, or was removed.
func (d *dispatcher[T]) reached(marks map[*listener[T]]int64) bool {
	for l, n := range marks {
		if !l.removed.Load() && l.delivered.Load() < n {
			return false
		}
	}
	return true
}

// waitHandled waits until each listener has handled the events marks
// counted, or was removed; false if ctx ends first.
func (d *dispatcher[T]) waitHandled(ctx context.Context, marks map[*listener[T]]int64) bool {
	d.handled.waiting.Add(1)
	defer d.handled.waiting.Add(-1)
	for {
		next := d.handled.next() // before the check: progress after it closes next
		if d.reached(marks) {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-next:
		}
	}
}

// progress tells a waiter that listeners have handled events. While no
// one waits, a signal costs one atomic load.
type progress struct {
	waiting atomic.Int32  // waiters; signals are skipped while 0
	mu      sync.Mutex    // guards ch
	ch      chan struct{} // closed by the next signal; nil if no one asked
}

// next returns a channel closed by the next signal. A signal after a
// change the caller has not seen yet is not lost: the change is made
// before the signal, and waiting is raised before the caller looks.
func (p *progress) next() <-chan struct{} {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.ch == nil {
		p.ch = make(chan struct{})
	}
	return p.ch
}

func (p *progress) signal() {
	if p == nil || p.waiting.Load() == 0 {
		return
	}
	p.mu.Lock()
	if p.ch != nil {
		close(p.ch)
		p.ch = nil
	}
	p.mu.Unlock()
}

// wakeAll makes every listener look at its queue again (events held by
// admit may be deliverable now).
func (d *dispatcher[T]) wakeAll() {
	d.mu.RLock()
	defer d.mu.RUnlock()
	for _, l := range d.listeners {
		l.signal()
	}
}
