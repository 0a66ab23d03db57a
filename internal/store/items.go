package store

import (
	"iter"
	"maps"
)

// Items is a cache's content, or the content a list collects to become
// it: refs by key, each kept in the form its holding gives it. A cache of
// objects keeps the objects themselves, a compact cache the packed
// records, each in a map of its own, so that a map's slot is the key and
// one word (a record, or an object of a pointer type; two for an
// interface type, kinformer.Object's) and not a Ref's two or three: at
// 50,000 objects, 19 bytes an object against 36 (issue 43's bookkeeping).
// The zero Items is empty, and ready for Set.
//
// A compact cache holds only packed records; an object held as itself
// (none is, today) would still be kept, in the objects' map.
type Items[T Object] struct {
	objs  map[string]T
	packs map[string]*packed
}

// NewItems returns an empty Items of the form the cache holds its
// objects in, with room for n.
func (c *Cache[T]) NewItems(n int) *Items[T] {
	m := &Items[T]{}
	if c.straight {
		m.objs = make(map[string]T, n)
	} else {
		m.packs = make(map[string]*packed, n)
	}
	return m
}

// Get returns the ref under key.
func (m *Items[T]) Get(key string) (Ref[T], bool) {
	if m.packs != nil {
		if p, ok := m.packs[key]; ok {
			return Ref[T]{p: p}, true
		}
		if m.objs == nil {
			return Ref[T]{}, false
		}
	}
	obj, ok := m.objs[key]
	return Ref[T]{obj: obj}, ok
}

// Has reports whether there is a ref under key.
func (m *Items[T]) Has(key string) bool {
	_, ok := m.Get(key)
	return ok
}

// Set puts r under key.
func (m *Items[T]) Set(key string, r Ref[T]) {
	if r.p != nil {
		if m.packs == nil {
			m.packs = map[string]*packed{}
		}
		m.packs[key] = r.p
		if m.objs != nil {
			delete(m.objs, key)
		}
		return
	}
	if m.objs == nil {
		m.objs = map[string]T{}
	}
	m.objs[key] = r.obj
	if m.packs != nil {
		delete(m.packs, key)
	}
}

// Delete removes key.
func (m *Items[T]) Delete(key string) {
	delete(m.packs, key)
	delete(m.objs, key)
}

// Len is the number of refs.
func (m *Items[T]) Len() int { return len(m.objs) + len(m.packs) }

// All yields every key and its ref, in no particular order.
func (m *Items[T]) All() iter.Seq2[string, Ref[T]] {
	return func(yield func(string, Ref[T]) bool) {
		for key, p := range m.packs {
			if !yield(key, Ref[T]{p: p}) {
				return
			}
		}
		for key, obj := range m.objs {
			if !yield(key, Ref[T]{obj: obj}) {
				return
			}
		}
	}
}

// Keys yields every key.
func (m *Items[T]) Keys() iter.Seq[string] {
	return func(yield func(string) bool) {
		for key := range m.packs {
			if !yield(key) {
				return
			}
		}
		for key := range m.objs {
			if !yield(key) {
				return
			}
		}
	}
}

// clone returns a copy of m (the refs themselves shared).
func (m *Items[T]) clone() *Items[T] {
	return &Items[T]{objs: maps.Clone(m.objs), packs: maps.Clone(m.packs)}
}
