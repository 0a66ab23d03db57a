package store

import (
	"strings"

	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// How a cache holds its objects. A holding, chosen once when the informer
// is made, is the only code that knows the form a cached object takes (a
// Ref): it turns what arrives into a cached value, reads what the index
// engine needs, decodes on read, gives an event's objects, writes to and
// restores from the state file, and tells the decoder what to hand over.
// The index engine and the reads ask it directly; the rest of the
// informer (the writer, the loop, the listeners) holds refs and asks the
// cache, which answers for it (Final, Objects, IsVersion, ..., below).
//
// The holdings: plainHolding (below), the objects themselves; packer
// (compact.go), their bytes (Options.Compact). A new form is one more
// file.
//
// Its calls are per arrival and per read, never per object inside a
// read's loop: a read asks straight() once, and a plain read appends the
// objects themselves in a tight loop.
type holding[T Object] interface {
	// hold turns an arrival (prepared, unless undecoded) into the value
	// the cache keeps. The writer's alone.
	hold(c *Cache[T], a Arrival[T]) (Ref[T], error)
	// final is the event's Object for an arrival: as it came (a
	// deletion's final state, or the object of a compact cache's event,
	// which the handlers need not decode), or held, what hold made of it
	// (a zero ref if none).
	final(a Arrival[T], held Ref[T]) Ref[T]
	// load returns the object r holds: itself, or decoded anew (false if
	// its bytes do not decode).
	load(r Ref[T]) (T, bool)
	// keep returns the object r holds as the cache's own: itself, or
	// decoded once and kept, so that every keep of r returns the same
	// object (Cache.GetKept).
	keep(r Ref[T]) (T, bool)
	// values returns r's values in the i-th eager index (Cache.order).
	// Under wmu.
	values(c *Cache[T], r Ref[T], i int) []string
	// complete gives r, made before AddIndexers, the values of the
	// indexes added since, if it keeps them, and says whether it changed.
	// Under wmu.
	complete(c *Cache[T], r Ref[T]) (Ref[T], bool)
	// withValues returns r keeping vals, its values in indexes just added
	// (AddIndexers), and whether it changed.
	withValues(r Ref[T], vals [][]string) (Ref[T], bool)
	// fit adjusts items, the whole new content of the cache (a re-list's
	// or a restore's), before it is swapped in, and says whether the state
	// file must have them all again (their bytes changed). Under wmu.
	fit(items *Items[T]) (rewrite bool)
	// isVersion reports whether r is at resourceVersion rv; sameVersion
	// whether a and b are at one. Without decoding.
	isVersion(r Ref[T], rv string) bool
	sameVersion(a, b Ref[T]) bool
	// same reports whether a and b, at one resourceVersion, hold one
	// object: by their uids where they keep them, else by their bytes. A
	// fresh list's diff asks (the root's writer.fresh): another
	// cluster's object may share key and resourceVersion with the cached
	// one.
	same(a, b Ref[T]) bool
	// straight reports whether a read takes every ref's object as it is:
	// it appends them in a loop without a call per object.
	straight() bool
	// objects returns what an event carries for obj and old (zero refs:
	// none): each object, or, where one is still held as bytes, a lazy
	// that decodes it on the first handler's goroutine that delivers the
	// event (nil if both are objects).
	objects(obj, old Ref[T]) (o, od T, lz *LazyObjects[T])
	// record notes r's new state under key in the state file; put notes
	// it in a batch.
	record(s *persist.Persister[T], key string, r Ref[T], rv string)
	put(b *persist.Batch[T], key string, r Ref[T])
	// open opens the state file; if load, for a restore, leaving its
	// objects in it: rv is theirs ("" for none). restore then loads them,
	// giving put each as the holding keeps it (check accepts an object
	// decoded from it), as the file gives them; false if the file turns
	// out unusable (set aside, reported).
	open(c *Cache[T], s *persist.Persister[T], load bool) (rv string, ok bool)
	restore(c *Cache[T], s *persist.Persister[T], check func(key string, obj T) error, put func(key string, r Ref[T])) bool
	// wants says what the decoder is to hand over (an informer without a
	// Transform): objects it strips and shares, or their bytes.
	wants(c *Cache[T]) DecoderWants
	// shares reports whether prepared objects share strings and maps
	// with earlier ones (intern.Sharer): a holding that keeps objects.
	shares() bool
	// size is the bytes r's encoding takes; 0 for a holding of objects,
	// whose size is the Go heap's to say.
	size(r Ref[T]) int
}

// Ref is a cached object as the cache holds it: the object itself, or
// in a compact cache its bytes. The zero Ref is no object. Only this
// package looks inside (the holdings, and the reads for an object held
// as itself, which costs no call); the rest of the informer passes refs
// around, asks the cache about them, and takes an object held as itself
// with Object (the mutation detector, which runs only on such a cache).
type Ref[T Object] struct {
	obj T
	p   *packed
}

// ObjectRef returns obj held as itself, as a cache of objects (not
// compact) holds it.
func ObjectRef[T Object](obj T) Ref[T] { return Ref[T]{obj: obj} }

// namespaceAt returns the namespace of the object r under key, without
// decoding: a packed object of a cache whose key is namespace/name (the
// default key: byKey) keeps none, its key says it.
func (r Ref[T]) namespaceAt(key string, byKey bool) string {
	switch {
	case r.p == nil:
		return r.obj.GetNamespace()
	case r.p.rl&clusterBit != 0:
		return "" // its key is its name, even a name with a '/' (from a fake source)
	case byKey:
		if ns, _, ok := strings.Cut(key, "/"); ok {
			return ns
		}
		return ""
	}
	return r.p.extra().nsKind().ns
}

// UID returns the object's UID without decoding ("" for none: a compact
// cache keeps it only if SetCompact was asked to).
func (r Ref[T]) UID() string {
	if r.p != nil {
		return r.p.extra().uid
	}
	return string(r.obj.GetUID())
}

// Object returns the object r holds as an object (the zero T if it holds
// it in another form, its bytes): what the mutation detector, which runs
// only with a cache of objects, tracks.
func (r Ref[T]) Object() T { return r.obj }

// ready returns the object r holds if reading it costs nothing.
func (r Ref[T]) ready() (T, bool) { return r.obj, r.p == nil }

// Arrival is an object as the decoder hands it to the writer: decoded
// (Obj, with Raw, the bytes it was decoded from, if the decoder kept
// them, as DecoderWants.KeepRaw asks), or left undecoded (Undecoded: a
// compact cache's protobuf stream, protowatch.Format.Lazy). The writer
// prepares a decoded object (Transform, managedFields) and sets Obj to
// what it made before the cache holds it (Cache.Hold).
type Arrival[T Object] struct {
	Obj       T
	Raw       []byte
	Undecoded *protowatch.Raw
}

// Identity returns what the writer reads of an arrival before preparing
// it: its key (by the cache's key func, or for an undecoded object
// MetaNamespaceKey, which a cache that takes undecoded objects has),
// resourceVersion and UID.
func (c *Cache[T]) Identity(a Arrival[T]) (key, rv, uid string) {
	if m := a.Undecoded; m != nil {
		return metaKey(m.Meta.Namespace, m.Meta.Name), m.Meta.ResourceVersion, m.Meta.UID
	}
	return c.keyFunc(a.Obj), a.Obj.GetResourceVersion(), string(a.Obj.GetUID())
}

// DecoderWants is what a cache asks of the direct decoder (the loop sets
// its decoding from it, Cache.DecoderWants): Share, objects stripped and
// sharing strings and maps with earlier ones (the writer's
// intern.Sharer); KeepRaw, each object's bytes with it (Arrival.Raw);
// Lazy, objects left undecoded where the decoder can (Arrival.Undecoded).
type DecoderWants struct{ Share, KeepRaw, Lazy bool }

// What the writer, the loop and the listeners ask of the holding: the
// cache answers for it, so that they hold refs and never the holding.

// Final returns the event's Object for an arrival: as it came (a
// deletion's final state, or the object of a compact cache's event,
// which the handlers need not decode), or held, what Hold made of it (a
// zero Ref if none).
func (c *Cache[T]) Final(a Arrival[T], held Ref[T]) Ref[T] { return c.h.final(a, held) }

// Objects returns what an event carries for obj and old (zero refs:
// none): each object, or, where one is still held as bytes, a lazy that
// decodes it on the first handler's goroutine that delivers the event
// (nil if both are objects).
func (c *Cache[T]) Objects(obj, old Ref[T]) (o, od T, lz *LazyObjects[T]) {
	return c.h.objects(obj, old)
}

// IsVersion reports whether r is at resourceVersion rv, without decoding.
func (c *Cache[T]) IsVersion(r Ref[T], rv string) bool { return c.h.isVersion(r, rv) }

// SameVersion reports whether a and b are at one resourceVersion,
// without decoding.
func (c *Cache[T]) SameVersion(a, b Ref[T]) bool { return c.h.sameVersion(a, b) }

// Same reports whether a and b, at one resourceVersion, hold one object:
// by their UIDs where the cache keeps them, else by their bytes. A fresh
// list's diff asks: another cluster's object may share key and
// resourceVersion with the cached one.
func (c *Cache[T]) Same(a, b Ref[T]) bool { return c.h.same(a, b) }

// Shares reports whether the objects the writer prepares share strings
// and maps with earlier ones (intern.Sharer): a cache of objects, which
// keeps them.
func (c *Cache[T]) Shares() bool { return c.h.shares() }

// DecoderWants says what the decoder is to hand over to this cache (an
// informer without a Transform): objects it strips and shares, or their
// bytes.
func (c *Cache[T]) DecoderWants() DecoderWants { return c.h.wants(c) }

// RecordState notes r's new state under key in the state file s, as the
// cache holds it.
func (c *Cache[T]) RecordState(s *persist.Persister[T], key string, r Ref[T], rv string) {
	c.h.record(s, key, r, rv)
}

// PutState notes r under key in b, a batch of the state file, as the
// cache holds it.
func (c *Cache[T]) PutState(b *persist.Batch[T], key string, r Ref[T]) { c.h.put(b, key, r) }

// OpenState opens the state file s; if load, for a restore, leaving its
// objects in it: rv is theirs ("" for none). False if the file turns out
// unusable.
func (c *Cache[T]) OpenState(s *persist.Persister[T], load bool) (rv string, ok bool) {
	return c.h.open(c, s, load)
}

// RestoreState loads the objects of the state file s (opened by OpenState
// to load), giving put each as the cache holds it (check accepts an
// object decoded from it), as the file gives them; false if the file
// turns out unusable (set aside, reported).
func (c *Cache[T]) RestoreState(s *persist.Persister[T], check func(key string, obj T) error, put func(key string, r Ref[T])) bool {
	return c.h.restore(c, s, check, put)
}

// plainHolding holds the objects themselves: a ref is the object, read at
// no cost; the state file holds their encoding, made by the persister.
type plainHolding[T Object] struct{}

func (plainHolding[T]) hold(_ *Cache[T], a Arrival[T]) (Ref[T], error) {
	return Ref[T]{obj: a.Obj}, nil
}
func (plainHolding[T]) final(a Arrival[T], _ Ref[T]) Ref[T] { return Ref[T]{obj: a.Obj} }
func (plainHolding[T]) load(r Ref[T]) (T, bool)             { return r.obj, true }
func (plainHolding[T]) keep(r Ref[T]) (T, bool)             { return r.obj, true }
func (plainHolding[T]) values(c *Cache[T], r Ref[T], i int) []string {
	return c.indexers[c.order[i]](r.obj)
}
func (plainHolding[T]) complete(_ *Cache[T], r Ref[T]) (Ref[T], bool)    { return r, false }
func (plainHolding[T]) withValues(r Ref[T], _ [][]string) (Ref[T], bool) { return r, false }
func (plainHolding[T]) straight() bool                                   { return true }
func (plainHolding[T]) fit(*Items[T]) bool                               { return false }
func (plainHolding[T]) isVersion(r Ref[T], rv string) bool               { return r.obj.GetResourceVersion() == rv }
func (plainHolding[T]) sameVersion(a, b Ref[T]) bool {
	return a.obj.GetResourceVersion() == b.obj.GetResourceVersion()
}
func (plainHolding[T]) same(a, b Ref[T]) bool { return a.UID() == b.UID() }
func (plainHolding[T]) shares() bool          { return true }
func (plainHolding[T]) size(Ref[T]) int       { return 0 }

func (plainHolding[T]) objects(obj, old Ref[T]) (T, T, *LazyObjects[T]) {
	return obj.obj, old.obj, nil
}

func (plainHolding[T]) record(s *persist.Persister[T], key string, r Ref[T], rv string) {
	s.Record(key, r.obj, false, rv)
}

func (plainHolding[T]) put(b *persist.Batch[T], key string, r Ref[T]) { b.Put(key, r.obj) }

func (plainHolding[T]) open(_ *Cache[T], s *persist.Persister[T], load bool) (string, bool) {
	return s.OpenHeld(load)
}

func (plainHolding[T]) restore(_ *Cache[T], s *persist.Persister[T], check func(key string, obj T) error, put func(key string, r Ref[T])) bool {
	return s.LoadHeld(check, func(key string, obj T) { put(key, Ref[T]{obj: obj}) })
}

// wants: the decoder strips and shares the objects itself, and they
// need no preparing after (see the root's writer.prepare).
func (plainHolding[T]) wants(*Cache[T]) DecoderWants { return DecoderWants{Share: true} }
