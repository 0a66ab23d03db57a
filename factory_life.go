package kinformer

import (
	"context"
	"errors"
	"fmt"
	"slices"

	"golang.org/x/sync/errgroup"
)

// The lifetime of a Factory's informers: started together or as they are
// made, waited for, stopped together, alone, or when the last consumer
// releases one; a stopped one is kept until its goroutine has ended, and
// forgotten then.

// Start starts every informer the factory has made, and makes Shared and
// Dynamic start the ones made later at once. Each runs on a goroutine of
// the factory until Stop or StopShared. Start returns at once; it is a
// no-op on a started or stopped factory.
func (f *Factory) Start() {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.started || f.stopped {
		return
	}
	f.started = true
	for _, e := range f.entries {
		f.startLocked(e)
	}
}

func (f *Factory) startLocked(e *factoryEntry) {
	ctx, cancel := context.WithCancel(context.Background())
	e.cancel, e.done = cancel, make(chan struct{})
	go func() {
		defer close(e.done)
		if err := e.inf.Run(ctx); err != nil && f.log != nil {
			// Someone else started it: it runs, but not under the factory.
			f.log.Warn("kinformer: a shared informer was started outside its factory", "resource", e.resource, "error", err.Error())
		}
	}()
}

// WaitForSync waits until every informer the factory has made so far has
// synced (nil), until one fails in a way retrying cannot fix (the first
// such error, [IsPersistent], prefixed with the resource: "configmaps:
// …", apierrors.IsForbidden and the like still work on it), or until ctx
// ends (ctx.Err()). Informers keep retrying in every case. Call Start
// first: informers that do not run never sync.
func (f *Factory) WaitForSync(ctx context.Context) error {
	f.mu.Lock()
	entries := make(map[factoryKey]*factoryEntry, len(f.entries))
	for k, e := range f.entries {
		entries[k] = e
	}
	f.mu.Unlock()
	g, gctx := errgroup.WithContext(ctx)
	for k, e := range entries {
		g.Go(func() error {
			err := e.inf.WaitForSync(gctx)
			if err == nil || gctx.Err() != nil && errors.Is(err, gctx.Err()) {
				return err
			}
			return fmt.Errorf("%s: %w", sharedName(k, e.resource), err)
		})
	}
	err := g.Wait()
	if err != nil && ctx.Err() != nil && !IsPersistent(err) {
		return ctx.Err()
	}
	return err
}

// Stop stops every informer of the factory and waits until their
// goroutines have ended. The factory is then done: Start does nothing,
// Shared and Dynamic return ErrFactoryStopped. The informers keep their
// caches, which consumers may still read.
//
// Called from a handler of one of the factory's informers, Stop cannot
// wait (the handler would wait for itself): it stops them and returns, and
// a later Stop from elsewhere waits.
func (f *Factory) Stop() {
	f.mu.Lock()
	f.stopped = true
	for _, e := range f.entries {
		f.retireLocked(e)
	}
	clear(f.entries)
	retired := slices.Clone(f.retired)
	f.mu.Unlock()
	wait(retired)
}

// StopShared stops a shared informer alone (its CRD was deleted, say) and
// waits until it has ended, leaving the factory's other informers running.
// The factory forgets it: a later Shared or Dynamic makes a new one. It
// reports whether inf was the factory's. As Stop, called from a handler of
// the factory's informers it does not wait.
func StopShared[T Object](f *Factory, inf *Informer[T]) bool {
	f.mu.Lock()
	var found *factoryEntry
	for k, e := range f.entries {
		if e.inf == sharedInformer(inf) {
			found = e
			delete(f.entries, k)
			f.retireLocked(e)
			break
		}
	}
	f.mu.Unlock()
	if found == nil {
		return false
	}
	wait([]*factoryEntry{found})
	f.pruneRetired()
	return true
}

// pruneRetired forgets the retired entries that have ended: Stop need not
// join them, and the factory must not keep them (and their caches) alive.
func (f *Factory) pruneRetired() {
	f.mu.Lock()
	f.retired = slices.DeleteFunc(f.retired, func(r *factoryEntry) bool { return r.ended() })
	f.mu.Unlock()
}

// Release gives back one of the references to inf that Shared, Typed,
// Metadata and Dynamic hand out, one per call. The last one stops inf
// and waits until it has ended, as StopShared does (and, as it does, not
// from a handler of the factory's informers); the factory forgets it, and
// a later call makes a new one. Release reports whether inf was the
// factory's. Releasing more often than acquiring is a no-op once inf is
// forgotten.
func Release[T Object](f *Factory, inf *Informer[T]) bool {
	found, _ := release(f, inf)
	return found
}

// release is Release that also reports whether it stopped inf (no one
// else held it), whose goroutine has then ended.
func release[T Object](f *Factory, inf *Informer[T]) (bool, bool) {
	f.mu.Lock()
	var found, retired *factoryEntry
	for k, e := range f.entries {
		if e.inf == sharedInformer(inf) {
			found = e
			if e.refs--; e.refs <= 0 {
				retired = e
				delete(f.entries, k)
				f.retireLocked(e)
			}
			break
		}
	}
	f.mu.Unlock()
	if retired != nil {
		wait([]*factoryEntry{retired})
		f.pruneRetired()
	}
	return found != nil, retired != nil
}

// retireLocked stops e and keeps it until its goroutine has ended, for
// Stop to join.
func (f *Factory) retireLocked(e *factoryEntry) {
	if e.cancel != nil {
		e.cancel()
	}
	e.inf.dropMetrics()
	f.retired = slices.DeleteFunc(f.retired, func(r *factoryEntry) bool { return r.ended() })
	f.retired = append(f.retired, e)
}

// ended reports whether e's goroutine has ended, or never began.
func (e *factoryEntry) ended() bool {
	if e.done == nil {
		return true
	}
	select {
	case <-e.done:
		return true
	default:
		return false
	}
}

// wait waits for the goroutines of stopped entries, unless called from a
// handler of one of them: that one would wait for itself, and another
// could be waiting for this one.
func wait(entries []*factoryEntry) {
	for _, e := range entries {
		if e.onHandler() {
			return
		}
	}
	for _, e := range entries {
		if e.done != nil {
			<-e.done
		}
	}
}
