package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"runtime/debug"
	"sync"
	"sync/atomic"
)

// Registration identifies a handler added with AddEventHandler or
// AddHandler; pass it to RemoveEventHandler.
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

// listener is one registration: its handler, the event types it wants, and
// its own queue, drained by its own goroutine while the informer runs. The
// queue is unbounded: a slow handler never stalls the watch or the other
// handlers, and the price is memory, one Event per event it lags behind
// (objects themselves are shared with the cache). Registration.Pending tells
// how far behind a handler is.
type listener[T Object] struct {
	mask uint8
	fn   func(Event[T])
	log  *slog.Logger

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
	select {
	case l.wake <- struct{}{}:
	default:
	}
}

// remove drops the queue and stops further deliveries. An event being
// handled right now still completes.
func (l *listener[T]) remove() {
	l.mu.Lock()
	l.removed.Store(true)
	l.queue = nil
	l.backlog.Store(0)
	l.mu.Unlock()
	select {
	case l.wake <- struct{}{}:
	default:
	}
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
			l.call(batch[i])
			l.backlog.Add(-1)
			var zero Event[T]
			batch[i] = zero // let the object go as soon as it is handled
			if l.removed.Load() {
				return
			}
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

// call runs the handler, recovering a panic so that one faulty handler
// neither kills the process nor keeps the next events from being delivered.
func (l *listener[T]) call(e Event[T]) {
	defer func() {
		if r := recover(); r != nil {
			l.log.Error("kinformer: event handler panicked",
				"type", string(e.Type), "panic", fmt.Sprint(r), "stack", string(debug.Stack()))
		}
	}()
	l.fn(e)
}
