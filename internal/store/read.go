package store

import (
	"fmt"

	"k8s.io/apimachinery/pkg/labels"
)

// The cache's reads: the root's Cache shows each of them, one line each.
// Every read that returns objects goes through results (below).

// Indexers returns the cache's index functions by name, IndexNamespace
// included. The map is the caller's.
func (c *Cache[T]) Indexers() map[string]func(T) []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]func(T) []string, len(c.indexers))
	for name, f := range c.indexers {
		out[name] = f
	}
	return out
}

// IndexValues returns the values the named index files objects under
// (client-go's ListIndexFuncValues), in no particular order. It returns
// ErrUnknownIndex if no such index exists.
func (c *Cache[T]) IndexValues(name string) ([]string, error) {
	if !c.eager(name) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		out := make([]string, 0, len(c.nsCount))
		for ns := range c.nsCount {
			out = append(out, ns)
		}
		return out, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	out := make([]string, 0, len(c.indices[name]))
	for v := range c.indices[name] {
		out = append(out, v)
	}
	return out, nil
}

// Key returns the key the cache files obj under.
func (c *Cache[T]) Key(obj T) string { return c.keyFunc(obj) }

// Get returns the cached object with the same key as obj.
func (c *Cache[T]) Get(obj T) (T, bool) { return c.GetByKey(c.keyFunc(obj)) }

// GetByKey returns the cached object under key.
func (c *Cache[T]) GetByKey(key string) (T, bool) {
	r, ok := c.item(key)
	if !ok {
		var zero T
		return zero, false
	}
	return c.Load(r)
}

// item returns the ref under key, read under the read lock.
func (c *Cache[T]) item(key string) (Ref[T], bool) {
	c.mu.RLock()
	r, ok := c.content().Get(key)
	c.mu.RUnlock()
	return r, ok
}

// GetKept returns the cached object under key as the cache's own: in a
// compact cache (Options.Compact), decoded by the first kept read of this
// version of the object and kept, so that every kept read returns the
// same object until the object changes, as a cache of objects does (and
// a change made to it is seen by the next kept read, not by the other
// reads, which decode the bytes). The object is shared: treat it as
// read-only. It is held beside the bytes while that version is cached,
// so a compact cache read this way holds both. In a cache of objects
// GetKept is GetByKey. For adapters that promise their callers the
// cache's object (controller-runtime's UnsafeDisableDeepCopy).
func (c *Cache[T]) GetKept(key string) (T, bool) {
	r, ok := c.item(key)
	if !ok {
		var zero T
		return zero, false
	}
	if obj, ok := r.ready(); ok {
		return obj, true
	}
	return c.h.keep(r)
}

// ListKept is List with every object the cache's own, as GetKept
// returns it.
func (c *Cache[T]) ListKept() []T {
	c.mu.RLock()
	res := c.results(c.content().Len(), nil)
	res.kept = true
	res.addAll()
	c.mu.RUnlock()
	return res.done()
}

// ByIndexKept is ByIndex with every object the cache's own, as GetKept
// returns it.
func (c *Cache[T]) ByIndexKept(name, value string) ([]T, error) {
	return c.byIndex(name, value, true)
}

// Select returns the cached objects in namespace ("" for every namespace)
// whose labels match sel (nil matches everything): client-go's
// lister.List(selector) and lister.Pods(ns).List(selector) in one.
func (c *Cache[T]) Select(namespace string, sel labels.Selector) []T {
	var keep func(T) bool
	if sel != nil && !sel.Empty() {
		keep = func(obj T) bool { return sel.Matches(labels.Set(obj.GetLabels())) }
	}
	if namespace == "" {
		c.mu.RLock()
		res := c.results(c.content().Len(), keep)
		res.addAll()
		c.mu.RUnlock()
		return res.done()
	}
	c.rlockNamespace()
	res := c.results(0, keep)
	res.addNamespace(namespace)
	c.mu.RUnlock()
	return res.done()
}

// GetNamespaced returns the cached object with this namespace and name
// ("" namespace for a cluster-scoped object), whatever the KeyFunc.
func (c *Cache[T]) GetNamespaced(namespace, name string) (T, bool) {
	var zero T
	is := func(obj T) bool { return obj.GetName() == name && obj.GetNamespace() == namespace }
	if obj, ok := c.GetByKey(metaKey(namespace, name)); ok && is(obj) {
		return obj, true
	}
	if c.defaultKey {
		return zero, false // that key or none
	}
	// Another KeyFunc: the namespace's objects with that name.
	c.rlockNamespace()
	res := c.results(0, is)
	res.addNamespace(namespace)
	c.mu.RUnlock()
	if found := res.done(); len(found) > 0 {
		return found[0], true
	}
	return zero, false
}

// List returns a snapshot of all cached objects, in no particular order.
func (c *Cache[T]) List() []T {
	c.mu.RLock()
	res := c.results(c.content().Len(), nil)
	res.addAll()
	c.mu.RUnlock()
	return res.done()
}

// ListKeys returns a snapshot of all cache keys, in no particular order.
func (c *Cache[T]) ListKeys() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, c.content().Len())
	for k := range c.content().Keys() {
		out = append(out, k)
	}
	return out
}

// Len returns the number of cached objects.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return c.content().Len()
}

// HeldBytes is the bytes of the encodings a compact cache holds; 0 for a
// cache of objects.
func (c *Cache[T]) HeldBytes() int64 {
	c.mu.RLock()
	defer c.mu.RUnlock()
	var n int64
	for _, r := range c.content().All() {
		n += int64(c.h.size(r))
	}
	return n
}

// ByIndex returns the objects filed under value in the named index. It
// returns ErrUnknownIndex if no such index was configured.
func (c *Cache[T]) ByIndex(name, value string) ([]T, error) {
	return c.byIndex(name, value, false)
}

// byIndex is ByIndex, and ByIndexKept if kept.
func (c *Cache[T]) byIndex(name, value string, kept bool) ([]T, error) {
	if !c.eager(name) {
		c.rlockNamespace()
		res := c.results(c.nsCount[value], nil)
		res.kept = kept
		res.addNamespace(value)
		c.mu.RUnlock()
		return res.done(), nil
	}
	c.mu.RLock()
	if _, ok := c.indexers[name]; !ok {
		c.mu.RUnlock()
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	res := c.results(keys.len(), nil)
	res.kept = kept
	res.addKeys(keys)
	c.mu.RUnlock()
	return res.done(), nil
}

// IndexKeys returns the keys filed under value in the named index.
func (c *Cache[T]) IndexKeys(name, value string) ([]string, error) {
	if !c.eager(name) {
		c.rlockNamespace()
		defer c.mu.RUnlock()
		out := make([]string, 0, c.nsCount[value])
		keys, all := c.namespaceKeys(value)
		keys.each(func(k string) {
			if c.content().Has(k) {
				out = append(out, k)
			}
		})
		if all {
			for k := range c.content().Keys() {
				out = append(out, k)
			}
		}
		return out, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	out := make([]string, 0, keys.len())
	keys.each(func(k string) { out = append(out, k) })
	return out, nil
}

// results collects the objects of one read. Under the cache's read lock,
// add takes each candidate; after the lock, done returns them. An object
// held ready goes straight into the result; one that must be decoded
// (compact.go) is kept as it is and decoded by done, outside the lock, so
// that readers never hold up the writer to decode. keep, if set, filters
// the objects.
//
// Every read that returns objects goes through one: written once, for
// however the cache holds them.
type results[T Object] struct {
	c    *Cache[T]
	keep func(T) bool
	out  []T
	// later are the candidates done decodes; straight: the holding holds
	// objects ready and nothing filters them.
	later    []Ref[T]
	straight bool
	// kept: done returns the objects as the cache's own (holding.keep).
	kept bool
}

// results starts a read of about n objects (a capacity; 0 if unknown).
func (c *Cache[T]) results(n int, keep func(T) bool) *results[T] {
	g := &results[T]{c: c, keep: keep}
	switch {
	case !c.straight:
		g.later = make([]Ref[T], 0, n)
	case keep == nil:
		g.out = make([]T, 0, n)
		g.straight = true
	}
	return g
}

// add takes one candidate (under the read lock).
func (g *results[T]) add(r Ref[T]) {
	obj, ok := r.ready()
	switch {
	case !ok:
		g.later = append(g.later, r)
	case g.keep == nil || g.keep(obj):
		g.out = append(g.out, obj)
	}
}

// addAll takes every cached object (under the read lock).
func (g *results[T]) addAll() {
	// Every candidate goes straight into the answer: the loop appends
	// without a call per object, which is most of a plain read's time.
	if g.straight {
		// A holding that reads straight holds objects: every ref is in
		// items' objects, none in its packed records.
		out := g.out // a local the loop keeps in registers
		for _, obj := range g.c.content().objs {
			out = append(out, obj)
		}
		g.out = out
		return
	}
	for _, r := range g.c.content().All() {
		g.add(r)
	}
}

// addKeys takes the objects under keys (under the read lock). An
// IndexFunc that is not a pure function of its object can leave a key
// behind: it is skipped.
func (g *results[T]) addKeys(keys keySet) {
	switch {
	case keys == nil:
	case g.straight:
		out := g.out // a local the loop keeps in registers
		objs := g.c.content().objs
		if keys.many != nil {
			for k := range keys.many {
				if obj, ok := objs[k]; ok {
					out = append(out, obj)
				}
			}
		} else {
			for _, k := range keys.few {
				if obj, ok := objs[k]; ok {
					out = append(out, obj)
				}
			}
		}
		g.out = out
	default:
		keys.each(func(k string) {
			if r, ok := g.c.content().Get(k); ok {
				g.add(r)
			}
		})
	}
}

// addNamespace takes the objects of namespace ns (under rlockNamespace).
func (g *results[T]) addNamespace(ns string) {
	if keys, all := g.c.namespaceKeys(ns); all {
		g.addAll()
	} else {
		g.addKeys(keys)
	}
}

// done returns the objects, decoding those that must be (after the
// lock). Without keep the result is never nil, however the cache holds
// objects.
func (g *results[T]) done() []T {
	if g.out == nil && g.keep == nil {
		g.out = make([]T, 0, len(g.later))
	}
	for _, r := range g.later {
		var obj T
		var ok bool
		if g.kept {
			obj, ok = g.c.h.keep(r)
		} else {
			obj, ok = g.c.h.load(r)
		}
		if ok && (g.keep == nil || g.keep(obj)) {
			g.out = append(g.out, obj)
		}
	}
	return g.out
}
