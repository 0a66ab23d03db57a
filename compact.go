package kinformer

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"unique"
	"weak"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer/internal/intern"
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
// the handlers (lazyEvent). The state file holds the objects' encodings
// as they came (decompressed as they are written): a restore compresses
// them again, against a dictionary of the restored objects.

// packed is an object of a compact cache. It is never changed once made
// (and published).
type packed struct {
	data []byte // the encoding
	rv   string // metadata.resourceVersion
	ns   string // metadata.namespace, interned
	// x holds what only some caches or objects have; nil for none, which
	// keeps packed at 64 bytes.
	x *packedExtra
}

// packedExtra is what a packed object may have besides its bytes.
type packedExtra struct {
	uid  string     // metadata.uid, if the cache keeps UIDs (Cache.uids)
	vals [][]string // the values of the eager indexes, in Cache.order
	// gvk is the object's apiVersion and kind, if it had any and its
	// encoding does not hold them (protobuf): set again on decoding.
	gvk unique.Handle[schema.GroupVersionKind]
}

var noExtra packedExtra // never changed

// extra returns p's extras, to read.
func (p *packed) extra() *packedExtra {
	if p.x == nil {
		return &noExtra
	}
	return p.x
}

// ext returns p's extras to set, while p is being made.
func (p *packed) ext() *packedExtra {
	if p.x == nil {
		p.x = &packedExtra{}
	}
	return p.x
}

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
	// bufs holds the buffers reads decompress into, if decode copies what
	// it keeps (persist.Codec.Copies): a read then allocates only the
	// object.
	bufs *sync.Pool
	// failed counts reads and events of objects whose bytes did not
	// decode: bytes the cache encoded itself, or that a type's Check
	// passed (protowatch), so never unless one of those is wrong.
	failed atomic.Int64

	// squeeze: objects are held compressed (internal/squash) against
	// dict, a dictionary made of the first objects the cache holds;
	// before it is made, and without squeeze (Options.CompactUncompressed),
	// as they came. With squeeze every packed object's data is a squash
	// entry, whatever its form.
	squeeze bool
	dict    atomic.Pointer[squash.Dict] // nil until made; then never changed
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
}

// squeezed returns data, the bytes of the object named name
// (namespace/name), as the cache holds them: compressed against the
// dictionary, or wrapped as they came while there is none (squash.Wrap);
// data itself without squeeze. The entry is a slice of its own length,
// sharing nothing with data. The writer's alone.
func (k *packer[T]) squeezed(name string, data []byte) []byte {
	if !k.squeeze {
		return data
	}
	d := k.dict.Load()
	if d == nil && !k.noDict {
		k.sample(name, data)
		d = k.dict.Load()
	}
	if d == nil {
		return squash.Wrap(make([]byte, 0, len(data)+1), data)
	}
	k.scratch = d.Encode(k.scratch[:0], data)
	return bytes.Clone(k.scratch)
}

// sample keeps a copy of data for the dictionary, if it is the first of
// its object, and makes the dictionary once there are DictSamples
// objects' samples, or MaxDictLen bytes of them. An informer of fewer
// objects never pays for one (its samples, up to 64 KiB, and s2's 32 KiB
// table once it compresses).
func (k *packer[T]) sample(name string, data []byte) {
	if slices.Contains(k.sampled, name) {
		return
	}
	k.sampled = append(k.sampled, name)
	data = data[:min(len(data), squash.MaxDictLen-k.sampledBytes)]
	k.samples = append(k.samples, bytes.Clone(data))
	k.sampledBytes += len(data)
	if len(k.samples) < squash.DictSamples && k.sampledBytes < squash.MaxDictLen {
		return
	}
	d, err := squash.NewDict(k.samples)
	k.samples, k.sampled = nil, nil
	if err != nil {
		k.noDict = true // too few bytes to be worth one: kept as they come
		return
	}
	k.dict.Store(d)
}

// plain returns the bytes of p as they came: decompressed, or without a
// copy if p holds them so. Any goroutine.
func (k *packer[T]) plain(p *packed) ([]byte, error) { return k.plainInto(nil, p) }

// plainInto is plain, decompressing into dst's room if it must.
func (k *packer[T]) plainInto(dst []byte, p *packed) ([]byte, error) {
	if !k.squeeze {
		return p.data, nil
	}
	if b, ok := squash.Raw(p.data); ok {
		return b, nil
	}
	d := k.dict.Load()
	if d == nil {
		return nil, squash.ErrCorrupt // compressed, and no dictionary: never made here
	}
	b, err := d.Decode(dst, p.data)
	if err != nil {
		// An entry of a dictionary made before (an event queued before
		// a re-list made it again): its checksum tells which.
		if old := k.retired.Load(); old != nil {
			for _, d := range *old {
				if b, err2 := d.Decode(dst, p.data); err2 == nil {
					return b, nil
				}
			}
		}
	}
	return b, err
}

// maxPooledBuf is the largest buffer a read gives back to bufs: a rare
// large object's is left to the garbage collector.
const maxPooledBuf = 64 << 10

// maxRetiredDicts is how many dictionaries made before the current one a
// compact cache keeps to decode the entries of events queued before: an
// event older than that many re-lists that each made the dictionary
// again is an Error naming its key.
const maxRetiredDicts = 4

// remakeMin is how much a re-list must hold (its objects' bytes) for fit
// to judge the dictionary: fewer are no measure.
const remakeMin = 64 << 10

// fit checks how the dictionary fits items, a re-list's or a restore's
// objects, before they are swapped in. The first time after the
// dictionary was made it measures the ratio (base), and compresses the
// objects held as they came before there was one; later, if they take
// squash.DegradedFactor times more room than then (their shape
// changed), it makes the dictionary again from them and compresses them
// all against it. The writer's alone, under wmu.
func (k *packer[T]) fit(items map[string]ref[T]) {
	d := k.dict.Load()
	if d == nil || len(items) < 2*squash.DictSamples {
		return
	}
	in, out := k.measure(items)
	if in < remakeMin {
		return
	}
	ratio := float64(out) / float64(in)
	switch {
	case k.base == 0:
		k.recompress(items, d, nil)
		in, out = k.measure(items)
		k.base = float64(out) / float64(in)
		return
	case ratio <= k.base*squash.DegradedFactor:
		return
	}
	samples := make([][]byte, 0, squash.DictSamples)
	size := 0
	for _, r := range items {
		if len(samples) == squash.DictSamples || size >= squash.MaxDictLen {
			break
		}
		if r.p == nil {
			continue
		}
		if b, err := k.plain(r.p); err == nil {
			samples = append(samples, b)
			size += len(b)
		}
	}
	nd, err := squash.NewDict(samples)
	if err != nil {
		return
	}
	done := maps.Clone(items)
	k.recompress(done, d, nd)
	if in2, out2 := k.measure(done); float64(out2)/float64(in2) >= ratio {
		k.base = ratio // no better: the objects no longer compress; judge from here
		return
	}
	maps.Copy(items, done)
	retired := []*squash.Dict{d}
	if old := k.retired.Load(); old != nil {
		retired = append(retired, (*old)[:min(len(*old), maxRetiredDicts-1)]...)
	}
	k.retired.Store(&retired) // before the new dictionary: a reader always finds one that decodes
	k.dict.Store(nd)
	k.remade.Add(1)
	in, out = k.measure(items)
	k.base = float64(out) / float64(in)
}

// measure returns the bytes of items' objects and of their entries.
func (k *packer[T]) measure(items map[string]ref[T]) (in, out int64) {
	for _, r := range items {
		if r.p == nil {
			continue
		}
		if n, err := squash.Len(r.p.data); err == nil {
			in += int64(n)
			out += int64(len(r.p.data))
		}
	}
	return in, out
}

// recompress compresses items' entries against to: all of them, or with
// to nil those held as they came, against d. An entry that does not
// decode is left as it is.
func (k *packer[T]) recompress(items map[string]ref[T], d, to *squash.Dict) {
	for key, r := range items {
		if r.p == nil {
			continue
		}
		_, isRaw := squash.Raw(r.p.data)
		if to == nil && !isRaw {
			continue
		}
		b, err := k.plain(r.p)
		if err != nil {
			continue
		}
		enc := d
		if to != nil {
			enc = to
		}
		k.scratch = enc.Encode(k.scratch[:0], b)
		if to == nil && k.scratch[0] == r.p.data[0] {
			continue // still as it came: not worth a new entry
		}
		p := *r.p
		p.data = bytes.Clone(k.scratch)
		k.carry(r.p, &p)
		items[key] = ref[T]{p: &p}
	}
}

// setCompact makes an empty cache compact, for objects of the informer's
// type (persist.NewReadCodec), keeping UIDs if uids. false if the type is
// an interface (objects from a ListerWatcher of kinformer.Object, say):
// there is no type to decode into.
func (c *Cache[T]) setCompact(o *Options[T], uids bool) bool {
	if o.objectType().Kind() == reflect.Interface {
		return false
	}
	pc := persist.NewReadCodec[T](o.objectType())
	k := &packer[T]{encode: pc.Encode, decode: pc.Decode, meta: pc.Meta, uids: uids, squeeze: !o.CompactUncompressed}
	if pc.Copies && k.squeeze {
		k.bufs = &sync.Pool{New: func() any { return new([]byte) }}
	}
	c.setHolding(k)
	return true
}

// Compact reports whether the cache holds objects as bytes
// (Options.Compact).
func (c *Cache[T]) Compact() bool {
	_, ok := c.h.(*packer[T])
	return ok
}

// hold packs what arrived: an undecoded object's bytes (packMeta), or a
// prepared object (pack).
func (k *packer[T]) hold(c *Cache[T], a arrival[T]) (ref[T], error) {
	if a.undecoded != nil {
		return k.packMeta(c, a.undecoded.Data, a.undecoded.Meta)
	}
	return k.pack(c, a.obj, a.raw)
}

// final is an arrival as the event gives it: an undecoded object's bytes
// (the cache's, or for a deletion's final state its own), decoded by the
// handlers' side, or the object itself, which they need not decode.
func (k *packer[T]) final(a arrival[T], held ref[T]) ref[T] {
	switch {
	case a.undecoded == nil:
		return ref[T]{obj: a.obj}
	case held.p != nil:
		return held
	}
	data := a.undecoded.Data
	if k.squeeze {
		data = squash.Wrap(make([]byte, 0, len(data)+1), data) // for the event only: not worth compressing
	}
	return ref[T]{p: &packed{data: data, rv: a.undecoded.Meta.ResourceVersion}}
}

// pack packs obj for a compact cache's put or swap, with its index
// values: raw if set (the bytes obj was decoded from, as it is), else its
// encoding. The writer's alone (hold); it holds wmu to read the
// indexes, which addIndexers may change.
func (k *packer[T]) pack(c *Cache[T], obj T, raw []byte) (ref[T], error) {
	data := raw
	if data == nil {
		var err error
		if data, err = k.encode(obj); err != nil {
			return ref[T]{}, fmt.Errorf("cannot be encoded for the compact cache: %w", err)
		}
	}
	p := &packed{data: k.squeezed(metaKey(obj.GetNamespace(), obj.GetName()), data), rv: obj.GetResourceVersion(), ns: unique.Make(obj.GetNamespace()).Value()}
	if k.uids {
		p.ext().uid = string(obj.GetUID())
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && k.meta != nil {
		p.ext().gvk = unique.Make(gvk) // protobuf has no TypeMeta
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.order) > 0 {
		vals := make([][]string, len(c.order))
		for i, name := range c.order {
			vals[i] = c.indexers[name](obj)
		}
		p.ext().vals = vals
	}
	return ref[T]{p: p}, nil
}

// packMeta packs data, an object's encoding whose metadata says m,
// without decoding it, unless the cache has indexes to compute.
func (k *packer[T]) packMeta(c *Cache[T], data []byte, m persist.Meta) (ref[T], error) {
	c.wmu.Lock()
	indexed := len(c.order) > 0 // if an index comes before put, put computes its values (complete)
	c.wmu.Unlock()
	if indexed {
		obj, err := k.decode(data)
		if err != nil {
			return ref[T]{}, err
		}
		return k.pack(c, obj, data)
	}
	p := &packed{data: k.squeezed(metaKey(m.Namespace, m.Name), data), rv: m.ResourceVersion, ns: unique.Make(m.Namespace).Value()}
	if k.uids {
		p.ext().uid = m.UID
	}
	return ref[T]{p: p}, nil
}

// packEncoded packs the encoding of an object under key, as the state
// file holds it, without decoding it where it can: protobuf, keyed by
// MetaNamespaceKey, no index but the namespace one. Otherwise the object
// is decoded to check its key and compute its index values.
func (k *packer[T]) packEncoded(c *Cache[T], key string, data []byte) (ref[T], error) {
	if k.meta != nil && c.defaultKey {
		if m, ok := k.meta(data); ok {
			if got := metaKey(m.Namespace, m.Name); got != key {
				return ref[T]{}, fmt.Errorf("it has key %q", got)
			}
			return k.packMeta(c, data, m)
		}
	}
	obj, err := k.decode(data)
	if err != nil {
		return ref[T]{}, err
	}
	if got := c.keyFunc(obj); got != key {
		return ref[T]{}, fmt.Errorf("it has key %q", got)
	}
	return k.pack(c, obj, data)
}

// open loads the state file's objects as the file holds them, decoding
// only those it must (packEncoded).
func (k *packer[T]) open(c *Cache[T], s *persist.Persister[T], load bool, _ func(key string, obj T) error) (map[string]ref[T], string, bool) {
	items := map[string]ref[T]{}
	rv, ok := s.OpenEncoded(load, func(key string, data []byte) error {
		r, err := k.packEncoded(c, key, data)
		items[key] = r
		return err
	})
	return items, rv, ok
}

// record notes r's bytes, as the file holds them (or, for an object the
// cache holds as it came, its encoding).
func (k *packer[T]) record(s *persist.Persister[T], key string, r ref[T], rv string) {
	if r.p == nil {
		plainHolding[T]{}.record(s, key, r, rv)
		return
	}
	data, err := k.plain(r.p)
	if err != nil {
		// Never for the cache's own entries: the file is dropped rather
		// than hold a wrong object or lack one.
		k.failed.Add(1)
		s.RecordLost(key, err, rv)
		return
	}
	s.RecordEncoded(key, data, rv)
}

func (k *packer[T]) put(b *persist.Batch[T], key string, r ref[T]) {
	if r.p == nil {
		plainHolding[T]{}.put(b, key, r)
		return
	}
	data, err := k.plain(r.p)
	if err != nil { // as in record
		k.failed.Add(1)
		b.Lost(key, err)
		return
	}
	b.PutEncoded(key, data)
}

// decoding: the cache keeps the bytes as they came, so the decoder hands
// them over with each object; with the default key nothing needs the
// object before a handler or a reader does (index values excepted:
// packMeta decodes for them), and it is left undecoded.
func (k *packer[T]) decoding(c *Cache[T], dc *decoding, _ *intern.Sharer) {
	dc.keepRaw, dc.lazy = true, c.defaultKey
}

// shares: a compact cache keeps no object to share with.
func (k *packer[T]) shares() bool { return false }

// straight: packed objects are decoded after the read lock.
func (k *packer[T]) straight() bool { return false }

// values returns the values kept beside a packed object, or computes an
// object's.
func (k *packer[T]) values(c *Cache[T], r ref[T], i int) []string {
	if r.p != nil {
		return r.p.extra().vals[i]
	}
	return plainHolding[T]{}.values(c, r, i)
}

// withValues keeps vals beside a packed object's values.
func (k *packer[T]) withValues(r ref[T], vals [][]string) (ref[T], bool) {
	if r.p == nil {
		return r, false
	}
	p, x := *r.p, *r.p.extra()
	x.vals = append(slices.Clip(x.vals), vals...)
	p.x = &x
	k.carry(r.p, &p)
	return ref[T]{p: &p}, true
}

// load returns the object r holds, decoding a packed one.
func (k *packer[T]) load(r ref[T]) (T, bool) {
	if r.p == nil {
		return plainHolding[T]{}.load(r)
	}
	return k.loadPacked(r.p)
}

// keep returns the object r holds as the cache's own: the object kept for
// its packed object, or decoded now and kept. Two reads at once may both
// decode; the first to keep its object wins, and both return that one.
func (k *packer[T]) keep(r ref[T]) (T, bool) {
	if r.p == nil {
		return r.obj, true
	}
	w := weak.Make(r.p)
	if obj, ok := k.kept.Load(w); ok {
		return obj.(T), true
	}
	obj, ok := k.loadPacked(r.p)
	if !ok {
		return obj, false
	}
	if got, loaded := k.kept.LoadOrStore(w, obj); loaded {
		return got.(T), true
	}
	k.anyKept.Store(true)
	runtime.AddCleanup(r.p, k.forget, w)
	return obj, true
}

// forget deletes the kept object of a packed object that is gone.
func (k *packer[T]) forget(w weak.Pointer[packed]) { k.kept.Delete(w) }

// carry keeps for to, a copy of from with new index values, the object
// kept for from, if any: a kept object stays the cache's own when an
// index is added.
func (k *packer[T]) carry(from, to *packed) {
	if !k.anyKept.Load() {
		return
	}
	obj, ok := k.kept.Load(weak.Make(from))
	if !ok {
		return
	}
	w := weak.Make(to)
	if _, loaded := k.kept.LoadOrStore(w, obj); !loaded {
		runtime.AddCleanup(to, k.forget, w)
	}
}

// complete gives a packed object made before addIndexers the values of the
// indexes added since. Under wmu.
func (k *packer[T]) complete(c *Cache[T], r ref[T]) (ref[T], bool) {
	if r.p == nil || len(r.p.extra().vals) == len(c.order) {
		return r, false
	}
	obj, ok := k.loadPacked(r.p)
	p, x := *r.p, *r.p.extra()
	x.vals = make([][]string, len(c.order)) // every index has a place, even for bytes that do not decode
	copy(x.vals, r.p.extra().vals)
	for i := len(r.p.extra().vals); ok && i < len(c.order); i++ {
		x.vals[i] = c.indexers[c.order[i]](obj)
	}
	p.x = &x
	k.carry(r.p, &p)
	return ref[T]{p: &p}, true
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
	if _, isRaw := squash.Raw(p.data); k.bufs != nil && !isRaw {
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
	if gvk := p.extra().gvk; err == nil && gvk != (unique.Handle[schema.GroupVersionKind]{}) {
		obj.GetObjectKind().SetGroupVersionKind(gvk.Value())
	}
	return obj, err
}

// entry makes e an entry of a listener's queue: ready, or, if either of
// its objects is packed, to be decoded on the first handler's goroutine
// that takes it (lazyEvent).
func (k *packer[T]) entry(e Event[T], obj, old ref[T], at int64) queued[T] {
	e.Object, e.Old = obj.obj, old.obj
	if obj.p == nil && old.p == nil {
		return queued[T]{e: e, at: at}
	}
	return queued[T]{e: e, at: at, lz: &lazyEvent[T]{pk: k, obj: obj.p, old: old.p}}
}

// lazyEvent is an event whose objects are still packed. The listeners
// given the same event share one: the first to deliver it decodes, the
// others wait for that decode and get the same objects (as without
// Compact, an event's handlers share its objects).
type lazyEvent[T Object] struct {
	pk       *packer[T] // how to decode them
	obj, old *packed    // nil: the event's own (or none)
	once     sync.Once
	dObj     T
	dOld     T
	err      error
}

// resolve returns e with its packed objects decoded: an Error event
// naming the object if one does not decode.
func (z *lazyEvent[T]) resolve(e Event[T]) Event[T] {
	z.once.Do(func() {
		var err error
		if z.obj != nil {
			if z.dObj, err = z.pk.unpack(z.obj); err != nil {
				z.err = err
				z.pk.failed.Add(1) // once, however many handlers get the event
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
			}
		}
		if z.err != nil {
			z.pk.failed.Add(1) // once, however many handlers get the event
		}
	})
	if z.err != nil {
		return Event[T]{Type: Error, Key: e.Key, ResourceVersion: e.ResourceVersion,
			Err: fmt.Errorf("%w: %s event of %s: the compact cache's bytes do not decode: %w", ErrUnexpectedObject, e.Type, e.Key, z.err)}
	}
	if z.obj != nil {
		e.Object = z.dObj
	}
	if z.old != nil {
		e.Old = z.dOld
	}
	return e
}
