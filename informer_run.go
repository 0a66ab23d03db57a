package kinformer

import (
	"context"
	"sync"
	"time"
)

// An informer's runs: started in the background or run on the caller's
// goroutine, stopped (and waited for, unless from its own handler), and
// run again later from what it keeps.

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
