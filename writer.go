package kinformer

import (
	"errors"
	"fmt"
	"log/slog"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/slots"
	"github.com/kinformer/kinformer/internal/status"
	"github.com/kinformer/kinformer/internal/store"
)

// writer is the only writer of an informer's cache and status, and the
// only source of its events. It belongs to the loop's goroutine: it reads
// the cache's map without the lock (no one else writes it), diffs a
// re-list outside the lock, holds the lock only to swap, and queues the
// events after.
type writer[T Object] struct {
	cache  *Cache[T]
	status *status.Status
	disp   *dispatcher[T]
	log    *slog.Logger

	transform   func(T) (T, error) // Options.Transform; nil for none
	keepManaged bool
	// fields is the projection (Options.Fields); nil: whole objects.
	fields *projection.Fields
	// share interns strings and shares equal maps between objects, by
	// content here and by wire bytes in the direct decoder (internal/direct).
	share *intern.Sharer
	// shard, if set, is the share of a sharded informer (Options.Sharding):
	// objects outside it are not cached, as if outside a selector.
	shard *slots.Set
	// state, if set, keeps the state file (Options.StateDir) up to date
	// with every change made here.
	state *persist.Persister[T]
	// detect is told of every object cached, replaced and removed, through
	// put, remove and swap: the mutation detector (Options.DetectMutations),
	// or noMutationHook, which does nothing.
	detect mutationHook[T]
	// piping: the list under way delivers each object as it arrives
	// (list.go); set by the loop for the list. piped: objects of a
	// pipelined list that did not end are in the cache, which has not
	// synced: the next list's differences are still the initial list's.
	piping, piped bool
	// held is the last object of a pipelined list, cached with the next
	// one's arrival or the list's end (list.go).
	held *heldObject[T]
	// fresh: the next list keeps no cached instance (collect) and its
	// diff compares what the holding has of each object at the cached
	// version (store.Cache.Same): the server's history is another one
	// (anotherHistory), where an object at a cached key and version may
	// be another cluster's. Set by the loop; the list's replace clears it.
	// blind counts the objects the list under way kept from the cache
	// with no uid to tell them by (a compact cache's): if that list finds
	// another history, it is listed again, fresh (loop.listedFrom).
	fresh bool
	blind int
	// widened: the projection is wider than the cached objects' (a
	// Factory's consumer asked for more fields while the informer ran,
	// loop.adopt): the next list takes every object as it comes (fresh),
	// queues Modified for each one cached before, and rewrites the state
	// file whole. takes is the config.gen that list makes the informer's
	// (status.take; 0: none). Set by the loop; the list's replace clears
	// them.
	widened bool
	takes   uint64
}

// newWriter returns the writer of c and s, which queues its events on d,
// with the options that say how objects are prepared; the loop adds the
// rest before the first run (the state file, the mutation detector), and
// changes them as it takes a new configuration (loop.configure).
func newWriter[T Object](c *Cache[T], s *status.Status, d *dispatcher[T], log *slog.Logger, o *config[T]) *writer[T] {
	return &writer[T]{cache: c, status: s, disp: d, log: log, transform: o.Transform,
		keepManaged: o.KeepManagedFields, share: &intern.Sharer{}, detect: noMutationHook[T]{}}
}

// What the loop hands the writer: its configuration, and what the next
// list is to do. The loop sets nothing of the writer's directly.

// configure makes the writer prepare objects with transform and fields
// (loop.configure), and, if state is not nil, keep that state file.
func (w *writer[T]) configure(transform func(T) (T, error), fields *projection.Fields, state *persist.Persister[T]) {
	w.transform, w.fields = transform, fields
	if state != nil {
		w.state = state
	}
}

// detectWith makes hook the writer's mutation hook; the Sharer forgets
// the maps it shares once found is raised (loop.detectMutations).
func (w *writer[T]) detectWith(hook mutationHook[T], found *atomic.Bool) {
	w.detect = hook
	w.share.Stale = found
}

// listFresh makes the next list keep no cached instance (fresh): the
// server's history is another one.
func (w *writer[T]) listFresh() { w.fresh = true }

// listAgainIfBlind says, after a list that found another history,
// whether it kept objects it could not tell by uid (blind): then the
// next list is fresh, and it says so.
func (w *writer[T]) listAgainIfBlind() bool {
	w.fresh = w.blind > 0
	return w.fresh
}

// listStarts resets, before a list, the count of the objects it keeps
// blind.
func (w *writer[T]) listStarts() { w.blind = 0 }

// widen makes the next list take every object as it comes, for a wider
// projection, and make configuration gen the informer's (loop.adopt).
func (w *writer[T]) widen(gen uint64) { w.widened, w.fresh, w.takes = true, true, gen }

// takeAfterList reports whether a list for a wider projection is under
// way; if so, the configuration it makes the informer's is gen now.
func (w *writer[T]) takeAfterList(gen uint64) bool {
	if w.takes == 0 {
		return false
	}
	w.takes = gen
	return true
}

// pipe makes the list under way deliver each object as it arrives
// (on), or ends that (list.go).
func (w *writer[T]) pipe(on bool) { w.piping = on }

// put stores r (store.Cache.Hold's) under key in the cache, inside an update;
// the detector compares the object it replaces with its copy, and copies
// the new one. The detector is never on in a compact cache.
func (w *writer[T]) put(p publisher[T], key string, r store.Ref[T]) (old store.Ref[T], existed bool) {
	old, existed = w.cache.s.Put(key, r)
	w.detect.put(p.emit, key, old.Object(), existed, r.Object())
	return old, existed
}

// remove removes key from the cache, inside an update; the detector
// compares the object removed with its copy.
func (w *writer[T]) remove(p publisher[T], key string) (old store.Ref[T], existed bool) {
	old, existed = w.cache.s.Remove(key)
	if existed {
		w.detect.retire(p.emit, key, old.Object())
	}
	return old, existed
}

// swap makes items the cache's content, inside an update; the detector
// compares the objects replaced or dropped with their copies, and copies
// the new ones.
func (w *writer[T]) swap(p publisher[T], items *store.Items[T]) (old *store.Items[T], rewrite bool) {
	old, rewrite = w.cache.s.Swap(items)
	w.detect.swap(p.emit, old, items)
	return old, rewrite
}

// emit queues e with obj as its Object and old as its Old (zero refs:
// none), as the cache's holding makes the entry (decoded by the handlers'
// side if need be).
func (w *writer[T]) emit(p publisher[T], e Event[T], obj, old store.Ref[T]) {
	p.emitQueued(entryOf(w.cache, e, obj, old, 0))
}

// hold readies what arrived (prepared, unless undecoded) under key for
// the cache (store.Cache.Hold); false if the cache cannot hold it (reported:
// the object is skipped, as one that fails its Transform).
func (w *writer[T]) hold(key string, a store.Arrival[T]) (store.Ref[T], bool) {
	r, err := w.cache.s.Hold(a)
	if err != nil {
		w.report(fmt.Errorf("%w: %s: %w", ErrUnexpectedObject, key, err))
		return r, false
	}
	return r, true
}

// prepareFunc readies a new object for the cache; false means it must not
// be cached (an Error event has been queued).
type prepareFunc[T Object] func(T) (T, bool)

// prepare clears the fields a projection leaves out, strips managedFields
// (unless kept), applies Options.Transform, and makes the result share
// strings and maps with earlier objects. Sharing comes after the
// Transform, which may modify its object.
func (w *writer[T]) prepare(obj T) (T, bool) {
	if w.fields != nil {
		if u, ok := any(obj).(*unstructured.Unstructured); ok {
			w.fields.Apply(u.Object)
		} else {
			w.fields.Apply(obj)
		}
	}
	return w.prepareDecoded(obj)
}

// prepareDecoded is prepare for an object the direct decoder made, which
// left out what the projection does (but did not Transform or share).
func (w *writer[T]) prepareDecoded(obj T) (T, bool) {
	if !w.keepManaged {
		obj.SetManagedFields(nil)
	}
	if w.transform != nil {
		out, err := w.transform(obj)
		if err == nil && isNil(out) {
			err = errors.New("it returned nil")
		}
		if err != nil {
			w.report(fmt.Errorf("%w for %s: %w", ErrTransform, w.cache.s.Key(obj), err))
			return out, false
		}
		obj = out
	}
	if w.cache.s.Shares() {
		w.share.Object(obj)
	}
	return obj, true
}

// prepared is the prepareFunc of objects the direct decoder has already
// stripped and shared (it does so only without a Transform).
func prepared[T Object](obj T) (T, bool) { return obj, true }

// setRV records rv, and that the server has just been heard from.
func (w *writer[T]) setRV(rv string) {
	w.status.Heard()
	w.status.Advance(rv)
}

// bookmark records a bookmark's resourceVersion and queues it.
func (w *writer[T]) bookmark(obj T, rv string) {
	w.disp.update(func(p publisher[T]) {
		w.setRV(rv)
		if w.state != nil {
			w.state.Advance(rv)
		}
		p.emit(Event[T]{Type: Bookmark, Object: obj, ResourceVersion: rv})
	})
}

// apply applies an Added, Modified or Deleted event from the watch to the
// cache and queues what changed. An object the decoder left undecoded (a
// compact cache's protobuf stream, protowatch.Format.Lazy: only with
// MetaNamespaceKey and no Transform, which need the object) is neither
// decoded nor prepared: the cache keeps its bytes, and the handlers' side
// decodes them for the event.
func (w *writer[T]) apply(typ EventType, a store.Arrival[T], prepare prepareFunc[T]) {
	key, rv, uid := w.cache.s.Identity(a)
	ok := true
	var r store.Ref[T]
	switch {
	case w.outsideUID(uid):
		// Not this replica's: a server without sharded watches sent it, or
		// a watch opened for the share before it shrank. Never cached (the
		// shrink dropped it if it was): treated as a deletion of nothing.
		typ = Deleted
	case a.Undecoded == nil:
		a.Obj, ok = prepare(a.Obj)
	}
	if ok && typ != Deleted {
		r, ok = w.hold(key, a)
	}
	eObj := w.cache.s.Final(a, r)
	w.disp.update(func(p publisher[T]) { w.applyLocked(p, typ, eObj, r, ok, key, rv) })
}

// collect adds a listed object to items. If the cache holds the same
// object at the same resourceVersion (and uid, where the cache keeps it:
// another cluster's object may share both key and resourceVersion), that
// instance is kept and the new copy is dropped at once, unprepared: a
// re-list of a mostly unchanged collection then holds one copy of each
// object, not two. Not on a fresh list (another history).
func (w *writer[T]) collect(items *store.Items[T], a store.Arrival[T], prepare prepareFunc[T]) {
	key, rv, uid := w.cache.s.Identity(a)
	if w.outsideUID(uid) {
		return
	}
	if old, ok := w.cache.s.Peek(key); ok && !w.fresh && w.cache.s.IsVersion(old, rv) && (old.UID() == "" || old.UID() == uid) {
		items.Set(key, old)
		if old.UID() == "" {
			w.blind++
		}
		return
	}
	if a.Undecoded == nil {
		obj, ok := prepare(a.Obj)
		if !ok {
			return
		}
		a.Obj, key = obj, w.cache.s.Key(obj)
	}
	if r, ok := w.hold(key, a); ok {
		items.Set(key, r)
		if w.piping {
			w.piped = true
			w.pipeOne(key, r, rv)
		}
	}
}

// applyLocked is apply's change of the cache, inside the dispatcher's
// update; ok is false if the new state did not prepare. r is it held for
// the cache (unless Deleted), eObj the event's Object, as the holding
// gives it (store.Cache.Final).
func (w *writer[T]) applyLocked(p publisher[T], typ EventType, eObj, r store.Ref[T], ok bool, key, rv string) {
	// The resourceVersion is recorded once the cache holds the change:
	// WaitForResourceVersion then finds the cache at that version.
	defer w.setRV(rv)
	e := Event[T]{Key: key, ResourceVersion: rv}
	if rv == "" {
		e.ResourceVersion = w.status.ResourceVersion()
	}
	eOld := store.Ref[T]{} // Modified: the state the cache held
	switch {
	case typ == Deleted || !ok:
		// A deletion always removes, whether or not its final state
		// prepares. An object whose new state fails to transform is
		// dropped, as a re-list would drop it: the cache never keeps a state
		// the server has moved past.
		old, existed := w.remove(p, key)
		if w.state != nil {
			if existed {
				w.state.Record(key, old.Object(), true, e.ResourceVersion)
			} else {
				w.state.Advance(e.ResourceVersion)
			}
		}
		if !existed {
			return // never cached: nothing to tell
		}
		e.Type = Deleted
		if !ok {
			eObj = old // the last state that prepared
			if typ != Deleted {
				e.Cause = CauseTransform // dropped by the informer, not deleted
			}
		}
	default:
		if old, existed := w.put(p, key, r); existed {
			e.Type, eOld = Modified, old
		} else {
			e.Type = Added
		}
		if w.state != nil {
			w.record(key, r, e.ResourceVersion)
		}
	}
	w.emit(p, e, eObj, eOld)
}

// replace swaps items (filled by collect, which keeps the cached instance
// of unchanged objects) in as the cache's whole content at rv, marks the
// informer synced, and queues an event for every difference: Deleted for
// keys that vanished, Added for new keys, Modified for objects whose
// resourceVersion or uid changed. New objects of the slots in gained (a
// sharded informer's share grew) are Added with CauseReshard. Readers are held up
// only by the swap itself, not by the diff or the queueing.
func (w *writer[T]) replace(items *store.Items[T], rv string, gained *slots.Set) {
	fresh, widened := w.fresh, w.widened
	w.fresh, w.widened = false, false
	if w.piping {
		w.pipeDone(items, rv, widened)
		w.piped = false
		return
	}
	first := !w.status.Synced.Load()
	cause := CauseRelist
	if first && (w.cache.s.Size() == 0 || w.piped) {
		cause = CauseList
	}
	w.piped = false
	w.disp.update(func(p publisher[T]) {
		var batch *persist.Batch[T]
		if w.state != nil {
			batch = w.state.Batch() // the file's next state is the whole change, or none of it
			defer batch.End(rv)
			if widened {
				batch.Reset() // the file held the narrower objects, or none
			}
		}
		old, rewrite := w.swap(p, items)
		w.setRV(rv)
		for key, o := range old.All() {
			if !items.Has(key) {
				w.emit(p, Event[T]{Type: Deleted, Key: key, ResourceVersion: rv, Cause: cause}, o, store.Ref[T]{})
				if batch != nil {
					batch.Delete(key, o.Object())
				}
			}
		}
		for key, r := range items.All() {
			o, existed := old.Get(key)
			switch {
			case !existed:
				c := cause
				if gained != nil && gained.Has(r.UID()) {
					c = CauseReshard
				}
				w.emit(p, Event[T]{Type: Added, Key: key, ResourceVersion: rv, Cause: c}, r, store.Ref[T]{})
			case widened || !w.cache.s.SameVersion(o, r) || o.UID() != r.UID() || fresh && !w.cache.s.Same(o, r):
				// Another uid at one resourceVersion, or other bytes where
				// the holding keeps no uid: another cluster's object
				// (ErrAnotherHistory). Widened: the object now has the
				// fields a new consumer reads.
				w.emit(p, Event[T]{Type: Modified, Key: key, ResourceVersion: rv, Cause: cause}, r, o)
			case !rewrite:
				continue
			}
			if batch != nil {
				w.cache.s.PutState(batch, key, r)
			}
		}
		w.takeConfig()
		w.syncedLocked(p, first)
	})
	w.recovered()
}

// takeConfig marks the configuration the list just ended was made under
// as taken (status.take), if the loop gave it one to take: WaitForSync
// returns again. Called before syncedLocked, in the dispatcher's update,
// once the cache holds the list.
func (w *writer[T]) takeConfig() {
	if w.takes != 0 {
		w.status.Take(w.takes)
		w.takes = 0
	}
}

// gone empties the cache of a resource the server no longer serves (its
// list answered 404: a custom resource whose CustomResourceDefinition was
// deleted): Deleted, with CauseGone, for each object, and the state file
// follows. It returns how many there were.
func (w *writer[T]) gone() (n int) {
	if w.cache.s.Size() == 0 {
		return 0
	}
	rv := w.status.ResourceVersion()
	w.disp.update(func(p publisher[T]) {
		var batch *persist.Batch[T]
		if w.state != nil {
			batch = w.state.Batch()
			defer batch.End(rv)
		}
		old, _ := w.swap(p, w.cache.s.NewItems(0))
		n = old.Len()
		for key, o := range old.All() {
			w.emit(p, Event[T]{Type: Deleted, Key: key, ResourceVersion: rv, Cause: CauseGone}, o, store.Ref[T]{})
			if batch != nil {
				batch.Delete(key, o.Object())
			}
		}
	})
	return n
}

// recovered clears the persistent error, saying so if there was one.
func (w *writer[T]) recovered() {
	if was := w.status.OK(); was != nil {
		w.log.Info("kinformer: recovered; lists and watches succeed again after: " + was.Error())
	}
}

// syncedLocked marks the informer synced inside an update: registrations
// added before (if first: the first list, or the catch-up of a restored
// cache) are synced once they have handled the events queued so far.
// Synced is set before new registrations may come (they wait for the
// update), so each either is marked here or finds it synced.
func (w *writer[T]) syncedLocked(p publisher[T], first bool) {
	if first {
		p.markSynced()
	}
	w.status.SetSync(true, nil)
}
