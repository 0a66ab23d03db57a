package kinformer

import (
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// How a cache holds its objects. A holding, chosen once when the informer
// is made, is the only code that knows the form a cached object takes (a
// ref): it turns what arrives into a cached value, reads what the index
// engine needs, decodes on read, builds the listeners' queue entries,
// writes to and restores from the state file, and tells the decoder what
// to hand over. The rest of the informer (the index engine, the writer,
// the loop, the dispatcher) holds refs and asks the holding.
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
	hold(c *Cache[T], a arrival[T]) (ref[T], error)
	// final is the event's Object for an arrival: as it came (a
	// deletion's final state, or the object of a compact cache's event,
	// which the handlers need not decode), or held, what hold made of it
	// (a zero ref if none).
	final(a arrival[T], held ref[T]) ref[T]
	// load returns the object r holds: itself, or decoded anew (false if
	// its bytes do not decode).
	load(r ref[T]) (T, bool)
	// keep returns the object r holds as the cache's own: itself, or
	// decoded once and kept, so that every keep of r returns the same
	// object (Cache.GetKept).
	keep(r ref[T]) (T, bool)
	// values returns r's values in the i-th eager index (Cache.order).
	// Under wmu.
	values(c *Cache[T], r ref[T], i int) []string
	// complete gives r, made before addIndexers, the values of the
	// indexes added since, if it keeps them, and says whether it changed.
	// Under wmu.
	complete(c *Cache[T], r ref[T]) (ref[T], bool)
	// withValues returns r keeping vals, its values in indexes just added
	// (addIndexers), and whether it changed.
	withValues(r ref[T], vals [][]string) (ref[T], bool)
	// fit adjusts items, the whole new content of the cache (a re-list's
	// or a restore's), before it is swapped in, and says whether the state
	// file must have them all again (their bytes changed). Under wmu.
	fit(items map[string]ref[T]) (rewrite bool)
	// isVersion reports whether r is at resourceVersion rv; sameVersion
	// whether a and b are at one. Without decoding.
	isVersion(r ref[T], rv string) bool
	sameVersion(a, b ref[T]) bool
	// same reports whether a and b, at one resourceVersion, hold one
	// object: by their uids where they keep them, else by their bytes. A
	// fresh list's diff asks (writer.fresh): another cluster's object may
	// share key and resourceVersion with the cached one.
	same(a, b ref[T]) bool
	// straight reports whether a read takes every ref's object as it is:
	// it appends them in a loop without a call per object.
	straight() bool
	// objects returns what an event carries for obj and old (zero refs:
	// none): each object, or, where one is still held as bytes, a lazy
	// that decodes it on the first handler's goroutine that delivers the
	// event (nil if both are objects).
	objects(obj, old ref[T]) (o, od T, lz *lazyObjects[T])
	// record notes r's new state under key in the state file; put notes
	// it in a batch.
	record(s *persist.Persister[T], key string, r ref[T], rv string)
	put(b *persist.Batch[T], key string, r ref[T])
	// open opens the state file; if load, for a restore, leaving its
	// objects in it: rv is theirs ("" for none). restore then loads them,
	// giving put each as the holding keeps it (check accepts an object
	// decoded from it), as the file gives them; false if the file turns
	// out unusable (set aside, reported).
	open(c *Cache[T], s *persist.Persister[T], load bool) (rv string, ok bool)
	restore(c *Cache[T], s *persist.Persister[T], check func(key string, obj T) error, put func(key string, r ref[T])) bool
	// wants says what the decoder is to hand over (an informer without a
	// Transform): objects it strips and shares, or their bytes.
	wants(c *Cache[T]) decoderWants
	// shares reports whether prepared objects share strings and maps
	// with earlier ones (intern.Sharer): a holding that keeps objects.
	shares() bool
	// size is the bytes r's encoding takes; 0 for a holding of objects,
	// whose size is the Go heap's to say.
	size(r ref[T]) int
}

// ref is a cached object as the holding keeps it. The zero ref is no
// object. Only the holdings look inside; the others use its methods.
type ref[T Object] struct {
	obj T
	p   *packed
}

// namespace returns the object's namespace without decoding.
func (r ref[T]) namespace() string {
	if r.p != nil {
		return r.p.namespace()
	}
	return r.obj.GetNamespace()
}

// uid returns the object's UID without decoding (a compact cache keeps it
// only if uids is set).
func (r ref[T]) uid() string {
	if r.p != nil {
		return r.p.extra().uid
	}
	return string(r.obj.GetUID())
}

// object returns the object r holds as an object (the zero T if it holds
// it in another form): what the mutation detector, which runs only with
// plainHolding, tracks.
func (r ref[T]) object() T { return r.obj }

// ready returns the object r holds if reading it costs nothing.
func (r ref[T]) ready() (T, bool) { return r.obj, r.p == nil }

// arrival is an object as the decoder hands it to the writer: decoded
// (obj, with raw, the bytes it was decoded from, if the decoder kept
// them), or left undecoded (a compact cache's protobuf stream,
// protowatch.Format.Lazy).
type arrival[T Object] struct {
	obj       T
	raw       []byte
	undecoded *protowatch.Raw
}

// identity returns what the writer reads of an arrival before preparing
// it: its key (by keyFunc, or for an undecoded object MetaNamespaceKey),
// resourceVersion and UID.
func (a arrival[T]) identity(keyFunc KeyFunc[T]) (key, rv, uid string) {
	if m := a.undecoded; m != nil {
		return metaKey(m.Meta.Namespace, m.Meta.Name), m.Meta.ResourceVersion, m.Meta.UID
	}
	return keyFunc(a.obj), a.obj.GetResourceVersion(), string(a.obj.GetUID())
}

// decoded makes an arrival of obj, prepared.
func (a arrival[T]) decoded(obj T) arrival[T] {
	a.obj = obj
	return a
}

// decoderWants is what a holding asks of the direct decoder (the loop
// sets its decoding from it): share, objects stripped and sharing strings
// and maps with earlier ones (the writer's intern.Sharer); keepRaw, each
// object's bytes with it; lazy, objects left undecoded where the decoder
// can.
type decoderWants struct{ share, keepRaw, lazy bool }

// plainHolding holds the objects themselves: a ref is the object, read at
// no cost; the state file holds their encoding, made by the persister.
type plainHolding[T Object] struct{}

func (plainHolding[T]) hold(_ *Cache[T], a arrival[T]) (ref[T], error) {
	return ref[T]{obj: a.obj}, nil
}
func (plainHolding[T]) final(a arrival[T], _ ref[T]) ref[T] { return ref[T]{obj: a.obj} }
func (plainHolding[T]) load(r ref[T]) (T, bool)             { return r.obj, true }
func (plainHolding[T]) keep(r ref[T]) (T, bool)             { return r.obj, true }
func (plainHolding[T]) values(c *Cache[T], r ref[T], i int) []string {
	return c.indexers[c.order[i]](r.obj)
}
func (plainHolding[T]) complete(_ *Cache[T], r ref[T]) (ref[T], bool)    { return r, false }
func (plainHolding[T]) withValues(r ref[T], _ [][]string) (ref[T], bool) { return r, false }
func (plainHolding[T]) straight() bool                                   { return true }
func (plainHolding[T]) fit(map[string]ref[T]) bool                       { return false }
func (plainHolding[T]) isVersion(r ref[T], rv string) bool               { return r.obj.GetResourceVersion() == rv }
func (plainHolding[T]) sameVersion(a, b ref[T]) bool {
	return a.obj.GetResourceVersion() == b.obj.GetResourceVersion()
}
func (plainHolding[T]) same(a, b ref[T]) bool { return a.uid() == b.uid() }
func (plainHolding[T]) shares() bool          { return true }
func (plainHolding[T]) size(ref[T]) int       { return 0 }

func (plainHolding[T]) objects(obj, old ref[T]) (T, T, *lazyObjects[T]) {
	return obj.obj, old.obj, nil
}

func (plainHolding[T]) record(s *persist.Persister[T], key string, r ref[T], rv string) {
	s.Record(key, r.obj, false, rv)
}

func (plainHolding[T]) put(b *persist.Batch[T], key string, r ref[T]) { b.Put(key, r.obj) }

func (plainHolding[T]) open(_ *Cache[T], s *persist.Persister[T], load bool) (string, bool) {
	return s.OpenHeld(load)
}

func (plainHolding[T]) restore(_ *Cache[T], s *persist.Persister[T], check func(key string, obj T) error, put func(key string, r ref[T])) bool {
	return s.LoadHeld(check, func(key string, obj T) { put(key, ref[T]{obj: obj}) })
}

// wants: the decoder strips and shares the objects itself, and they
// need no preparing after (see writer.prepare).
func (plainHolding[T]) wants(*Cache[T]) decoderWants { return decoderWants{share: true} }
