package kinformer

import (
	"fmt"
	"reflect"
	"sync"
	"sync/atomic"
	"unique"

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

// ref is a cached object as the cache holds it: the object itself, or in
// a compact cache its packed form. The zero ref is no object.
type ref[T Object] struct {
	obj T
	p   *packed
}

// packed is an object of a compact cache. It is never changed once made.
type packed struct {
	data []byte     // the encoding
	rv   string     // metadata.resourceVersion
	ns   string     // metadata.namespace, interned
	uid  string     // metadata.uid, if the cache keeps UIDs (Cache.uids)
	vals [][]string // the values of the eager indexes, in Cache.order
}

// resourceVersion returns the object's resourceVersion without decoding.
func (r ref[T]) resourceVersion() string {
	if r.p != nil {
		return r.p.rv
	}
	return r.obj.GetResourceVersion()
}

// namespace returns the object's namespace without decoding.
func (r ref[T]) namespace() string {
	if r.p != nil {
		return r.p.ns
	}
	return r.obj.GetNamespace()
}

// uid returns the object's UID without decoding (a compact cache keeps it
// only if uids is set).
func (r ref[T]) uid() string {
	if r.p != nil {
		return r.p.uid
	}
	return string(r.obj.GetUID())
}

// codec encodes and decodes a compact cache's objects; decode may run on
// many goroutines at once, and every object it returns is new and shares
// nothing mutable with any other.
type codec[T Object] struct {
	encode func(T) ([]byte, error)
	decode func([]byte) (T, error)
	meta   func([]byte) (persist.Meta, bool) // nil: the encoding's metadata cannot be read without decoding
	// failed counts objects that did not decode (bytes the cache encoded
	// itself: never, unless a type's encoding is not its decoding's).
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
	c.codec = &codec[T]{encode: pc.Encode, decode: pc.Decode, meta: pc.Meta}
	c.uids = uids
	return true
}

// Compact reports whether the cache holds objects as bytes
// (Options.Compact).
func (c *Cache[T]) Compact() bool { return c.codec != nil }

// pack readies obj for put or swap: packed in a compact cache, with its
// index values, else itself. A compact cache keeps raw if set (the bytes
// obj was decoded from, as it is), else encodes obj. The writer's alone;
// it holds wmu to read the indexes, which addIndexers may change.
func (c *Cache[T]) pack(obj T, raw []byte) (ref[T], error) {
	if c.codec == nil {
		return ref[T]{obj: obj}, nil
	}
	data := raw
	if data == nil {
		var err error
		if data, err = c.codec.encode(obj); err != nil {
			return ref[T]{}, err
		}
	}
	p := &packed{data: data, rv: obj.GetResourceVersion(), ns: unique.Make(obj.GetNamespace()).Value()}
	if c.uids {
		p.uid = string(obj.GetUID())
	}
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if len(c.order) > 0 {
		p.vals = make([][]string, len(c.order))
		for i, name := range c.order {
			p.vals[i] = c.indexers[name](obj)
		}
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
		obj, err := c.codec.decode(data)
		if err != nil {
			return ref[T]{}, err
		}
		return c.pack(obj, data)
	}
	p := &packed{data: data, rv: m.ResourceVersion, ns: unique.Make(m.Namespace).Value()}
	if c.uids {
		p.uid = m.UID
	}
	return ref[T]{p: p}, nil
}

// packEncoded packs the encoding of an object under key, as the state
// file holds it, without decoding it where it can: protobuf, keyed by
// MetaNamespaceKey, no index but the namespace one. Otherwise the object
// is decoded (and returned) to check its key and compute its index values.
func (c *Cache[T]) packEncoded(key string, data []byte) (r ref[T], obj T, err error) {
	if c.codec.meta != nil && c.defaultKey {
		if m, ok := c.codec.meta(data); ok {
			if got := metaKey(m.Namespace, m.Name); got != key {
				return r, obj, fmt.Errorf("it has key %q", got)
			}
			r, err = c.packMeta(data, m)
			return r, obj, err
		}
	}
	if obj, err = c.codec.decode(data); err != nil {
		return r, obj, err
	}
	if got := c.keyFunc(obj); got != key {
		return r, obj, fmt.Errorf("it has key %q", got)
	}
	if r, err = c.pack(obj, data); err != nil {
		return r, obj, err
	}
	return r, obj, nil
}

func metaKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}

// complete gives a packed object made before addIndexers the values of the
// indexes added since. Under wmu.
func (c *Cache[T]) complete(r ref[T]) ref[T] {
	if r.p == nil || len(r.p.vals) == len(c.order) {
		return r
	}
	obj, ok := c.load(r)
	if !ok {
		return r
	}
	p := *r.p
	p.vals = make([][]string, len(c.order))
	copy(p.vals, r.p.vals)
	for i := len(r.p.vals); i < len(c.order); i++ {
		p.vals[i] = c.indexers[c.order[i]](obj)
	}
	return ref[T]{p: &p}
}

// load returns r's object: the object itself, or decoded anew. false if a
// packed object does not decode (counted in codec.failed).
func (c *Cache[T]) load(r ref[T]) (T, bool) {
	if r.p == nil {
		return r.obj, true
	}
	obj, err := c.codec.decode(r.p.data)
	if err != nil {
		c.codec.failed.Add(1)
		var zero T
		return zero, false
	}
	return obj, true
}

// loadAll returns the objects of refs, decoded outside any lock.
func (c *Cache[T]) loadAll(refs []ref[T]) []T {
	out := make([]T, 0, len(refs))
	for _, r := range refs {
		if obj, ok := c.load(r); ok {
			out = append(out, obj)
		}
	}
	return out
}

// queued makes e, whose Object is obj's and Old old's (zero refs: none),
// an entry of a listener's queue: ready, or, if either is packed, to be
// decoded by the first handler's goroutine that takes it (lazyEvent).
func (c *Cache[T]) queued(e Event[T], obj, old ref[T], at int64) queued[T] {
	e.Object, e.Old = obj.obj, old.obj
	if obj.p == nil && old.p == nil {
		return queued[T]{e: e, at: at}
	}
	return queued[T]{e: e, at: at, lz: &lazyEvent[T]{c: c, obj: obj.p, old: old.p}}
}

// lazyEvent is an event whose objects are still packed. The listeners
// given the same event share one: the first to deliver it decodes, the
// others wait for that decode and get the same objects (as without
// Compact, an event's handlers share its objects).
type lazyEvent[T Object] struct {
	c        *Cache[T]
	obj, old *packed // nil: the event's own (or none)
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
			if z.dObj, err = z.c.codec.decode(z.obj.data); err != nil {
				z.err = err
				return
			}
		}
		switch {
		case z.old == nil:
		case z.old == z.obj:
			z.dOld = z.dObj // Resend: Old is the object
		default:
			if z.dOld, err = z.c.codec.decode(z.old.data); err != nil {
				z.err = err
			}
		}
	})
	if z.err != nil {
		z.c.codec.failed.Add(1)
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
