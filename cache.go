package kinformer

import (
	"fmt"
	"sync"
)

// IndexNamespace is the index every cache has: objects by namespace (""
// for cluster-scoped objects).
const IndexNamespace = "namespace"

// IndexFunc returns the values under which an object is indexed. An object
// may have none, one or several.
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
type Cache[T Object] struct {
	keyFunc  KeyFunc[T]
	indexers map[string]IndexFunc[T] // fixed at construction; read without lock

	mu      sync.RWMutex                 // guards items and indices
	items   map[string]T                 // key -> object
	indices map[string]map[string]keySet // index name -> value -> keys
}

// NewCache returns an empty cache. A nil keyFunc means MetaNamespaceKey.
// The namespace index (IndexNamespace) is always added.
func NewCache[T Object](keyFunc KeyFunc[T], indexers map[string]IndexFunc[T]) *Cache[T] {
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
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := c.indices[name][value]
	out := make([]T, 0, len(keys))
	for k := range keys {
		out = append(out, c.items[k])
	}
	return out, nil
}

// IndexKeys returns the keys filed under value in the named index.
func (c *Cache[T]) IndexKeys(name, value string) ([]string, error) {
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	keys := c.indices[name][value]
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	return out, nil
}

// put stores obj under key and returns the object it replaced.
func (c *Cache[T]) put(key string, obj T) (old T, existed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, existed = c.items[key]
	c.items[key] = obj
	for name, f := range c.indexers {
		var oldVals []string
		if existed {
			oldVals = f(old)
		}
		newVals := f(obj)
		if equalStrings(oldVals, newVals) {
			continue
		}
		unindex(c.indices[name], key, oldVals)
		index(c.indices[name], key, newVals)
	}
	return old, existed
}

// remove deletes key and returns the object that was there.
func (c *Cache[T]) remove(key string) (old T, existed bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	old, existed = c.items[key]
	if !existed {
		return old, false
	}
	delete(c.items, key)
	for name, f := range c.indexers {
		unindex(c.indices[name], key, f(old))
	}
	return old, true
}

// replace swaps in items as the whole content of the cache, atomically, and
// calls emit for every difference: Deleted for keys that vanished, Added for
// new keys, Modified for objects whose resourceVersion changed. Objects whose
// resourceVersion is unchanged keep the cached instance, so unchanged
// objects cost no event and their new copy can be collected. emit runs under
// the write lock and must not call back into the cache.
func (c *Cache[T]) replace(items map[string]T, emit func(typ EventType, obj, old T)) {
	indices := c.emptyIndices()
	for key, obj := range items {
		for name, f := range c.indexers {
			index(indices[name], key, f(obj))
		}
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, old := range c.items {
		if _, ok := items[key]; !ok {
			emit(Deleted, old, old)
		}
	}
	for key, obj := range items {
		old, existed := c.items[key]
		switch {
		case !existed:
			emit(Added, obj, obj)
		case old.GetResourceVersion() != obj.GetResourceVersion():
			emit(Modified, obj, old)
		default:
			items[key] = old
		}
	}
	c.items, c.indices = items, indices
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
