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

// pipeOne takes r, listed under key at resourceVersion rv (the object's:
// the list's is known only at its end): it puts the object before it in
// the cache and queues its Added (Modified if the list named it twice),
// and holds r until the next object, or the list's end (pipeDone). So
// the last object is cached and handed out with the sync: a handler that
// has been given every object knows the list is complete, and the state
// file has it. The cache and the events stay in step (a handler added
// meanwhile gets each object once, by replay or by its event).
func (w *writer[T]) pipeOne(key string, r ref[T], rv string) {
	w.disp.update(w.putHeld)
	w.held = &heldObject[T]{key: key, r: r, rv: rv}
}

// heldObject is the last object of a pipelined list, not yet cached
// (pipeOne).
type heldObject[T Object] struct {
	key, rv string
	r       ref[T]
}

// putHeld puts the held object in the cache and queues its event, if
// there is one; inside an update.
func (w *writer[T]) putHeld(p publisher[T]) {
	h := w.held
	if h == nil {
		return
	}
	w.held = nil
	e := Event[T]{Type: Added, Key: h.key, ResourceVersion: h.rv, Cause: CauseList}
	old, existed := w.put(p, h.key, h.r)
	if existed {
		e.Type = Modified
	}
	w.emit(p, e, h.r, old)
}

// pipeEnd caches the held object of a pipelined list that did not
// complete, as what arrived before it is.
func (w *writer[T]) pipeEnd() {
	if w.held != nil {
		w.disp.update(w.putHeld)
	}
}

// pipeDone ends a pipelined list at rv: the cache holds items already
// (pipeOne); the state file gets them all (and only them, widened: it held
// a narrower projection's), and the informer is synced.
func (w *writer[T]) pipeDone(items map[string]ref[T], rv string, widened bool) {
	w.cache.refit(items) // the file gets all of them anyway
	if h := w.held; h != nil {
		h.r = items[h.key] // as refit left it
	}
	w.disp.update(func(p publisher[T]) {
		if w.state != nil {
			var b *persist.Batch[T] = w.state.Batch()
			if widened {
				b.Reset() // the file held the narrower objects, or none
			}
			for key, r := range items {
				w.cache.h.put(b, key, r)
			}
			b.End(rv)
		}
		w.setRV(rv)
		w.putHeld(p)
		w.takeConfig()
		w.syncedLocked(p, true)
	})
	w.recovered()
}
