package store

import (
	"bytes"
	"runtime"
	"strconv"
	"weak"
)

// What a compact cache keeps beside some of its packed objects, by the
// packed object, weakly: an entry goes once the cache and its events no
// longer hold the packed object and the garbage collector has freed it.
// The objects decoded once and kept for the kept reads (Cache.GetKept),
// and the resourceVersions packed.rvn cannot hold.

// setOddRV keeps rv, p's resourceVersion, beside it.
func (k *packer[T]) setOddRV(p *packed, rv string) {
	w := weak.Make(p)
	k.oddRVs.Store(w, rv)
	runtime.AddCleanup(p, k.forgetRV, w)
}

func (k *packer[T]) forgetRV(w weak.Pointer[packed]) { k.oddRVs.Delete(w) }

// resourceVersion returns p's metadata.resourceVersion.
func (k *packer[T]) resourceVersion(p *packed) string {
	if n := p.rvn(); n != 0 {
		return strconv.FormatUint(n, 10)
	}
	rv, _ := k.oddRVs.Load(weak.Make(p))
	s, _ := rv.(string)
	return s
}

// isVersion reports whether r is at resourceVersion rv.
func (k *packer[T]) isVersion(r Ref[T], rv string) bool {
	switch {
	case r.p == nil:
		return plainHolding[T]{}.isVersion(r, rv)
	case r.p.rvn() != 0:
		return rvNumber(rv) == r.p.rvn()
	}
	return k.resourceVersion(r.p) == rv
}

// sameVersion reports whether a and b are at one resourceVersion.
func (k *packer[T]) sameVersion(a, b Ref[T]) bool {
	switch {
	case a.p == nil && b.p == nil:
		return plainHolding[T]{}.sameVersion(a, b)
	case a.p == nil:
		return k.isVersion(b, a.obj.GetResourceVersion())
	case b.p == nil:
		return k.isVersion(a, b.obj.GetResourceVersion())
	case a.p.rvn() != 0 || b.p.rvn() != 0:
		return a.p.rvn() == b.p.rvn()
	}
	return k.resourceVersion(a.p) == k.resourceVersion(b.p)
}

// same reports whether a and b, at one resourceVersion, hold one object:
// by uid if the cache keeps them, else by their bytes, decompressed (a
// fresh list's diff, after another history: rare, and each costs two
// decompressions). Bytes that do not decompress are not the same.
func (k *packer[T]) same(a, b Ref[T]) bool {
	if a.p == nil || b.p == nil {
		return a.p == nil && b.p == nil && plainHolding[T]{}.same(a, b)
	}
	if k.uids {
		return a.UID() == b.UID()
	}
	pa, err := k.plain(a.p)
	if err != nil {
		return false
	}
	pb, err := k.plain(b.p)
	return err == nil && bytes.Equal(pa, pb)
}

// copyPacked returns a copy of p to change before it is published: its
// kept object and resourceVersion go with it.
func (k *packer[T]) copyPacked(p *packed) *packed {
	c := *p
	if c.rvn() == 0 {
		k.setOddRV(&c, k.resourceVersion(p))
	}
	k.carry(p, &c)
	return &c
}

// keep returns the object r holds as the cache's own: the object kept for
// its packed object, or decoded now and kept. Two reads at once may both
// decode; the first to keep its object wins, and both return that one.
func (k *packer[T]) keep(r Ref[T]) (T, bool) {
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
