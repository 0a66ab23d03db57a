package store

import "github.com/kinformer/kinformer/internal/squash"

// What a compact cache shows of its insides, read only: for the
// informer's tests, which run it end to end and check how it holds its
// objects. A cache of objects has none of these (zero answers).

// Dict returns the dictionary a compact cache compresses its objects
// against now: nil before it is made, if the objects are too few or too
// small to make one, without compression (SetCompact's squeeze), or in a
// cache of objects.
func (c *Cache[T]) Dict() *squash.Dict {
	if k, ok := c.h.(*packer[T]); ok {
		return k.dict.Load()
	}
	return nil
}

// DictsRemade returns how many times a compact cache made its dictionary
// again (a re-list found its objects no longer fit the old one).
func (c *Cache[T]) DictsRemade() int64 {
	if k, ok := c.h.(*packer[T]); ok {
		return k.remade.Load()
	}
	return 0
}

// DecodeFailures returns how many reads and events of a compact cache
// found bytes that did not decode.
func (c *Cache[T]) DecodeFailures() int64 {
	if k, ok := c.h.(*packer[T]); ok {
		return k.failed.Load()
	}
	return 0
}

// Encodes returns how many objects a compact cache encoded itself
// because they came without their bytes: none from a protobuf stream
// without a Transform, which hands the cache the bytes as they came.
func (c *Cache[T]) Encodes() int64 {
	if k, ok := c.h.(*packer[T]); ok {
		return k.encoded.Load()
	}
	return 0
}

// PoolsBuffers reports whether a compact cache's reads decompress into
// pooled buffers (its decoder copies what it keeps).
func (c *Cache[T]) PoolsBuffers() bool {
	k, ok := c.h.(*packer[T])
	return ok && k.bufs != nil
}

// KeptObjects returns how many objects a compact cache keeps decoded for
// the kept reads (GetKept): one for each packed object a kept read
// decoded, until the garbage collector has freed that packed object and
// its cleanup has let the kept object go.
func (c *Cache[T]) KeptObjects() int {
	k, ok := c.h.(*packer[T])
	if !ok {
		return 0
	}
	n := 0
	k.kept.Range(func(any, any) bool { n++; return true })
	return n
}

// Entry returns the bytes a compact cache holds for r's object: its
// squash entry (compressed against the dictionary, or its encoding
// wrapped as it came), or without compression its encoding; nil for an
// object held as itself. They are the cache's own: not to be changed.
func (r Ref[T]) Entry() []byte {
	if r.p == nil {
		return nil
	}
	return r.p.data()
}

// Plain returns the encoding of r's object as the cache was given it:
// its entry decompressed, against the dictionary it was compressed
// against; nil for an object held as itself. An error if the entry does
// not decompress.
func (c *Cache[T]) Plain(r Ref[T]) ([]byte, error) {
	k, ok := c.h.(*packer[T])
	if !ok || r.p == nil {
		return nil, nil
	}
	return k.plain(r.p)
}
