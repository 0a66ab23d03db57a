package kinformer

import (
	"context"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"time"
)

// An informer's runs: started in the background or run on the caller's
// goroutine, stopped (and waited for, unless from its own handler), and
// run again later from what it keeps; and, below, how its start is going
// (Startup) and the gate that bounds the initial lists run at once
// (ListGate).

// Start runs the informer in the background. It is a no-op if the informer
// is already running, and when a handler calls it while its own informer
// is stopping (the stop waits for that handler).
func (inf *Informer[T]) Start() {
	if inf.configuration().fieldsErr != nil {
		return // WaitForSync and LastError say why
	}
	ctx, done, ok := inf.begin(context.Background())
	if !ok {
		return
	}
	go inf.run(ctx, done)
}

// Stop stops the informer and waits until its goroutines have ended,
// including handler calls in progress. Events not yet delivered stay queued
// and are delivered when the informer is started again. Stop is a no-op on
// a stopped informer.
//
// Called from one of the informer's own handlers, Stop does not wait (the
// handler would wait for itself): it is RequestStop. A handler of another
// informer, or a goroutine a handler starts, waits like any caller. A
// Transform, KeyFunc or IndexFunc, which run on the informer's loop, must
// use RequestStop.
func (inf *Informer[T]) Stop() {
	done := inf.RequestStop()
	if inf.disp.onHandlerGoroutine() {
		return
	}
	<-done
}

// RequestStop asks the informer to stop and returns at once, with a
// channel that is closed once it has stopped (Stop is RequestStop and a
// wait on that channel). It is safe to call from a handler, which must then
// not wait on the channel. On a stopped informer the channel is closed
// already.
func (inf *Informer[T]) RequestStop() <-chan struct{} {
	inf.runMu.Lock()
	cancel, done := inf.cancel, inf.done
	inf.runMu.Unlock()
	if cancel == nil {
		ch := make(chan struct{})
		close(ch)
		return ch
	}
	cancel()
	return done
}

// Run runs the informer until ctx ends or Stop is called, then returns nil
// once every goroutine it started has ended. It returns ErrRunning at once
// if the informer is already running, and an error wrapping ErrFields if
// Options.Fields do not compile.
func (inf *Informer[T]) Run(ctx context.Context) error {
	if err := inf.configuration().fieldsErr; err != nil {
		return err
	}
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
		if inf.disp.onHandlerGoroutine() {
			// The run winding down waits for this very handler: it cannot
			// be waited for here.
			return nil, nil, false
		}
		<-done
	}
	defer inf.runMu.Unlock()
	ctx, cancel := context.WithCancel(parent)
	inf.started = true
	inf.status.StartedAt.CompareAndSwap(0, time.Now().UnixNano())
	inf.ctx, inf.cancel, inf.done = ctx, cancel, make(chan struct{})
	return ctx, inf.done, true
}

func (inf *Informer[T]) run(ctx context.Context, done chan struct{}) {
	inf.disp.start(ctx)
	inf.resends.start(ctx)
	var detector sync.WaitGroup
	if d := inf.detector; d != nil {
		detector.Go(func() { d.Run(ctx) })
	}
	if after := inf.loop.opts.StartupLogAfter; after > 0 && !inf.status.Synced.Load() {
		detector.Go(func() { inf.logSlowStart(ctx, after) })
	}
	inf.loop.run(ctx) // returns once ctx is done
	inf.resends.stop()
	detector.Wait()
	inf.disp.join()
	inf.loop.closeShard()

	inf.runMu.Lock()
	inf.cancel()
	inf.ctx, inf.cancel, inf.done = nil, nil, nil
	inf.runMu.Unlock()
	close(done)
}

// isStarted reports whether the informer has ever run.
func (inf *Informer[T]) isStarted() bool {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.started
}

// Start-up as a budget (SPEC section 14): how far an informer's first
// list is, and how far each handler is on its initial pass, for metrics,
// the slow-start log line, and the caller (Informer.Startup,
// Registration.Startup).

// Startup is how an informer's start went, or is going.
type Startup struct {
	// Started says the informer has started; Synced that its first list
	// is complete, ListTook how long that took from the first Start (so
	// far, while not Synced).
	Started, Synced bool
	ListTook        time.Duration
	// Objects is how many are cached; Expected how many the first list
	// said it would hold (a paged list's first page tells), 0 if unknown.
	Objects, Expected int
	// HandlersDone says every handler registered has been given and has
	// returned from every object of its initial pass (the first list,
	// or its replay); HandlersTook is how long the slowest took from the
	// informer's start (so far, while not done).
	HandlersDone bool
	HandlersTook time.Duration
	// Restored is what the informer restored from its state file
	// (Options.StateDir) as it started; the zero value if it restored
	// nothing (no file, or one set aside). Set before it synced.
	Restored StateRestore
}

// StateRestore is a restore from the state file: how many objects, from
// which file, at which resourceVersion (the informer caught up from
// there).
type StateRestore struct {
	Objects         int
	File            string
	ResourceVersion string
}

// Startup says how the informer's start went: its first list, and its
// handlers' initial passes.
func (inf *Informer[T]) Startup() Startup {
	st := inf.status
	s := Startup{Objects: inf.cache.Len(), Expected: int(st.Expected.Load()), HandlersDone: true}
	if r := st.Restored.Load(); r != nil {
		s.Restored = StateRestore(*r)
	}
	began := st.StartedAt.Load()
	if began == 0 {
		return s
	}
	s.Started = true
	now := time.Now().UnixNano()
	end := st.SyncedAt.Load()
	s.Synced = end != 0
	if end == 0 {
		end = now
	}
	s.ListTook = time.Duration(end - began)
	inf.disp.mu.RLock()
	for _, l := range inf.disp.listeners {
		done := l.doneAt.Load()
		if done == 0 {
			s.HandlersDone, done = false, now
		}
		s.HandlersTook = max(s.HandlersTook, time.Duration(done-max(began, l.addedAt)))
	}
	inf.disp.mu.RUnlock()
	if !s.Synced {
		s.HandlersDone = false
		s.HandlersTook = max(s.HandlersTook, s.ListTook)
	}
	return s
}

// HandlerStartup is how a handler's initial pass went, or is going: the
// replay of the cache for a handler added to a synced informer, else the
// informer's first list.
type HandlerStartup struct {
	// Name is the handler's function, as the runtime names it.
	Name string
	// Handled is how many events it has returned from; Pending how many
	// wait for it.
	Handled, Pending int
	// Done says it has handled every object of its initial pass; Took is
	// how long that took from its registration (so far, while not Done);
	// InHandler the time spent inside the handler meanwhile.
	Done            bool
	Took, InHandler time.Duration
}

// Startup says how the handler's initial pass went.
func (r *Registration) Startup() HandlerStartup {
	if r == nil || r.l == nil {
		return HandlerStartup{}
	}
	return r.l.startup()
}

func (l *listener[T]) startup() HandlerStartup {
	s := HandlerStartup{Name: l.name, Handled: int(l.delivered.Load()), Pending: l.pending(), InHandler: time.Duration(l.busy.Load())}
	done := l.doneAt.Load()
	s.Done = done != 0
	if done == 0 {
		done = time.Now().UnixNano()
	}
	s.Took = time.Duration(done - l.addedAt)
	return s
}

// handlerName names a handler by the first of fns that is set: its
// function's name without the module path ("main.(*ctrl).onPod").
func handlerName[T Object](fns []func(Event[T])) string {
	for _, fn := range fns {
		if fn == nil {
			continue
		}
		f := runtime.FuncForPC(reflect.ValueOf(fn).Pointer())
		if f == nil {
			return "unknown"
		}
		name := f.Name()
		return name[strings.LastIndex(name, "/")+1:]
	}
	return "none"
}

// startupBusy is Startup, and the time the handlers have spent inside
// during their initial passes (for the metrics).
func (inf *Informer[T]) startupBusy() (Startup, time.Duration) {
	var busy time.Duration
	inf.disp.mu.RLock()
	for _, l := range inf.disp.listeners {
		busy += time.Duration(l.busy.Load())
	}
	inf.disp.mu.RUnlock()
	return inf.Startup(), busy
}

// logSlowStart says once, after after, what of the start is not done:
// the first list (how many objects so far, of how many), or each handler
// still on its initial pass (by name, how many handled, how many wait).
func (inf *Informer[T]) logSlowStart(ctx context.Context, after time.Duration) {
	t := time.NewTimer(after)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return
	case <-t.C:
	}
	s := inf.Startup()
	if !s.Synced {
		inf.log.Info("kinformer: the first list is not complete yet", "after", s.ListTook.Round(time.Millisecond), "objects", s.Objects, "expected", s.Expected)
		return
	}
	inf.disp.mu.RLock()
	var slow []HandlerStartup
	for _, l := range inf.disp.listeners {
		if h := l.startup(); !h.Done {
			slow = append(slow, h)
		}
	}
	inf.disp.mu.RUnlock()
	for _, h := range slow {
		inf.log.Info("kinformer: a handler is still on its initial pass", "handler", h.Name, "after", h.Took.Round(time.Millisecond),
			"handled", h.Handled, "pending", h.Pending, "inHandler", h.InHandler.Round(time.Millisecond), "listTook", s.ListTook.Round(time.Millisecond))
	}
}

// ListGate bounds how many informers sharing it make their initial list at
// once (Options.ListGate): a process that starts a hundred informers
// together does not send a hundred lists of whole collections to the API
// server in one instant, each taking seats of its priority level (a
// list of a large collection takes up to ten), but a few at a time. An
// informer takes a place for each list it makes before it first syncs
// (the initial list and its retries) and gives it back when that list
// ends; later lists (re-lists, resyncs) do not wait.
type ListGate struct{ places chan struct{} }

// DefaultMaxInitialLists is how many of a Factory's informers make their
// initial list at once unless FactoryOptions.MaxInitialLists says.
const DefaultMaxInitialLists = 8

// NewListGate returns a gate of n places; nil (no bound) if n < 1.
func NewListGate(n int) *ListGate {
	if n < 1 {
		return nil
	}
	return &ListGate{places: make(chan struct{}, n)}
}

// enter waits for a place; false if ctx ended first.
func (g *ListGate) enter(ctx context.Context) bool {
	select {
	case g.places <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave gives a place back.
func (g *ListGate) leave() { <-g.places }
