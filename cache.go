package kinformer

import (
	"fmt"
	"sync"
)

// IndexNamespace is the index every cache has: objects by namespace (""
// for cluster-scoped objects).
const IndexNamespace = "namespace"

// IndexFunc returns the values under which an object is indexed. An object
// may have none, one or several. The values must depend only on the object:
// it is called again with the object's old state to take it out of the
// index. It runs outside the cache's lock, so it may read the cache (to log,
// or to count), but what it returns must not depend on what it reads.
type IndexFunc[T Object] func(obj T) []string

func namespaceIndex[T Object](obj T) []string { return []string{obj.GetNamespace()} }

// keySet is the set of cache keys filed under one index value.
type keySet map[string]struct{}

// Cache is a thread-safe, indexed store of objects, kept in sync with the
// API server by an Informer. All reads are snapshots taken under a read
// lock; a re-list replaces the whole content at once, so a reader sees
// either the state before it or after it, never a mix.
//
// The objects returned are shared with the informer, its handlers and other
// readers: treat them as read-only. Copy (DeepCopy) before modifying.
//
// Only the informer's loop writes (through its writer, writer.go), so it
// reads items without the lock and computes index values, calling
// KeyFunc and IndexFuncs, before taking it: an IndexFunc may itself read the
// cache, and readers wait only for the map updates themselves.
type Cache[T Object] struct {
	keyFunc  KeyFunc[T]
	indexers map[string]IndexFunc[T] // replaced under mu only before the informer starts; the writer reads it without lock

	mu      sync.RWMutex                 // guards items and indices; held for writing only by the writer
	items   map[string]T                 // key -> object
	indices map[string]map[string]keySet // index name -> value -> keys
}

// newCache returns an empty cache. A nil keyFunc means MetaNamespaceKey.
// The namespace index (IndexNamespace) is always added.
func newCache[T Object](keyFunc KeyFunc[T], indexers map[string]IndexFunc[T]) *Cache[T] {
	if keyFunc == nil {
		keyFunc = MetaNamespaceKey[T]
	}
	idx := make(map[string]IndexFunc[T], len(indexers)+1)
	for name, f := range indexers {
		idx[name] = f
	}
	if _, ok := idx[IndexNamespace]; !ok {
		idx[IndexNamespace] = namespaceIndex[T]
	}
	c := &Cache[T]{keyFunc: keyFunc, indexers: idx, items: map[string]T{}}
	c.indices = c.emptyIndices()
	return c
}

// addIndexers adds indexes to an empty cache that no reader has yet; the
// informer calls it only before its first run.
func (c *Cache[T]) addIndexers(indexers map[string]IndexFunc[T]) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	for name := range indexers {
		if _, ok := c.indexers[name]; ok {
			return fmt.Errorf("kinformer: index %q already exists", name)
		}
	}
	idx := make(map[string]IndexFunc[T], len(c.indexers)+len(indexers))
	for name, f := range c.indexers {
		idx[name] = f
	}
	for name, f := range indexers {
		idx[name] = f
		c.indices[name] = map[string]keySet{}
		for key, obj := range c.items {
			index(c.indices[name], key, f(obj))
		}
	}
	c.indexers = idx
	return nil
}

func (c *Cache[T]) emptyIndices() map[string]map[string]keySet {
	m := make(map[string]map[string]keySet, len(c.indexers))
	for name := range c.indexers {
		m[name] = map[string]keySet{}
	}
	return m
}

// Key returns the key the cache files obj under.
func (c *Cache[T]) Key(obj T) string { return c.keyFunc(obj) }

// Get returns the cached object with the same key as obj.
func (c *Cache[T]) Get(obj T) (T, bool) { return c.GetByKey(c.keyFunc(obj)) }

// GetByKey returns the cached object under key.
func (c *Cache[T]) GetByKey(key string) (T, bool) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	obj, ok := c.items[key]
	return obj, ok
}

// List returns a snapshot of all cached objects, in no particular order.
func (c *Cache[T]) List() []T {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]T, 0, len(c.items))
	for _, obj := range c.items {
		out = append(out, obj)
	}
	return out
}

// ListKeys returns a snapshot of all cache keys, in no particular order.
func (c *Cache[T]) ListKeys() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.items))
	for k := range c.items {
		out = append(out, k)
	}
	return out
}

// Len returns the number of cached objects.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}

// ByIndex returns the objects filed under value in the named index. It
// returns ErrUnknownIndex if no such index was configured.
func (c *Cache[T]) ByIndex(name, value string) ([]T, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	out := make([]T, 0, len(keys))
	for k := range keys {
		if obj, ok := c.items[k]; ok { // an IndexFunc that is not a pure function of its object can leave a key behind
			out = append(out, obj)
		}
	}
	return out, nil
}

// IndexKeys returns the keys filed under value in the named index.
func (c *Cache[T]) IndexKeys(name, value string) ([]string, error) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	return out, nil
}

// indexChange is how one index's values for a key change with a write.
type indexChange struct {
	name     string
	old, new []string
}

// changes computes, without the lock, how the indexes change when old
// (if existed) becomes obj (if present). Writer only.
func (c *Cache[T]) changes(old T, existed bool, obj T, present bool) []indexChange {
	var out []indexChange
	for name, f := range c.indexers {
		var oldVals, newVals []string
		if existed {
			oldVals = f(old)
		}
		if present {
			newVals = f(obj)
		}
		if !equalStrings(oldVals, newVals) {
			out = append(out, indexChange{name, oldVals, newVals})
		}
	}
	return out
}

func (c *Cache[T]) reindex(key string, changes []indexChange) {
	for _, ch := range changes {
		unindex(c.indices[ch.name], key, ch.old)
		index(c.indices[ch.name], key, ch.new)
	}
}

// put stores obj under key and returns the object it replaced. Writer only.
func (c *Cache[T]) put(key string, obj T) (old T, existed bool) {
	old, existed = c.items[key] // the writer's own map: no lock to read
	changes := c.changes(old, existed, obj, true)
	c.mu.Lock()
	c.items[key] = obj
	c.reindex(key, changes)
	c.mu.Unlock()
	return old, existed
}

// remove deletes key and returns the object that was there. Writer only.
func (c *Cache[T]) remove(key string) (old T, existed bool) {
	old, existed = c.items[key]
	if !existed {
		return old, false
	}
	changes := c.changes(old, true, old, false)
	c.mu.Lock()
	delete(c.items, key)
	c.reindex(key, changes)
	c.mu.Unlock()
	return old, true
}

// swap makes items the whole content of the cache, atomically, and
// returns the content it replaced. The indexes are built before the lock
// is taken. Writer only.
func (c *Cache[T]) swap(items map[string]T) (old map[string]T) {
	indices := c.emptyIndices()
	for key, obj := range items {
		for name, f := range c.indexers {
			index(indices[name], key, f(obj))
		}
	}
	c.mu.Lock()
	old = c.items
	c.items, c.indices = items, indices
	c.mu.Unlock()
	return old
}

func index(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		set := idx[v]
		if set == nil {
			set = keySet{}
			idx[v] = set
		}
		set[key] = struct{}{}
	}
}

func unindex(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		set := idx[v]
		delete(set, key)
		if len(set) == 0 {
			delete(idx, v)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
