package clientgo

import (
	"errors"
	"fmt"
	"reflect"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kinformer/kinformer"
)

// errReadOnly is returned by the Indexer's writes: only the informer
// writes its cache.
var errReadOnly = errors.New("clientgo: the informer's cache is read-only: only the informer writes it")

// indexer is a kinformer Cache as a client-go cache.Indexer, as
// client-go's listers read it.
type indexer[T kinformer.Object] struct {
	c *kinformer.Cache[T]
	s *informer[T]
	// given holds the client-go functions of the indexes added through
	// AddIndexers, by name: Index calls them, as client-go does, with
	// objects of any type.
	given sync.Map // string -> cache.IndexFunc
}

func (x *indexer[T]) Add(any) error               { return errReadOnly }
func (x *indexer[T]) Update(any) error            { return errReadOnly }
func (x *indexer[T]) Delete(any) error            { return errReadOnly }
func (x *indexer[T]) Replace([]any, string) error { return errReadOnly }
func (x *indexer[T]) Resync() error               { return nil } // client-go's informer store does nothing either
func (x *indexer[T]) ListKeys() []string          { return x.c.ListKeys() }
func (x *indexer[T]) Bookmark(string)             {} // the informer keeps its own resourceVersion

// mode is the informer's Mode.
func (x *indexer[T]) mode() string { return x.s.mode() }

// LastStoreSyncResourceVersion is the resourceVersion the cache reflects.
func (x *indexer[T]) LastStoreSyncResourceVersion() string { return x.s.inf.ResourceVersion() }

func (x *indexer[T]) GetByKey(key string) (any, bool, error) {
	obj, ok := x.c.GetByKey(key)
	if !ok {
		return nil, false, nil
	}
	return obj, true, nil
}

func (x *indexer[T]) List() []any { return toAny(x.c.List()) }

// Get returns the cached object with obj's key. obj may be of any type
// with metadata (client-go's key is namespace/name); with a KeyFunc of
// its own, the cache keys only its own type.
func (x *indexer[T]) Get(obj any) (any, bool, error) {
	if t, ok := obj.(T); ok {
		return x.GetByKey(x.c.Key(t))
	}
	key, err := cache.DeletionHandlingMetaNamespaceKeyFunc(obj)
	if err != nil {
		return nil, false, err
	}
	return x.GetByKey(key)
}

// Index returns the objects that share an index value with obj. For the
// namespace index obj may be any object with metadata: client-go's listers
// ask with a bare ObjectMeta.
func (x *indexer[T]) Index(indexName string, obj any) ([]any, error) {
	values, err := x.values(indexName, obj)
	if err != nil {
		return nil, err
	}
	if len(values) == 1 {
		items, err := x.c.ByIndex(indexName, values[0])
		return toAny(items), err
	}
	seen := map[string]struct{}{}
	var out []any
	for _, v := range values {
		items, err := x.c.ByIndex(indexName, v)
		if err != nil {
			return nil, err
		}
		for _, it := range items {
			key := x.c.Key(it)
			if _, dup := seen[key]; !dup {
				seen[key] = struct{}{}
				out = append(out, it)
			}
		}
	}
	return out, nil
}

// values is what the named index files obj under: by the client-go
// function it was added with, else (kinformer's own indexes) by its
// kinformer function if obj is a T, or by obj's namespace for the
// namespace index.
func (x *indexer[T]) values(indexName string, obj any) ([]string, error) {
	if f, ok := x.given.Load(indexName); ok {
		return f.(cache.IndexFunc)(obj)
	}
	f, ok := x.c.Indexers()[indexName]
	if !ok {
		return nil, fmt.Errorf("Index with name %s does not exist", indexName)
	}
	if t, ok := obj.(T); ok {
		return f(t), nil
	}
	if indexName == kinformer.IndexNamespace {
		m, err := meta.Accessor(obj)
		if err != nil {
			return nil, err
		}
		return []string{m.GetNamespace()}, nil
	}
	return nil, fmt.Errorf("clientgo: index %q takes a %s, not a %T", indexName, reflect.TypeFor[T](), obj)
}

func (x *indexer[T]) IndexKeys(indexName, indexedValue string) ([]string, error) {
	return x.c.IndexKeys(indexName, indexedValue)
}

func (x *indexer[T]) ListIndexFuncValues(indexName string) []string {
	vals, _ := x.c.IndexValues(indexName)
	return vals
}

func (x *indexer[T]) ByIndex(indexName, indexedValue string) ([]any, error) {
	items, err := x.c.ByIndex(indexName, indexedValue)
	if err != nil {
		return nil, err
	}
	return toAny(items), nil
}

// GetIndexers returns the cache's indexes as client-go index functions.
func (x *indexer[T]) GetIndexers() cache.Indexers {
	out := cache.Indexers{}
	for name := range x.c.Indexers() {
		if f, ok := x.given.Load(name); ok {
			out[name] = f.(cache.IndexFunc)
			continue
		}
		out[name] = func(obj any) ([]string, error) { return x.values(name, obj) }
	}
	return out
}

// AddIndexers adds client-go index functions to the cache. An index
// function's error is logged, naming the index and the object, and the
// object is filed under no value of that index (client-go panics).
func (x *indexer[T]) AddIndexers(indexers cache.Indexers) error {
	add := make(map[string]kinformer.IndexFunc[T], len(indexers))
	have := x.c.Indexers()
	for name, f := range indexers {
		if f == nil {
			return fmt.Errorf("clientgo: index %q has a nil IndexFunc", name)
		}
		if name == kinformer.IndexNamespace && sameFunc(f, cache.MetaNamespaceIndexFunc) {
			if _, ok := have[name]; ok {
				continue // kinformer's built-in namespace index is this one
			}
		}
		add[name] = func(obj T) []string {
			vals, err := f(obj)
			if err != nil {
				klog.ErrorS(err, "Index function failed: the object is not filed in this index", "index", name, "object", klog.KObj(obj))
				return nil
			}
			return vals
		}
	}
	if len(add) == 0 {
		return nil
	}
	if err := x.s.inf.AddIndexers(add); err != nil {
		return err
	}
	for name := range add {
		x.given.Store(name, indexers[name])
	}
	return nil
}

func toAny[T any](items []T) []any {
	out := make([]any, len(items))
	for i, it := range items {
		out[i] = it
	}
	return out
}

// sameFunc reports whether a and b are the same function (not a closure
// of it).
func sameFunc(a, b cache.IndexFunc) bool {
	return reflect.ValueOf(a).Pointer() == reflect.ValueOf(b).Pointer()
}
