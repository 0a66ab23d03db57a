package controllerruntime

import (
	"fmt"
	"reflect"
	"slices"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/selection"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// This file restates pkg/cache/internal/cache_reader.go of
// controller-runtime v0.25.2: Get and List over one informer's cache,
// with its errors, deep copies, limits and exact field selectors.

// reader reads one informer's cache as controller-runtime's CacheReader
// does: Get and List answer the same, errors included.
type reader struct {
	store  store
	gvk    schema.GroupVersionKind
	scope  meta.RESTScopeName
	noCopy bool // UnsafeDisableDeepCopy
	// fresh: the store decodes a new object for every read (a compact
	// cache), which is the caller's own without a deep copy; a read with
	// UnsafeDisableDeepCopy asks for the cache's own object (kept).
	fresh bool
	// projected is the fields a projected cache keeps (Options.ByObject),
	// which every copy read carries in ProjectedAnnotation; "" if whole.
	projected string
}

func (r reader) Get(key client.ObjectKey, out client.Object, opts ...client.GetOption) error {
	var o client.GetOptions
	o.ApplyOptions(opts)
	if r.scope == meta.RESTScopeNameRoot {
		key.Namespace = ""
	}
	storeKey := key.Name
	if key.Namespace != "" {
		storeKey = key.Namespace + "/" + key.Name
	}
	copied := !r.noCopy && (o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy)
	ro, exists, err := r.store.get(storeKey, !copied)
	if err != nil {
		return err
	}
	if !exists {
		// controller-runtime names the kind where the resource goes.
		return apierrors.NewNotFound(schema.GroupResource{Group: r.gvk.Group, Resource: r.gvk.Kind}, key.Name)
	}
	if copied && !r.fresh {
		ro = ro.DeepCopyObject()
	}
	outVal, objVal := reflect.ValueOf(out), reflect.ValueOf(ro)
	if !objVal.Type().AssignableTo(outVal.Type()) {
		return fmt.Errorf("cache had type %s, but %s was asked for", objVal.Type(), outVal.Type())
	}
	reflect.Indirect(outVal).Set(reflect.Indirect(objVal))
	if copied {
		out.GetObjectKind().SetGroupVersionKind(r.gvk)
		r.mark(out)
	}
	return nil
}

// mark sets ProjectedAnnotation on a copy read from a projected cache.
func (r reader) mark(obj metav1.Object) {
	if r.projected == "" {
		return
	}
	a := obj.GetAnnotations() // a copy's own
	if a == nil {
		a = make(map[string]string, 1)
	}
	a[ProjectedAnnotation] = r.projected
	obj.SetAnnotations(a)
}

func (r reader) List(out client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	if o.Continue != "" {
		return fmt.Errorf("continue list option is not supported by the cache")
	}
	copied := !r.noCopy && (o.UnsafeDisableDeepCopy == nil || !*o.UnsafeDisableDeepCopy)
	var objs []runtime.Object
	var err error
	switch {
	case o.FieldSelector != nil:
		if !exactOnly(o.FieldSelector) {
			return fmt.Errorf("non-exact field matches are not supported by the cache")
		}
		objs, err = r.byFields(o.FieldSelector.Requirements(), o.Namespace, !copied)
	case o.Namespace != "":
		objs, err = r.store.byIndex(toolscache.NamespaceIndex, o.Namespace, !copied)
	default:
		objs, err = r.store.all(!copied)
	}
	if err != nil {
		return err
	}
	items := make([]runtime.Object, 0, len(objs))
	for _, obj := range objs {
		if o.Limit > 0 && int64(len(items)) >= o.Limit {
			break
		}
		m, err := meta.Accessor(obj)
		if err != nil {
			return err
		}
		if o.LabelSelector != nil && !o.LabelSelector.Matches(labels.Set(m.GetLabels())) {
			continue
		}
		if copied {
			if !r.fresh {
				obj = obj.DeepCopyObject()
			}
			obj.GetObjectKind().SetGroupVersionKind(r.gvk)
			if r.projected != "" {
				m, _ := meta.Accessor(obj)
				r.mark(m)
			}
		}
		items = append(items, obj)
	}
	if err := meta.SetList(out, items); err != nil {
		return err
	}
	out.SetContinue("continue-not-supported")
	return nil
}

// exactOnly reports whether a field selector has only = and == terms,
// which the field indexes answer.
func exactOnly(sel fields.Selector) bool {
	reqs := sel.Requirements()
	if len(reqs) == 0 {
		return false
	}
	for _, r := range reqs {
		if r.Operator != selection.Equals && r.Operator != selection.DoubleEquals {
			return false
		}
	}
	return true
}

// byFields returns the objects whose field indexes hold every
// requirement's value, in namespace ("" for all); the cache's own objects
// if kept (store.get).
func (r reader) byFields(reqs fields.Requirements, namespace string, kept bool) ([]runtime.Object, error) {
	var objs []runtime.Object
	for i, req := range reqs {
		name, value := fieldIndexName(req.Field), namespacedKey(namespace, req.Value)
		if i == 0 {
			var err error
			if objs, err = r.store.byIndex(name, value, kept); err != nil {
				return nil, err
			}
			if len(objs) == 0 {
				return nil, nil
			}
			continue
		}
		fn, ok := r.store.indexFunc(name)
		if !ok {
			return nil, fmt.Errorf("index with name %s does not exist", name)
		}
		matched := objs[:0:0]
		for _, obj := range objs {
			vals, err := fn(obj)
			if err != nil {
				return nil, err
			}
			if slices.Contains(vals, value) {
				matched = append(matched, obj)
			}
		}
		if len(matched) == 0 {
			return nil, nil
		}
		objs = matched
	}
	return objs, nil
}

// fieldIndexName and namespacedKey are controller-runtime's index names
// and values for field indexes (IndexField): code that reads the indexer
// itself finds them as with controller-runtime's cache.
func fieldIndexName(field string) string { return fieldIndexPrefix + field }

const fieldIndexPrefix = "field:"

func namespacedKey(ns, v string) string {
	if ns == "" {
		ns = "__all_namespaces"
	}
	return ns + "/" + v
}

func trimList(kind string) string { return strings.TrimSuffix(kind, "List") }
