package kinformer

import (
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kinformer/kinformer/internal/store"
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

// Cache is a thread-safe, indexed store of objects, kept in sync with the
// API server by an Informer. All reads are snapshots taken under a read
// lock; a re-list replaces the whole content at once, so a reader sees
// either the state before it or after it, never a mix.
//
// The objects returned are shared with the informer, its handlers and other
// readers: treat them as read-only. Copy (DeepCopy) before modifying.
//
// The built-in namespace index is built only when a query needs it: until
// then a namespace query reads the objects of the one namespace they are
// all in, and the first that needs the index builds it.
//
// A Cache shows the reads of the informer's storage engine
// (internal/store), which its writer alone changes; in a compact cache
// (Options.Compact) each object is held as its encoding and decoded on
// every read, so that what a reader gets is its own.
type Cache[T Object] struct {
	s *store.Cache[T]
}

// newCache returns an empty cache. A nil keyFunc means MetaNamespaceKey.
// The namespace index (IndexNamespace) is always added.
func newCache[T Object](keyFunc KeyFunc[T], indexers map[string]IndexFunc[T]) *Cache[T] {
	return &Cache[T]{s: store.New(keyFunc, indexFuncs(indexers))}
}

// indexFuncs is indexers as the store takes them.
func indexFuncs[T Object](indexers map[string]IndexFunc[T]) map[string]func(T) []string {
	out := make(map[string]func(T) []string, len(indexers))
	for name, f := range indexers {
		out[name] = f
	}
	return out
}

// Indexers returns the cache's index functions by name, IndexNamespace
// included. The map is the caller's.
func (c *Cache[T]) Indexers() map[string]IndexFunc[T] {
	fs := c.s.Indexers()
	out := make(map[string]IndexFunc[T], len(fs))
	for name, f := range fs {
		out[name] = f
	}
	return out
}

// IndexValues returns the values the named index files objects under
// (client-go's ListIndexFuncValues), in no particular order. It returns
// ErrUnknownIndex if no such index exists.
func (c *Cache[T]) IndexValues(name string) ([]string, error) { return c.s.IndexValues(name) }

// Key returns the key the cache files obj under.
func (c *Cache[T]) Key(obj T) string { return c.s.Key(obj) }

// Get returns the cached object with the same key as obj.
func (c *Cache[T]) Get(obj T) (T, bool) { return c.s.Get(obj) }

// GetByKey returns the cached object under key.
func (c *Cache[T]) GetByKey(key string) (T, bool) { return c.s.GetByKey(key) }

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
func (c *Cache[T]) GetKept(key string) (T, bool) { return c.s.GetKept(key) }

// ListKept is List with every object the cache's own, as GetKept
// returns it.
func (c *Cache[T]) ListKept() []T { return c.s.ListKept() }

// ByIndexKept is ByIndex with every object the cache's own, as GetKept
// returns it.
func (c *Cache[T]) ByIndexKept(name, value string) ([]T, error) { return c.s.ByIndexKept(name, value) }

// Select returns the cached objects in namespace ("" for every namespace)
// whose labels match sel (nil matches everything): client-go's
// lister.List(selector) and lister.Pods(ns).List(selector) in one.
func (c *Cache[T]) Select(namespace string, sel labels.Selector) []T {
	return c.s.Select(namespace, sel)
}

// GetNamespaced returns the cached object with this namespace and name
// ("" namespace for a cluster-scoped object), whatever the KeyFunc.
func (c *Cache[T]) GetNamespaced(namespace, name string) (T, bool) {
	return c.s.GetNamespaced(namespace, name)
}

// List returns a snapshot of all cached objects, in no particular order.
func (c *Cache[T]) List() []T { return c.s.List() }

// ListKeys returns a snapshot of all cache keys, in no particular order.
func (c *Cache[T]) ListKeys() []string { return c.s.ListKeys() }

// Len returns the number of cached objects.
func (c *Cache[T]) Len() int { return c.s.Len() }

// ByIndex returns the objects filed under value in the named index. It
// returns ErrUnknownIndex if no such index was configured.
func (c *Cache[T]) ByIndex(name, value string) ([]T, error) { return c.s.ByIndex(name, value) }

// IndexKeys returns the keys filed under value in the named index.
func (c *Cache[T]) IndexKeys(name, value string) ([]string, error) {
	return c.s.IndexKeys(name, value)
}

// Compact reports whether the cache holds objects as bytes
// (Options.Compact).
func (c *Cache[T]) Compact() bool { return c.s.Compact() }
