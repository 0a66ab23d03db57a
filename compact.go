package kinformer

import (
	"fmt"
	"reflect"
	"sync/atomic"
	"unique"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer/internal/persist"
)

// The compact cache (Options.Compact): the cache holds each object as its
// encoding, the state file's (internal/persist: protobuf for built-in
// types, JSON otherwise), after managedFields were cut and Transform ran,
// with what the cache needs without decoding beside it: resourceVersion,
// namespace, index values (computed once, as the object arrives) and, for
// a sharded informer, UID. Readers decode, outside the cache's lock, each
// its own copy. Events carry their objects packed until a handler's
// goroutine takes the event: it decodes them, once for all the handlers
// (lazyEvent).

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
	// failed counts reads and events of objects whose bytes did not
	// decode: bytes the cache encoded itself, or that a type's Check
	// passed (protowatch), so never unless one of those is wrong.
	failed atomic.Int64
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
	c.pk = &packer[T]{encode: pc.Encode, decode: pc.Decode, meta: pc.Meta, uids: uids}
	return true
}

// Compact reports whether the cache holds objects as bytes
// (Options.Compact).
func (c *Cache[T]) Compact() bool { return c.pk != nil }

// pack packs obj for a compact cache's put or swap, with its index
// values: raw if set (the bytes obj was decoded from, as it is), else its
// encoding. The writer's alone (Cache.hold); it holds wmu to read the
// indexes, which addIndexers may change.
func (c *Cache[T]) pack(obj T, raw []byte) (ref[T], error) {
	data := raw
	if data == nil {
		var err error
		if data, err = c.pk.encode(obj); err != nil {
			return ref[T]{}, err
		}
	}
	p := &packed{data: data, rv: obj.GetResourceVersion(), ns: unique.Make(obj.GetNamespace()).Value()}
	if c.pk.uids {
		p.ext().uid = string(obj.GetUID())
	}
	if gvk := obj.GetObjectKind().GroupVersionKind(); !gvk.Empty() && c.pk.meta != nil {
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
func (c *Cache[T]) packMeta(data []byte, m persist.Meta) (ref[T], error) {
	c.wmu.Lock()
	indexed := len(c.order) > 0 // if an index comes before put, put computes its values (complete)
	c.wmu.Unlock()
	if indexed {
		obj, err := c.pk.decode(data)
		if err != nil {
			return ref[T]{}, err
		}
		return c.pack(obj, data)
	}
	p := &packed{data: data, rv: m.ResourceVersion, ns: unique.Make(m.Namespace).Value()}
	if c.pk.uids {
		p.ext().uid = m.UID
	}
	return ref[T]{p: p}, nil
}

// packEncoded packs the encoding of an object under key, as the state
// file holds it, without decoding it where it can: protobuf, keyed by
// MetaNamespaceKey, no index but the namespace one. Otherwise the object
// is decoded to check its key and compute its index values.
func (c *Cache[T]) packEncoded(key string, data []byte) (ref[T], error) {
	if c.pk.meta != nil && c.defaultKey {
		if m, ok := c.pk.meta(data); ok {
			if got := metaKey(m.Namespace, m.Name); got != key {
				return ref[T]{}, fmt.Errorf("it has key %q", got)
			}
			return c.packMeta(data, m)
		}
	}
	obj, err := c.pk.decode(data)
	if err != nil {
		return ref[T]{}, err
	}
	if got := c.keyFunc(obj); got != key {
		return ref[T]{}, fmt.Errorf("it has key %q", got)
	}
	return c.pack(obj, data)
}

// complete gives a packed object made before addIndexers the values of the
// indexes added since. Under wmu.
func (c *Cache[T]) complete(r ref[T]) ref[T] {
	if len(r.p.extra().vals) == len(c.order) {
		return r
	}
	obj, ok := c.pk.load(r.p)
	p, x := *r.p, *r.p.extra()
	x.vals = make([][]string, len(c.order)) // every index has a place, even for bytes that do not decode
	copy(x.vals, r.p.extra().vals)
	for i := len(r.p.extra().vals); ok && i < len(c.order); i++ {
		x.vals[i] = c.indexers[c.order[i]](obj)
	}
	p.x = &x
	return ref[T]{p: &p}
}

// load decodes p (its apiVersion and kind included); false if it does not
// decode (counted in failed).
func (k *packer[T]) load(p *packed) (T, bool) {
	obj, err := k.unpack(p)
	if err != nil {
		k.failed.Add(1)
		var zero T
		return zero, false
	}
	return obj, true
}

// unpack decodes p, its apiVersion and kind included.
func (k *packer[T]) unpack(p *packed) (T, error) {
	obj, err := k.decode(p.data)
	if gvk := p.extra().gvk; err == nil && gvk != (unique.Handle[schema.GroupVersionKind]{}) {
		obj.GetObjectKind().SetGroupVersionKind(gvk.Value())
	}
	return obj, err
}
