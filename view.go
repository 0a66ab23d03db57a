package kinformer

import (
	"k8s.io/apimachinery/pkg/labels"
)

// View is one read-only view over several informers of one kind: one per
// namespace (a controller that may watch only some namespaces, as
// controller-runtime's per-namespace cache), or one per selector. Each
// informer keeps its own watch; the view reads all their caches and
// registers handlers on all of them. The informers' objects should not
// overlap (distinct namespaces, disjoint selectors): an object in two of
// them is listed and delivered twice.
type View[T Object] struct {
	infs []*Informer[T]
}

// NewView returns a view over infs.
func NewView[T Object](infs ...*Informer[T]) *View[T] {
	return &View[T]{infs: append([]*Informer[T](nil), infs...)}
}

// Informers returns the view's informers.
func (v *View[T]) Informers() []*Informer[T] { return append([]*Informer[T](nil), v.infs...) }

// HasSynced reports whether every informer has synced.
func (v *View[T]) HasSynced() bool {
	for _, inf := range v.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// GetByKey returns the object under key in the first cache that has it.
func (v *View[T]) GetByKey(key string) (T, bool) {
	for _, inf := range v.infs {
		if obj, ok := inf.Cache().GetByKey(key); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
}

// GetNamespaced returns the object with this namespace and name.
func (v *View[T]) GetNamespaced(namespace, name string) (T, bool) {
	for _, inf := range v.infs {
		if obj, ok := inf.Cache().GetNamespaced(namespace, name); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
}

// Select returns the objects of every cache in namespace ("" for all)
// whose labels match sel (nil matches everything).
func (v *View[T]) Select(namespace string, sel labels.Selector) []T {
	var out []T
	for _, inf := range v.infs {
		out = append(out, inf.Cache().Select(namespace, sel)...)
	}
	return out
}

// AddHandlerFuncs registers h on every informer of the view, one ordered
// registration each: the events of one object come from one informer, in
// order.
func (v *View[T]) AddHandlerFuncs(h HandlerFuncs[T]) []*Registration {
	regs := make([]*Registration, len(v.infs))
	for i, inf := range v.infs {
		regs[i] = inf.AddHandlerFuncs(h)
	}
	return regs
}
