package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer/internal/store"
)

// queued is an event in a listener's queue, with when it was queued.
type queued[T Object] struct {
	e  Event[T]
	at int64 // time.Now().UnixNano() when queued
	// lz, if set, holds e's objects still to decode (a compact cache's,
	// internal/store/compact.go): the listener resolves it before
	// delivering e.
	lz *store.LazyObjects[T]
}

// entryOf makes e, whose Object is obj's and Old old's in c (zero refs:
// none), an entry of a listener's queue, queued at at: its objects as the
// cache's holding gives them.
func entryOf[T Object](c *Cache[T], e Event[T], obj, old store.Ref[T], at int64) queued[T] {
	var lz *store.LazyObjects[T]
	e.Object, e.Old, lz = c.s.Objects(obj, old)
	return queued[T]{e: e, at: at, lz: lz}
}

// resolved returns e with the objects lz still held decoded; an Error
// event naming the object if one does not decode.
func resolved[T Object](e Event[T], lz *store.LazyObjects[T]) Event[T] {
	if err := lz.Fill(&e.Object, &e.Old); err != nil {
		return Event[T]{Type: Error, Key: e.Key, ResourceVersion: e.ResourceVersion,
			Err: fmt.Errorf("%w: %s event of %s: the compact cache's bytes do not decode: %w", ErrUnexpectedObject, e.Type, e.Key, err)}
	}
	return e
}

// listener is one registration: its handler, the event types it wants, and
// its own queue, drained by its own goroutine while the informer runs.
//
// The queue is unbounded: a slow handler never stalls the watch or the
// other handlers, and the price is memory, one queue entry (about 100
// bytes) per event it lags behind; objects themselves are shared with the
// cache. Registration.Pending and OldestPending tell how far behind a
// handler is, in events and in time, and the metrics export both.
type listener[T Object] struct {
	mask uint8
	fn   func(Event[T])
	log  *slog.Logger // where panics go

	mu     sync.Mutex // guards queue, pushed, inCall and callEnded; removed is set under it too
	queue  []queued[T]
	pushed int64 // events ever queued
	// inCall: fn is running; callEnded, if not nil, is closed when it
	// returns (for a removal waiting for it).
	inCall    bool
	callEnded chan struct{}
	removed   atomic.Bool   // read without mu between events
	wake      chan struct{} // capacity 1: "the queue may be non-empty"
	// backlog counts events queued or being handled, for Pending.
	backlog atomic.Int64
	// delivered counts events handled; syncMark is the number that makes
	// the registration synced, -1 until known (a removed one is synced).
	delivered, syncMark atomic.Int64
	// head is when the oldest undelivered event was queued (0: none).
	head atomic.Int64
	// gid is the id of the goroutine running the listener (0: none), so
	// that a handler removing itself is not waited for by itself (see
	// curGoroutineID for why an id).
	gid atomic.Int64
	// admit, if set (a sharded informer), says whether an event may be
	// delivered now (admitDeliver), never (admitDrop: its object is no
	// longer this replica's to handle), or later (admitHold: the share is
	// not known yet).
	admit func(Event[T]) admission
	// handled, if set, is told each time the listener has handled or
	// dropped an event, and when it is removed (dispatcher.waitHandled).
	handled *progress
	// leaving (set under the dispatcher's lock) says the listener is
	// given no new events (dispatcher.leave). Once delivered reaches
	// leaveMark, onLeft (set and taken under mu) removes it; its removal
	// calls each of left (also set and taken under mu).
	leaving bool
	// leavingNow is set, under mu, with onLeft: checkLeft's lock-free
	// test, made after each event.
	leavingNow atomic.Bool
	leaveMark  int64
	onLeft     func()
	left       []func()
	// syncedCh is closed once synced() (Registration.Synced);
	// syncClosed says it is, so that the check costs one load after.
	syncedCh   chan struct{}
	syncClosed atomic.Bool
	syncOnce   sync.Once

	// The initial pass (run.go): name is the handler's function;
	// addedAt when it was registered (UnixNano); busy the time spent
	// inside it until it synced; doneAt when it synced (0: not yet).
	name         string
	addedAt      int64
	busy, doneAt atomic.Int64
}

func newListener[T Object](mask uint8, fn func(Event[T]), log *slog.Logger) *listener[T] {
	l := &listener[T]{mask: mask, fn: fn, log: log, wake: make(chan struct{}, 1), syncedCh: make(chan struct{}), addedAt: time.Now().UnixNano()}
	l.syncMark.Store(-1)
	return l
}

func (l *listener[T]) wants(t EventType) bool {
	bit, _ := t.bit()
	return l.mask&bit != 0
}

func (l *listener[T]) pending() int { return int(max(l.backlog.Load(), 0)) }

func (l *listener[T]) synced() bool {
	if l.removed.Load() {
		return true // nothing more will come: no one waits for it forever
	}
	m := l.syncMark.Load()
	return m >= 0 && l.delivered.Load() >= m
}

func (l *listener[T]) oldest() time.Duration {
	at := l.head.Load()
	if at == 0 {
		return 0
	}
	return max(time.Duration(time.Now().UnixNano()-at), 0)
}

// markSynced makes the registration synced once every event queued so far
// has been delivered, unless it already has its mark.
func (l *listener[T]) markSynced() {
	l.mu.Lock()
	l.syncMark.CompareAndSwap(-1, l.pushed)
	l.mu.Unlock()
	l.checkSynced()
}

func (l *listener[T]) syncedChan() <-chan struct{} { return l.syncedCh }

// checkSynced closes syncedCh once the registration is synced. It is
// called after each change that can make it so: a delivery, the sync mark,
// the removal.
func (l *listener[T]) checkSynced() {
	if l.syncClosed.Load() || !l.synced() {
		return
	}
	l.syncOnce.Do(func() {
		l.doneAt.Store(time.Now().UnixNano())
		l.syncClosed.Store(true)
		close(l.syncedCh)
	})
}

// push appends an event to the queue; it never blocks.
func (l *listener[T]) push(q queued[T]) {
	now := time.Now().UnixNano()
	q.at = now
	l.mu.Lock()
	if l.removed.Load() {
		l.mu.Unlock()
		return
	}
	if len(l.queue) == 0 {
		l.head.CompareAndSwap(0, now)
	}
	l.queue = append(l.queue, q)
	l.pushed++
	l.backlog.Add(1)
	l.mu.Unlock()
	l.signal()
}

// appendLocked appends the events fill puts to the queue, all queued at
// now, and returns how many; l.mu must be held (or l be registered with
// no one yet). The caller signals.
func (l *listener[T]) appendLocked(now int64, fill func(put func(queued[T]))) int {
	n := 0
	fill(func(q queued[T]) {
		l.queue = append(l.queue, q)
		n++
	})
	if n > 0 {
		l.head.CompareAndSwap(0, now)
		l.pushed += int64(n)
		l.backlog.Add(int64(n))
	}
	return n
}

func (l *listener[T]) signal() {
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// remove drops the queue and stops further deliveries. Unless it runs on
// the listener's own goroutine (a handler removing itself), it waits for a
// call in progress to end, so that the handler never runs again once it
// returns.
func (l *listener[T]) remove() {
	l.mu.Lock()
	l.removed.Store(true)
	l.queue = nil
	l.backlog.Store(0)
	l.head.Store(0)
	var ended chan struct{}
	if l.inCall && l.gid.Load() != curGoroutineID() {
		if l.callEnded == nil {
			l.callEnded = make(chan struct{})
		}
		ended = l.callEnded
	}
	l.mu.Unlock()
	l.signal()
	l.checkSynced()
	l.handled.signal()
	if ended != nil {
		<-ended
	}
}

// run delivers queued events in order until ctx is done or the listener is
// removed. Events still queued when ctx ends stay queued for the next run.
// gid is the id of the goroutine that calls it.
func (l *listener[T]) run(ctx context.Context, gid int64) {
	l.gid.Store(gid)
	defer l.gid.Store(0)
outer:
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
			// The event being handled counts as waiting until it is
			// handled: a stuck handler shows its lag.
			l.head.Store(batch[i].at)
			if z := batch[i].lz; z != nil {
				batch[i].e, batch[i].lz = resolved(batch[i].e, z), nil
			}
			if l.admit != nil {
				switch l.admit(batch[i].e) {
				case admitDrop:
					l.backlog.Add(-1)
					l.delivered.Add(1)
					l.checkSynced()
					l.handled.signal()
					l.checkLeft()
					batch[i] = queued[T]{}
					continue
				case admitHold:
					l.requeue(batch[i:])
					select {
					case <-ctx.Done():
						return
					case <-l.wake:
					}
					continue outer
				}
			}
			initial := !l.syncClosed.Load()
			var began time.Time
			if initial {
				began = time.Now()
			}
			if !l.call(batch[i].e) {
				l.head.Store(0)
				return // removed
			}
			if initial {
				l.busy.Add(int64(time.Since(began)))
			}
			l.backlog.Add(-1)
			l.delivered.Add(1)
			l.checkSynced()
			l.handled.signal()
			l.checkLeft()
			if i+1 < len(batch) {
				l.head.Store(batch[i+1].at)
			} else {
				l.advanceHead()
			}
			batch[i] = queued[T]{} // let the object go as soon as it is handled
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

// startLeave makes the listener leave (dispatcher.leave, with the
// dispatcher's lock held): it is given no new events; fill, if it wants
// Deleted, queues them (at now) for the objects it held, after which,
// once it has handled all it was given, remove runs, then left.
func (l *listener[T]) startLeave(now int64, fill func(put func(queued[T])), remove, left func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.leaving = true
	if !l.removed.Load() && l.wants(Deleted) {
		l.appendLocked(now, fill)
	}
	l.leaveMark = l.pushed
	l.onLeft = remove
	l.leavingNow.Store(true)
	l.left = append(l.left, left)
}

// alsoOnLeft adds left to what is called when the leave under way ends.
func (l *listener[T]) alsoOnLeft(left func()) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.left = append(l.left, left)
}

// enqueue queues the events fill puts (at now), unless the listener was
// removed, and returns how many: the replay of a registration, a resend.
// The caller signals the listener's goroutine.
func (l *listener[T]) enqueue(now int64, fill func(put func(queued[T]))) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed.Load() {
		return 0
	}
	return l.appendLocked(now, fill)
}

// takeLeft returns, once the listener is removed, what is to be called
// for the leave it was in, if any, and forgets it.
func (l *listener[T]) takeLeft() []func() {
	l.mu.Lock()
	defer l.mu.Unlock()
	left := l.left
	l.left, l.onLeft = nil, nil
	return left
}

// given returns how many events the listener has been given so far.
func (l *listener[T]) given() int64 {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.pushed
}

// checkLeft removes a leaving listener once it has handled every event
// queued before it began to leave (dispatcher.leave).
func (l *listener[T]) checkLeft() {
	if !l.leavingNow.Load() {
		return // the common case, after every event: no lock
	}
	l.mu.Lock()
	fin := l.onLeft
	if fin == nil || l.delivered.Load() < l.leaveMark {
		l.mu.Unlock()
		return
	}
	l.onLeft = nil
	l.mu.Unlock()
	fin()
}

// admission is what listener.admit says of an event.
type admission uint8

const (
	admitDeliver admission = iota
	admitDrop
	admitHold
)

// ownsEvent reports whether e is about an object a sharded replica must
// own to handle it: Added, Modified, and Deleted other than a reshard's
// (which tells handlers to let an object go).
func ownsEvent[T Object](e Event[T]) bool {
	switch e.Type {
	case Added, Modified:
		return true
	case Deleted:
		return e.Cause != CauseReshard
	}
	return false
}

// advanceHead sets head to the oldest event still in the queue, or 0.
func (l *listener[T]) advanceHead() {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.queue) > 0 && !l.removed.Load() {
		l.head.Store(l.queue[0].at)
	} else {
		l.head.Store(0)
	}
}

// requeue puts undelivered events back in front of any that arrived since.
func (l *listener[T]) requeue(rest []queued[T]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.removed.Load() {
		return
	}
	l.queue = append(append(make([]queued[T], 0, len(rest)+len(l.queue)), rest...), l.queue...)
	l.head.Store(l.queue[0].at)
}

// call runs the handler unless the listener was removed, recovering a panic
// so that one faulty handler neither kills the process nor keeps the next
// events from being delivered. It reports whether the listener is still
// registered.
func (l *listener[T]) call(e Event[T]) (registered bool) {
	l.mu.Lock()
	if l.removed.Load() {
		l.mu.Unlock()
		return false
	}
	l.inCall = true
	l.mu.Unlock()
	registered = true
	defer func() {
		l.mu.Lock()
		l.inCall = false
		if l.callEnded != nil {
			close(l.callEnded)
			l.callEnded = nil
		}
		l.mu.Unlock()
	}()
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("kinformer: event handler panicked",
				"type", string(e.Type), "key", e.Key, "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	l.fn(e)
	return true
}
