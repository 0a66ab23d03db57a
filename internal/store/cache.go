// Package store is an informer's storage engine: the objects it caches,
// their indexes, and how each is held (as itself, or in a compact cache
// as its bytes). The root package's Cache is a thin wrapper over the
// Cache here that shows only its reads; the informer's writer, its loop
// and its dispatcher use the rest.
//
// It knows nothing of events, listeners or the watch: what it is given
// is an Arrival (an object as the decoder hands it over), and what it
// gives back is a Ref (an object as the cache holds it), which the rest
// of the informer passes around without looking inside.
package store

import (
	"errors"
	"slices"
	"sync"
	"sync/atomic"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
)

// Object is what a cache holds: any Kubernetes object with metadata. It
// has the method set of kinformer.Object, so that any type an informer
// caches fits.
type Object interface {
	runtime.Object
	metav1.Object
}

// IndexNamespace is the index every cache has: objects by namespace (""
// for cluster-scoped objects).
const IndexNamespace = "namespace"

// ErrUnknownIndex is returned by the reads of an index that does not
// exist (kinformer.ErrUnknownIndex is this error).
var ErrUnknownIndex = errors.New("unknown index")

func namespaceIndex[T Object](obj T) []string { return []string{obj.GetNamespace()} }

// Cache is a thread-safe, indexed store of objects. All reads are
// snapshots taken under a read lock; a swap replaces the whole content
// at once, so a reader sees either the state before it or after it,
// never a mix. The objects returned are shared: treat them as read-only.
//
// Only the informer's loop writes (through its writer), so it reads
// items without the lock and computes index values, calling the key
// func and the index funcs, before taking it: an index func may itself
// read the cache, and readers wait only for the map updates themselves.
// The methods documented "writer only" are for that one writer.
//
// The built-in namespace index is built only when a query needs it: an
// entry per object is about 40 bytes, a tenth of what kinformer adds to a
// ConfigMap, and many informers never ask for a namespace, or watch only
// one. Until then the cache counts the objects of each namespace; while
// they are all in one, a namespace query reads items. The first query that
// needs the index builds it, under the write lock, and from then on it is
// kept up to date as any other.
//
// How it holds an object is its holding's business (holding.go): the
// objects themselves, or in a compact cache (SetCompact, compact.go)
// each object's encoding, with its resourceVersion, namespace and index
// values beside it, decoded on every read outside the lock, so that what
// a reader gets is its own.
type Cache[T Object] struct {
	keyFunc    func(T) string
	defaultKey bool                        // keyFunc is MetaNamespaceKey: an object's key is its namespace and name
	indexers   map[string]func(T) []string // replaced (never changed in place) under wmu and mu; the writer reads it under wmu alone
	lazyNS     bool                        // IndexNamespace is the built-in one, built on demand; set once by New
	// order names the eager indexes in the order a holding that keeps
	// index values keeps them (holding.values); it only grows, with
	// indexers.
	order []string
	// h is how the cache holds its objects (holding.go): the only code
	// that knows what a ref holds. Set once, before the informer starts
	// (setHolding), with straight, h.straight(): read on every read, it
	// costs no call.
	h        holding[T]
	straight bool

	// wmu serialises the writer's changes with AddIndexers: each write
	// holds it from reading the old object to the map update, so that an
	// index added meanwhile is built from the items as they are between
	// two writes, never from one whose index values were computed for the
	// old set of indexes. The writer is the only other user, so it is not
	// contended in the steady state.
	wmu sync.Mutex

	mu sync.RWMutex // guards items, indices and nsCount; held for writing by the writer, and by a reader building the namespace index
	// items is the content, key -> object: replaced (Swap, AddIndexers),
	// never changed in place but by the writer, which also reads it
	// without the lock (Peek); readers read it under mu.
	items   atomic.Pointer[Items[T]]
	indices map[string]map[string]keySet // index name -> value -> keys; IndexNamespace only once built if lazyNS
	nsCount map[string]int               // namespace -> objects, if lazyNS
	nsBuilt atomic.Bool                  // the lazy namespace index is in indices (set under mu; read by the writer without it)
}

// keySet is the set of cache keys filed under one index value: a slice
// while it has few (maxFew), as most values of most indexes have (one
// object's name, the Pods of one ReplicaSet or one node), a map once it
// has more. A small Go map is a group of eight slots and its header,
// about 190 bytes for a value that files one key; the slice is 16 bytes a
// key. nil is the empty set.
type keySet = *keys

type keys struct {
	few  []string
	many map[string]struct{} // once more than maxFew were filed at once; nil until then
}

// New returns an empty cache of objects (SetCompact makes it compact),
// filing each under keyFunc's key (nil: MetaNamespaceKey) and indexing
// it with indexers, each of which returns the values an object is filed
// under in its index: values that depend only on the object, as it is
// called again with the object's old state to take it out. The namespace
// index (IndexNamespace) is always added, unless indexers has one.
func New[T Object](keyFunc func(T) string, indexers map[string]func(T) []string) *Cache[T] {
	c := &Cache[T]{keyFunc: keyFunc, defaultKey: keyFunc == nil}
	c.setHolding(plainHolding[T]{})
	if c.defaultKey {
		c.keyFunc = MetaNamespaceKey[T]
	}
	idx := make(map[string]func(T) []string, len(indexers)+1)
	for name, f := range indexers {
		idx[name] = f
	}
	if _, ok := idx[IndexNamespace]; !ok {
		idx[IndexNamespace] = namespaceIndex[T]
		c.lazyNS, c.nsCount = true, map[string]int{}
	}
	c.indexers = idx
	for name := range idx {
		if c.eager(name) {
			c.order = append(c.order, name)
		}
	}
	slices.Sort(c.order)
	c.indices = c.emptyIndices()
	return c
}

// content returns the cache's content (items).
func (c *Cache[T]) content() *Items[T] { return c.items.Load() }

// setHolding makes h how the cache holds its objects: before any is put.
func (c *Cache[T]) setHolding(h holding[T]) {
	c.h, c.straight = h, h.straight()
	c.items.Store(c.NewItems(0))
}

// MetaNamespaceKey is the default key: "namespace/name", or just "name"
// for cluster-scoped objects (kinformer.MetaNamespaceKey).
func MetaNamespaceKey[T Object](obj T) string {
	return metaKey(obj.GetNamespace(), obj.GetName())
}

// metaKey is MetaNamespaceKey of a namespace and name.
func metaKey(namespace, name string) string {
	if namespace == "" {
		return name
	}
	return namespace + "/" + name
}
