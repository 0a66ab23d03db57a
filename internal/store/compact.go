package store

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"unique"

	"github.com/kinformer/kinformer/internal/packedvalues"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/squash"
)

// The compact cache (Options.Compact), a holding (holding.go): the cache
// holds each object as its encoding, the state file's (internal/persist:
// protobuf for built-in types, JSON otherwise), after managedFields were
// cut and Transform ran, compressed against a dictionary made of the
// cache's first objects (internal/squash; unless CompactUncompressed),
// with what the cache needs without decoding beside it: resourceVersion,
// namespace, index values (computed once, as the object arrives) and, for
// a sharded informer, UID. Readers decompress and decode, outside the
// cache's lock, each its own copy. Events carry their objects packed until
// a handler's goroutine takes the event: it decodes them, once for all
// the handlers (LazyObjects). The state file holds the objects' encodings
// as they came (decompressed as they are written): a restore compresses
// them again, against a dictionary of the restored objects.

// packer is what a compact cache needs to hold objects as bytes: it
// encodes them as they arrive and decodes them as they are read. decode
// may run on many goroutines at once, and every object it returns is new
// and shares nothing mutable with any other. A plain cache has none, and
// its objects never come here.
type packer[T Object] struct {
	encode func(T) ([]byte, error)
	decode func([]byte) (T, error)
	meta   func([]byte) (persist.Meta, bool) // nil: the encoding's metadata cannot be read without decoding
	// uids: packed objects keep their UID (a sharded informer's share is
	// by UID).
	uids bool
	// keyNS: the cache's key is namespace/name (the default KeyFunc), which
	// says every packed object's namespace: it is not kept beside it.
	keyNS bool
	// bufs holds the buffers reads decompress into, if decode copies what
	// it keeps (persist.Codec.Copies): a read then allocates only the
	// object.
	bufs *sync.Pool
	// failed counts reads and events of objects whose bytes did not
	// decode: bytes the cache encoded itself, or that a type's Check
	// passed (protowatch), so never unless one of those is wrong.
	failed atomic.Int64
	// encoded counts the objects the cache encoded itself: those that
	// came decoded without the bytes they came in (after a Transform, or
	// from a client's own decoder).
	encoded atomic.Int64

	// squeeze: objects are held compressed (internal/squash) against
	// dict, a dictionary made of the first objects the cache holds;
	// before it is made, and without squeeze (Options.CompactUncompressed),
	// as they came. With squeeze every packed object's data is a squash
	// entry, whatever its form.
	squeeze bool
	dict    atomic.Pointer[squash.Dict] // nil until made (or taken from the state file); made again by fit
	// samples are copies of the first distinct objects' bytes, at most
	// squash.MaxDictLen in all, until dict is made from them (nil after,
	// and when no dictionary can be made); sampled names the objects
	// (namespace/name): an update of one is not another sample. scratch
	// is the buffer entries are compressed into. The writer's alone.
	samples      [][]byte
	sampledBytes int
	sampled      []string
	noDict       bool
	scratch      []byte
	// base is the ratio (entry bytes to object bytes) of the cache's
	// objects under dict, measured at the first swap after it was made
	// (fit): a re-list whose objects take DegradedFactor times more has
	// the dictionary made again. 0 until measured. The writer's alone.
	base float64
	// retired are the dictionaries made before dict, newest first (at
	// most maxRetiredDicts): the entries of queued events may still be
	// theirs. remade counts the dictionaries made again.
	retired atomic.Pointer[[]*squash.Dict]
	remade  atomic.Int64
	// dictGen counts the changes of dict and retired; toldGen is the
	// count the state file was last told of (tell). reload: an object of
	// the state file was compressed again as it was loaded (the file's
	// entry is another dictionary's), so the file must have every object
	// again (fit). The writer's alone.
	dictGen, toldGen uint64
	reload           bool

	// kept holds the objects decoded once and kept for the kept reads
	// (Cache.GetKept, ListKept, ByIndexKept), by the packed object each
	// was decoded from. Its keys are weak: an entry is deleted once the
	// cache and its events no longer hold the packed object, and the
	// garbage collector has freed it (a cleanup), so a kept object lives
	// as long as the version it was decoded from. anyKept is set by the
	// first: until then a packed object copied for new index values
	// (complete, withValues) has nothing to carry over.
	kept    sync.Map // weak.Pointer[packed] -> T
	anyKept atomic.Bool
	// oddRVs holds the resourceVersions packed.rvn cannot (not a
	// canonical decimal number: never from an etcd-backed server), by
	// their packed object, weakly as kept is.
	oddRVs sync.Map // weak.Pointer[packed] -> string
}

// newPacked makes a packed object of data, at resourceVersion rv, in
// namespace ns.
func (k *packer[T]) newPacked(data []byte, rv, ns string) *packed {
	rvn := rvNumber(rv)
	p := &packed{rl: rvn << lenBits}
	p.setData(data)
	switch {
	case !k.keyNS && ns != "":
		p.ext().kind = unique.Make(nsKind{ns: ns})
	case ns == "":
		p.rl |= clusterBit
	}
	if rvn == 0 {
		k.setOddRV(p, rv)
	}
	return p
}

// SetCompact makes an empty cache compact, for objects of type t, the
// informer's (persist.NewReadCodec), compressed if squeeze (not
// CompactUncompressed), keeping UIDs if uids. false if the type is
// an interface (objects from a ListerWatcher of kinformer.Object, say):
// there is no type to decode into.
func (c *Cache[T]) SetCompact(t reflect.Type, squeeze, uids bool) bool {
	if t.Kind() == reflect.Interface {
		return false
	}
	pc := persist.NewReadCodec[T](t)
	k := &packer[T]{encode: pc.Encode, decode: pc.Decode, meta: pc.Meta, uids: uids, squeeze: squeeze, keyNS: c.defaultKey}
	if pc.Copies && k.squeeze {
		k.bufs = &sync.Pool{New: func() any { return new([]byte) }}
	}
	c.setHolding(k)
	return true
}

// Compact reports whether the cache holds objects as bytes
// (SetCompact).
func (c *Cache[T]) Compact() bool {
	_, ok := c.h.(*packer[T])
	return ok
}

// hold packs what arrived: an undecoded object's bytes (packMeta), or a
// prepared object (pack).
func (k *packer[T]) hold(c *Cache[T], a Arrival[T]) (Ref[T], error) {
	if a.Undecoded != nil {
		return k.packMeta(c, a.Undecoded.Data, a.Undecoded.Meta, nil)
	}
	return k.pack(c, a.Obj, a.Raw, nil)
}

// final is an arrival as the event gives it: an undecoded object's bytes
// (the cache's, or for a deletion's final state its own), decoded by the
// handlers' side, or the object itself, which they need not decode.
func (k *packer[T]) final(a Arrival[T], held Ref[T]) Ref[T] {
	switch {
	case a.Undecoded == nil:
		return Ref[T]{obj: a.Obj}
	case held.p != nil:
		return held
	}
	data := a.Undecoded.Data
	if k.squeeze {
		data = squash.Wrap(make([]byte, 0, len(data)+1), data) // for the event only: not worth compressing
	}
	return Ref[T]{p: k.newPacked(data, a.Undecoded.Meta.ResourceVersion, a.Undecoded.Meta.Namespace)}
}

// pack packs obj for a compact cache's put or swap, with its index
// values: raw if set (the bytes obj was decoded from, as it is), else its
// encoding; entry, if set, is what the cache holds of them (squeezed).
// The writer's alone (hold); it holds wmu to read the indexes, which
// AddIndexers may change.
func (k *packer[T]) pack(c *Cache[T], obj T, raw, entry []byte) (Ref[T], error) {
	data := raw
	if data == nil {
		var err error
		if data, err = k.encode(obj); err != nil {
			return Ref[T]{}, fmt.Errorf("cannot be encoded for the compact cache: %w", err)
		}
		k.encoded.Add(1)
	}
	if entry == nil {
		entry = k.squeezed(metaKey(obj.GetNamespace(), obj.GetName()), data)
	}
	p := k.newPacked(entry, obj.GetResourceVersion(), obj.GetNamespace())
	if k.uids {
		p.ext().uid = string(obj.GetUID())
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && k.meta != nil {
		nk := p.extra().nsKind()
		nk.gvk = gvk
		p.ext().kind = unique.Make(nk) // protobuf has no TypeMeta
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.order) > 0 {
		vals := make([][]string, len(c.order))
		for i, name := range c.order {
			vals[i] = c.indexers[name](obj)
		}
		p.ext().vals = packedvalues.Pack(vals)
	}
	return Ref[T]{p: p}, nil
}

// packMeta packs data, an object's encoding whose metadata says m,
// without decoding it, unless the cache has indexes to compute; entry as
// for pack.
func (k *packer[T]) packMeta(c *Cache[T], data []byte, m persist.Meta, entry []byte) (Ref[T], error) {
	c.wmu.Lock()
	indexed := len(c.order) > 0 // if an index comes before put, put computes its values (complete)
	c.wmu.Unlock()
	if indexed {
		obj, err := k.decode(data)
		if err != nil {
			return Ref[T]{}, err
		}
		return k.pack(c, obj, data, entry)
	}
	if entry == nil {
		entry = k.squeezed(metaKey(m.Namespace, m.Name), data)
	}
	p := k.newPacked(entry, m.ResourceVersion, m.Namespace)
	if k.uids {
		p.ext().uid = m.UID
	}
	return Ref[T]{p: p}, nil
}

// wants: the cache keeps the bytes as they came, so the decoder hands
// them over with each object; with the default key nothing needs the
// object before a handler or a reader does (index values excepted:
// packMeta decodes for them), and it is left undecoded.
func (k *packer[T]) wants(c *Cache[T]) DecoderWants {
	return DecoderWants{KeepRaw: true, Lazy: c.defaultKey}
}

// shares: a compact cache keeps no object to share with.
func (k *packer[T]) shares() bool { return false }

// straight: packed objects are decoded after the read lock.
func (k *packer[T]) straight() bool { return false }

// size is the length of the encoding a packed object keeps (compressed,
// where it is).
func (k *packer[T]) size(r Ref[T]) int {
	if r.p == nil {
		return 0
	}
	return len(r.p.data())
}

// values returns the values kept beside a packed object, or computes an
// object's.
func (k *packer[T]) values(c *Cache[T], r Ref[T], i int) []string {
	if r.p != nil {
		return r.p.extra().vals.At(i)
	}
	return plainHolding[T]{}.values(c, r, i)
}

// withValues keeps vals beside a packed object's values.
func (k *packer[T]) withValues(r Ref[T], vals [][]string) (Ref[T], bool) {
	if r.p == nil {
		return r, false
	}
	p, x := k.copyPacked(r.p), *r.p.extra()
	x.vals = packedvalues.Pack(append(x.vals.All(), vals...))
	p.x = &x
	return Ref[T]{p: p}, true
}

// load returns the object r holds, decoding a packed one.
func (k *packer[T]) load(r Ref[T]) (T, bool) {
	if r.p == nil {
		return plainHolding[T]{}.load(r)
	}
	return k.loadPacked(r.p)
}

// complete gives a packed object made before AddIndexers the values of the
// indexes added since. Under wmu.
func (k *packer[T]) complete(c *Cache[T], r Ref[T]) (Ref[T], bool) {
	if r.p == nil || r.p.extra().vals.N() == len(c.order) {
		return r, false
	}
	obj, ok := k.loadPacked(r.p)
	p, x := k.copyPacked(r.p), *r.p.extra()
	vals := make([][]string, len(c.order)) // every index has a place, even for bytes that do not decode
	copy(vals, r.p.extra().vals.All())
	for i := r.p.extra().vals.N(); ok && i < len(c.order); i++ {
		vals[i] = c.indexers[c.order[i]](obj)
	}
	x.vals = packedvalues.Pack(vals)
	p.x = &x
	return Ref[T]{p: p}, true
}

// loadPacked decodes p (its apiVersion and kind included); false if it
// does not decode (counted in failed).
func (k *packer[T]) loadPacked(p *packed) (T, bool) {
	obj, err := k.unpack(p)
	if err != nil {
		k.failed.Add(1)
		var zero T
		return zero, false
	}
	return obj, true
}

// unpack decodes p, its apiVersion and kind included. A compressed
// entry is decompressed into a pooled buffer if decode copies what it
// keeps (bufs).
func (k *packer[T]) unpack(p *packed) (T, error) {
	var buf *[]byte
	if _, isRaw := squash.Raw(p.data()); k.bufs != nil && !isRaw {
		buf = k.bufs.Get().(*[]byte)
	}
	var dst []byte
	if buf != nil {
		dst = (*buf)[:0]
	}
	data, err := k.plainInto(dst, p)
	var obj T
	if err == nil {
		obj, err = k.decode(data)
	}
	if buf != nil {
		if cap(data) <= maxPooledBuf {
			*buf = data[:0]
		}
		k.bufs.Put(buf)
	}
	if err != nil {
		var zero T
		return zero, err
	}
	if gvk := p.extra().nsKind().gvk; !gvk.Empty() {
		obj.GetObjectKind().SetGroupVersionKind(gvk)
	}
	return obj, err
}

// objects: each object, or, if either is packed, a lazy that decodes
// them on the first handler's goroutine that delivers the event.
func (k *packer[T]) objects(obj, old Ref[T]) (T, T, *LazyObjects[T]) {
	if obj.p == nil && old.p == nil {
		return obj.obj, old.obj, nil
	}
	return obj.obj, old.obj, &LazyObjects[T]{pk: k, obj: obj.p, old: old.p}
}

// LazyObjects are an event's objects still packed. The listeners given
// the same event share one: the first to deliver it decodes, the others
// wait for that decode and get the same objects (as without Compact, an
// event's handlers share its objects).
type LazyObjects[T Object] struct {
	pk       *packer[T] // how to decode them
	obj, old *packed    // nil: the event's own (or none)
	once     sync.Once
	dObj     T
	dOld     T
	err      error
}

// Fill sets *obj and *old, where packed, to their decoded objects; an
// error if one does not decode (counted once, however many handlers get
// the event).
func (z *LazyObjects[T]) Fill(obj, old *T) error {
	z.once.Do(func() {
		var err error
		if z.obj != nil {
			if z.dObj, err = z.pk.unpack(z.obj); err != nil {
				z.err = err
				z.pk.failed.Add(1)
				return
			}
		}
		switch {
		case z.old == nil:
		case z.old == z.obj:
			z.dOld = z.dObj // Resend: Old is the object
		default:
			if z.dOld, err = z.pk.unpack(z.old); err != nil {
				z.err = err
				z.pk.failed.Add(1)
			}
		}
	})
	if z.err != nil {
		return z.err
	}
	if z.obj != nil {
		*obj = z.dObj
	}
	if z.old != nil {
		*old = z.dOld
	}
	return nil
}
