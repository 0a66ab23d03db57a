package kinformer

import "github.com/kinformer/kinformer/internal/persist"

// Pipelined initial delivery (SPEC section 14): the first list of an
// empty cache is not gathered whole before anyone sees it. Each listed
// object is put in the cache and its Added (CauseList) queued as it
// arrives, so that the handlers work, each on its own goroutine, while
// the list streams: the list's transfer and the handlers' work overlap
// instead of adding up. The stream never waits for a handler (queues hold
// what is cached, not copies). At the list's end the informer is synced
// and the state file gets the whole list in one batch; a registration's
// HasSynced still means the list is complete and it has handled all of
// it. A list cut off midway leaves what arrived in the cache, unsynced:
// the next list diffs against it (a re-list's semantics, cause still
// List). Re-lists, restores, sharded informers and a View's joins swap
// the whole list in as before.

// pipes says whether the list about to start delivers as it arrives:
// the cache is empty and has never synced, and no share or join says
// which objects are new.
func (l *loop[T]) pipes() bool {
	return l.sh == nil && l.joining() == nil && !l.w.status.synced.Load() && l.w.cache.size() == 0
}

// pipeOne puts r, listed under key at resourceVersion rv (the object's:
// the list's is known only at its end), in the cache and queues the
// Added of the object before it (Modified if the list named it twice).
// Its own waits for the next object, or for the list's end (pipeDone):
// the last Added comes with the sync, so a handler that has been given
// every object knows the list is complete, and the state file has it.
func (w *writer[T]) pipeOne(key string, r ref[T], rv string) {
	w.disp.update(func(p publisher[T]) {
		e := Event[T]{Type: Added, Key: key, ResourceVersion: rv, Cause: CauseList}
		old, existed := w.put(p, key, r)
		if existed {
			e.Type = Modified
		}
		w.emitHeld(p)
		w.held = &heldEvent[T]{e: e, obj: r, old: old}
	})
}

// heldEvent is the last object's event of a pipelined list, not yet
// queued (pipeOne).
type heldEvent[T Object] struct {
	e        Event[T]
	obj, old ref[T]
}

// emitHeld queues the held event, if any; inside an update.
func (w *writer[T]) emitHeld(p publisher[T]) {
	if h := w.held; h != nil {
		w.held = nil
		w.emit(p, h.e, h.obj, h.old)
	}
}

// pipeEnd queues the held event of a pipelined list that did not
// complete: its object is in the cache.
func (w *writer[T]) pipeEnd() {
	if w.held != nil {
		w.disp.update(w.emitHeld)
	}
}

// pipeDone ends a pipelined list at rv: the cache holds items already
// (pipeOne); the state file gets them all, and the informer is synced.
func (w *writer[T]) pipeDone(items map[string]ref[T], rv string) {
	w.cache.refit(items) // the file gets all of them anyway
	w.disp.update(func(p publisher[T]) {
		if w.state != nil {
			var b *persist.Batch[T] = w.state.Batch()
			for key, r := range items {
				w.cache.h.put(b, key, r)
			}
			b.End(rv)
		}
		w.setRV(rv)
		w.emitHeld(p)
		w.syncedLocked(p, true)
	})
	w.recovered()
}
