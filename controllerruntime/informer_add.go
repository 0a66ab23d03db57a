package controllerruntime

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// How a namespace cache makes the informer of a kind: kinformer's, from
// the factory, with the cache's selectors, transform and projection, or
// one of cache.Options.NewInformer. With informers.go, a restatement of
// controller-runtime v0.25.2's pkg/cache/internal/informers.go.

// add makes the entry of k, or returns the one made meanwhile.
func (c *namespaceCache) add(k entryKey, obj runtime.Object) (*entry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		return e, c.started, nil
	}
	if c.kinds != nil && !c.kinds[k.gvk] {
		return nil, c.started, fmt.Errorf("%s in %q because of unknown namespace for the cache: %w", k.gvk.Kind, c.namespace, errNotAllowed)
	}
	mapping, err := c.sh.mapper.RESTMapping(k.gvk.GroupKind(), k.gvk.Version)
	if err != nil {
		return nil, c.started, err
	}
	ns := restrictNamespace(c.namespace, c.config.FieldSelector)
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		ns = metav1.NamespaceAll
	}
	var label, field string
	if c.config.LabelSelector != nil {
		label = c.config.LabelSelector.String()
	}
	if c.config.FieldSelector != nil {
		field = c.config.FieldSelector.String()
	}
	resync := syncPeriodOf(c.config, rand.Float64())
	transform := transformFor(k, c.config.Transform)
	fields := c.projection(k)
	f := c.sh.factory
	log := informerLogger(c.sh.log, k.gvk, ns)
	noCopy := ptr.Deref(c.config.UnsafeDisableDeepCopy, false)
	// Compressed bytes (kinformer's Options.Compact), unless Options.
	// Decoded, or the informer is better served by objects: its reads
	// are all the cache's own (UnsafeDisableDeepCopy), a Transform may
	// make what its encoding does not keep, or mutations are to be
	// detected.
	compact := c.sh.compact && !noCopy && c.config.Transform == nil && !c.sh.detectMutations
	var fresh bool // the informer's cache decodes every read (Compact)
	e := &entry{log: log, clusterWide: ns == metav1.NamespaceAll}
	switch {
	case c.sh.newInformer != nil:
		lw, err := c.listWatch(k, mapping, ns, label, field)
		if err != nil {
			return nil, c.started, err
		}
		e.sii = c.sh.newInformer(lw, obj, resync, toolscache.Indexers{toolscache.NamespaceIndex: toolscache.MetaNamespaceIndexFunc})
		e.own, e.release = true, func() {}
	case k.form == unstructuredForm:
		inf, err := f.Dynamic(mapping.Resource, ns, &kinformer.Options[*unstructured.Unstructured]{
			LabelSelector: label, FieldSelector: field, KeepManagedFields: c.sh.keepManaged, DetectMutations: c.sh.detectMutations, Compact: compact,
			Fields: fields, Logger: log,
			Transform: transformOf[*unstructured.Unstructured](c, k, transform)})
		if err != nil {
			return nil, c.started, err
		}
		acquired(inf.LastError)
		e.sii, e.release, e.wait, e.lastError, e.startup = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError, inf.Startup
		e.reader.store = cacheStore[*unstructured.Unstructured]{inf.Cache(), e.sii.GetIndexer()}
		fresh = inf.Cache().Compact()
	case k.form == metadataForm:
		inf, err := f.Metadata(mapping.Resource, ns, &kinformer.Options[*metav1.PartialObjectMetadata]{
			LabelSelector: label, FieldSelector: field, KeepManagedFields: c.sh.keepManaged, DetectMutations: c.sh.detectMutations, Compact: compact,
			Fields: fields, Logger: log,
			Transform: transformOf[*metav1.PartialObjectMetadata](c, k, transform)})
		if err != nil {
			return nil, c.started, err
		}
		acquired(inf.LastError)
		e.sii, e.release, e.wait, e.lastError, e.startup = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError, inf.Startup
		e.reader.store = cacheStore[*metav1.PartialObjectMetadata]{inf.Cache(), e.sii.GetIndexer()}
		fresh = inf.Cache().Compact()
	default:
		example, err := c.sh.scheme.New(k.gvk)
		if err != nil {
			return nil, c.started, err
		}
		inf, err := f.Typed(example, ns, &kinformer.Options[kinformer.Object]{
			LabelSelector: label, FieldSelector: field, KeepManagedFields: c.sh.keepManaged, DetectMutations: c.sh.detectMutations, Compact: compact,
			Fields: fields, Logger: log,
			Transform: transformOf[kinformer.Object](c, k, transform)})
		if err != nil {
			return nil, c.started, err
		}
		acquired(inf.LastError)
		e.sii, e.release, e.wait, e.lastError, e.startup = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError, inf.Startup
		e.reader.store = cacheStore[kinformer.Object]{inf.Cache(), e.sii.GetIndexer()}
		fresh = inf.Cache().Compact()
	}
	h := c.sh.watchErrHandler
	if h == nil && !e.own {
		// kinformer's informers: through the cache's logger, not
		// client-go's default (klog).
		h = watchErrorLogger(log)
	}
	if h != nil && !e.own {
		h = e.hearing(h)
		e.watchErr = h
	}
	if h != nil {
		if err := e.sii.SetWatchErrorHandlerWithContext(h); err != nil {
			return nil, c.started, err
		}
	}
	if transform != nil && e.own {
		// The factory's informers have theirs from the start: the
		// factory may start one as soon as it is made.
		if err := e.sii.SetTransform(transform); err != nil {
			return nil, c.started, err
		}
	}
	if e.own {
		e.reader.store = indexerStore{e.sii.GetIndexer()}
	}
	e.reader = reader{store: e.reader.store, gvk: k.gvk, scope: mapping.Scope.Name(),
		noCopy: noCopy, fresh: fresh}
	if len(fields) > 0 && !e.own {
		e.reader.projected = strings.Join(fields, ",")
	}
	e.resource = mapping.Resource.GroupResource().String()
	if !e.own {
		e.startLine = startAttrs(e.resource, k.form, fields, fresh)
	}
	c.entries[k] = e
	if c.started {
		c.startLocked(e)
	}
	return e, c.started, nil
}

// acquiredHook, if set, is called with each kinformer informer's
// LastError once the factory has handed it out, before its watch error
// handler is set (tests: an informer that fails before that).
var acquiredHook atomic.Pointer[func(lastError func() (error, time.Time))]

func acquired(lastError func() (error, time.Time)) {
	if h := acquiredHook.Load(); h != nil {
		(*h)(lastError)
	}
}

// transformOf returns the factory Transform of kind k, made from t once
// per cache (namespaceCache.transforms). c.mu must be held.
func transformOf[T kinformer.Object](c *namespaceCache, k entryKey, t toolscache.TransformFunc) func(T) (T, error) {
	if fn, ok := c.transforms[k].(func(T) (T, error)); ok {
		return fn
	}
	fn := clientgo.Transform[T](t)
	c.transforms[k] = fn
	return fn
}

// transformFor is the transform of an entry: the configured one, and for
// metadata the kind's GroupVersionKind set on each object (the server
// sends PartialObjectMetadata's own), as controller-runtime does.
func transformFor(k entryKey, t toolscache.TransformFunc) toolscache.TransformFunc {
	if k.form != metadataForm {
		return t
	}
	gvk := k.gvk
	return func(obj any) (any, error) {
		if m, ok := obj.(*metav1.PartialObjectMetadata); ok {
			m.SetGroupVersionKind(gvk)
		}
		if t == nil {
			return obj, nil
		}
		return t(obj)
	}
}

// restrictNamespace narrows all namespaces to the one a field selector
// requires, as controller-runtime does.
func restrictNamespace(ns string, sel fields.Selector) string {
	if ns != "" || sel == nil || sel.Empty() {
		return ns
	}
	if v, ok := sel.RequiresExactMatch("metadata.namespace"); ok {
		return v
	}
	return ""
}

// keptAlways are the fields a projected cache keeps whatever
// Options.ByObject's Fields say: what controller-runtime itself reads of
// every object it caches. Its owner handler (Owns,
// handler.EnqueueRequestForOwner) reads the ownerReferences, label
// selectors and LabelChangedPredicate the labels, GenerationChangedPredicate
// the generation. Left out, they fail silently: every object seems to have
// no owner, no labels, no change. (name, namespace, uid and resourceVersion,
// which keys, deletes and read-your-writes read, the informer keeps
// anyway.)
var keptAlways = []string{"metadata.labels", "metadata.ownerReferences", "metadata.generation"}

// projection is the projection of k's informers in this cache: the
// kind's Options.ByObject Fields (fieldsOf), keptAlways, and the fields
// the cache's field selector reads (a ByObject or DefaultFieldSelector:
// the paths of it that are fields of the kind), so that a cached object
// still shows why it was selected. Nil: whole objects.
func (c *namespaceCache) projection(k entryKey) []string {
	fields := c.sh.fieldsOf(k)
	if len(fields) == 0 {
		return nil
	}
	out := slices.Clone(fields)
	add := func(p string) {
		if !slices.Contains(out, p) {
			out = append(out, p)
		}
	}
	for _, p := range keptAlways {
		add(p)
	}
	if c.config.FieldSelector == nil {
		return out
	}
	var example any
	switch k.form {
	case metadataForm:
		example = &metav1.PartialObjectMetadata{}
	case structured:
		example, _ = c.sh.scheme.New(k.gvk)
	}
	for _, r := range c.config.FieldSelector.Requirements() {
		switch r.Field {
		case "metadata.name", "metadata.namespace":
			continue // kept anyway
		}
		// A field selector's field the kind has no such path for (one
		// the server maps itself) is left to the server.
		if kinformer.CheckFields(example, []string{r.Field}) == nil {
			add(r.Field)
		}
	}
	return out
}

// fieldsOf is the projection of k's informers (Options.ByObject): a
// metadata-only informer keeps the metadata paths of it (nil if none:
// its objects are small already).
func (sh *shared) fieldsOf(k entryKey) []string {
	fields := sh.fields[k.gvk]
	if k.form != metadataForm || fields == nil {
		return fields
	}
	var meta []string
	for _, p := range fields {
		if strings.HasPrefix(p, "metadata.") {
			meta = append(meta, p)
		}
	}
	return meta
}
