package kinformer

import (
	"context"
	"sync"
	"time"

	"k8s.io/client-go/util/workqueue"
)

// Registration identifies a handler added with AddEventHandler, AddHandler
// or AddHandlerFuncs; pass it to RemoveEventHandler.
type Registration struct {
	l registered
}

// registered is what a Registration needs of its (generic) listener.
type registered interface {
	pending() int
	synced() bool
	oldest() time.Duration
	syncedChan() <-chan struct{}
	startup() HandlerStartup
}

// Pending returns how many events wait in the handler's queue: a measure of
// how far behind it is.
func (r *Registration) Pending() int {
	if r == nil || r.l == nil {
		return 0
	}
	return r.l.pending()
}

// OldestPending returns how long the oldest event not yet handled (queued,
// or being handled) has waited, 0 when there is none: the handler's lag in
// time. A handler stuck on one event shows that event's age.
func (r *Registration) OldestPending() time.Duration {
	if r == nil || r.l == nil {
		return 0
	}
	return r.l.oldest()
}

// HasSynced reports whether the handler has received every object of the
// cache as it was when the handler was added: the replay (Added with
// CauseReplay) for a handler added to a synced informer, else the events of
// the informer's first list. A controller waits for it before acting on
// "everything I know about", as it would on client-go's handler
// registrations.
func (r *Registration) HasSynced() bool {
	if r == nil || r.l == nil {
		return false
	}
	return r.l.synced()
}

// Synced returns a channel that is closed once HasSynced is true, to wait
// for it in a select (client-go's DoneChecker). A nil Registration's is
// nil: it never closes.
func (r *Registration) Synced() <-chan struct{} {
	if r == nil || r.l == nil {
		return nil
	}
	return r.l.syncedChan()
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

// Enqueue hands an informer's changes to a controller's workqueue: it
// registers one handler that adds the Key of every Added, Modified and
// Deleted event for which filter returns true (a nil filter passes all) to
// q, typically client-go's rate-limiting queue
// (workqueue.NewTypedRateLimitingQueueWithConfig[string]). Bookmark and
// Error events are not enqueued: they concern no object. Remove the handler
// with RemoveEventHandler, or stop the informer, before shutting q down.
//
// Only keys cross over, not objects, because the queue de-duplicates them:
// a key changed ten times while it waits is reconciled once, and never by
// two workers at the same time. So the reconcile function reads the current
// state with inf.Cache().GetByKey(key), which is at least as new as the
// event that queued the key; a missing object means it was deleted (clean
// up whatever it owned). The filter sees the whole event (Old, Cause) and
// may drop changes the controller does not care about, such as Modified
// events where only the status changed.
func Enqueue[T Object](inf *Informer[T], q workqueue.TypedInterface[string], filter func(Event[T]) bool) *Registration {
	if q == nil {
		panic("kinformer.Enqueue: nil queue")
	}
	add := func(e Event[T]) {
		if filter == nil || filter(e) {
			q.Add(e.Key)
		}
	}
	// One ordered registration, not three: one goroutine instead of three,
	// and the keys reach the queue in the order of the changes.
	return inf.AddHandlerFuncs(HandlerFuncs[T]{Added: add, Modified: add, Deleted: add})
}

// ResendEvery makes the informer Resend its cache to reg every period,
// from each run's first sync until the run ends: client-go's per-handler
// resync. It lasts until reg is removed, or ResendEvery is called again
// for reg (a period of 0 or less stops it). The informer's own run drives
// it, so whoever runs the informer (its Factory, for a shared one) runs
// the schedule too, and a registration added while the informer runs
// starts at once.
//
// A registration of another informer, or one removed, is ignored.
func (inf *Informer[T]) ResendEvery(reg *Registration, period time.Duration) {
	if reg == nil || (period > 0 && !inf.disp.registered(reg)) {
		return
	}
	inf.resends.set(reg, period)
}

// resender keeps the ResendEvery schedules and runs them for the
// informer's current run.
type resender struct {
	resend func(*Registration)    // Informer.Resend
	synced func() <-chan struct{} // Informer.Synced

	mu      sync.Mutex // guards everything below
	periods map[*Registration]time.Duration
	stops   map[*Registration]context.CancelFunc // the current run's tickers
	ctx     context.Context                      // the current run's; nil when not running
	wg      sync.WaitGroup                       // the current run's tickers
}

// set schedules reg every period (none if period <= 0), replacing its
// schedule; while a run is on, the new schedule starts at once.
func (r *resender) set(reg *Registration, period time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if stop := r.stops[reg]; stop != nil {
		stop()
		delete(r.stops, reg)
	}
	if period <= 0 {
		delete(r.periods, reg)
		return
	}
	if r.periods == nil {
		r.periods = map[*Registration]time.Duration{}
	}
	r.periods[reg] = period
	if r.ctx != nil {
		r.tickLocked(reg, period)
	}
}

// start runs every schedule until stop, for a run whose context is ctx.
func (r *resender) start(ctx context.Context) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.ctx = ctx
	for reg, period := range r.periods {
		r.tickLocked(reg, period)
	}
}

// stop ends the run's schedules and waits for their goroutines; they are
// kept for the next run.
func (r *resender) stop() {
	r.mu.Lock()
	for _, stop := range r.stops {
		stop()
	}
	r.stops, r.ctx = nil, nil
	r.mu.Unlock()
	r.wg.Wait()
}

// tickLocked starts reg's ticker for the current run: the first resend a
// period after the informer has synced. r.mu must be held.
func (r *resender) tickLocked(reg *Registration, period time.Duration) {
	ctx, cancel := context.WithCancel(r.ctx)
	if r.stops == nil {
		r.stops = map[*Registration]context.CancelFunc{}
	}
	r.stops[reg] = cancel
	synced := r.synced()
	r.wg.Go(func() {
		select {
		case <-ctx.Done():
			return
		case <-synced:
		}
		t := time.NewTicker(period)
		defer t.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-t.C:
				r.resend(reg)
			}
		}
	})
}
