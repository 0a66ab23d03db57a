package controllerruntime

import (
	"errors"
	"fmt"

	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
)

// store is what a reader reads: the typed cache of a kinformer informer
// (cacheStore), or the client-go indexer of an informer of
// cache.Options.NewInformer (indexerStore), which is not kinformer's.
type store interface {
	// get returns the object under a cache key.
	get(key string, kept bool) (runtime.Object, bool, error)
	// all returns every object; byIndex those filed under value in the
	// named index (the namespace index is toolscache.NamespaceIndex).
	// With kept, a compact cache's objects are the cache's own
	// (kinformer's GetKept and the like: decoded once and kept), as an
	// UnsafeDisableDeepCopy read promises; a cache of objects returns
	// its own anyway.
	all(kept bool) ([]runtime.Object, error)
	byIndex(name, value string, kept bool) ([]runtime.Object, error)
	// indexFunc returns the named index's function as client-go's
	// indexer has it (false if there is no such index): for an index
	// added through the informer (IndexField, AddIndexers), the function
	// given, whose error a List returns, as controller-runtime's cache
	// does.
	indexFunc(name string) (toolscache.IndexFunc, bool)
}

// cacheStore reads a kinformer informer's cache directly, without the
// client-go indexer's any-typed values between; idx is that indexer
// (kinformer's client-go adapter's), which has the client-go functions of
// the indexes added through it.
type cacheStore[T kinformer.Object] struct {
	c   *kinformer.Cache[T]
	idx toolscache.Indexer
}

func (s cacheStore[T]) get(key string, kept bool) (runtime.Object, bool, error) {
	if kept {
		obj, ok := s.c.GetKept(key)
		return obj, ok, nil
	}
	obj, ok := s.c.GetByKey(key)
	return obj, ok, nil
}

func (s cacheStore[T]) all(kept bool) ([]runtime.Object, error) {
	if kept {
		return objects(s.c.ListKept()), nil
	}
	return objects(s.c.List()), nil
}

func (s cacheStore[T]) byIndex(name, value string, kept bool) ([]runtime.Object, error) {
	read := s.c.ByIndex
	if kept {
		read = s.c.ByIndexKept
	}
	objs, err := read(name, value)
	if errors.Is(err, kinformer.ErrUnknownIndex) {
		return nil, noIndex{name}
	}
	return objects(objs), err
}

// noIndex is a lookup in an index that was never added (no IndexField for
// the field): its text is client-go's indexer's, which controller-runtime's
// cache returns, and it wraps kinformer.ErrUnknownIndex.
type noIndex struct{ name string }

func (e noIndex) Error() string { return fmt.Sprintf("Index with name %s does not exist", e.name) }
func (e noIndex) Unwrap() error { return kinformer.ErrUnknownIndex }

func (s cacheStore[T]) indexFunc(name string) (toolscache.IndexFunc, bool) {
	fn, ok := s.idx.GetIndexers()[name]
	return fn, ok
}

func objects[T kinformer.Object](objs []T) []runtime.Object {
	out := make([]runtime.Object, len(objs))
	for i, o := range objs {
		out[i] = o
	}
	return out
}

// indexerStore reads a client-go indexer.
type indexerStore struct{ i toolscache.Indexer }

func (s indexerStore) get(key string, _ bool) (runtime.Object, bool, error) {
	obj, ok, err := s.i.GetByKey(key)
	if err != nil || !ok {
		return nil, ok, err
	}
	ro, isObj := obj.(runtime.Object)
	if !isObj {
		return nil, false, fmt.Errorf("cache contained %T, which is not an Object", obj)
	}
	return ro, true, nil
}

func (s indexerStore) all(bool) ([]runtime.Object, error) { return runtimeObjects(s.i.List()) }

func (s indexerStore) byIndex(name, value string, _ bool) ([]runtime.Object, error) {
	objs, err := s.i.ByIndex(name, value)
	if err != nil {
		return nil, err
	}
	return runtimeObjects(objs)
}

func (s indexerStore) indexFunc(name string) (toolscache.IndexFunc, bool) {
	fn, ok := s.i.GetIndexers()[name]
	return fn, ok
}

func runtimeObjects(objs []any) ([]runtime.Object, error) {
	out := make([]runtime.Object, len(objs))
	for i, it := range objs {
		obj, ok := it.(runtime.Object)
		if !ok {
			return nil, fmt.Errorf("cache contained %T, which is not an Object", it)
		}
		out[i] = obj
	}
	return out, nil
}
