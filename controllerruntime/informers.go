package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// This file restates, from controller-runtime v0.25.2,
// pkg/cache/informer_cache.go (Get, List, GetInformer, IndexField and its
// index names) and pkg/cache/internal/informers.go (one map of informers
// per cache, Start, RemoveInformer, WaitForCacheSync), on a kinformer
// Factory that owns the informers' runs.

// form is how a kind is cached: as its Go type, unstructured, or metadata
// only. One kind may be cached in each form, by separate informers.
type form uint8

const (
	structured form = iota
	unstructuredForm
	metadataForm
)

func formOf(obj runtime.Object) form {
	switch obj.(type) {
	case runtime.Unstructured:
		return unstructuredForm
	case *metav1.PartialObjectMetadata, *metav1.PartialObjectMetadataList:
		return metadataForm
	}
	return structured
}

type entryKey struct {
	gvk  schema.GroupVersionKind
	form form
}

// entry is one kind's informer in one namespace cache. The factory owns
// the runs of its informers: the cache acquires one (Factory.Typed and the
// like) and gives it back (kinformer.Release), and never runs or stops it
// itself. Only an informer of cache.Options.NewInformer, which is not the
// factory's, is run by the cache (own).
type entry struct {
	sii    toolscache.SharedIndexInformer
	reader reader
	own    bool               // an informer of cache.Options.NewInformer, run by the cache
	cancel context.CancelFunc // own: stops its run; nil until started
	// release gives the factory's informer back: the last release stops
	// it. Called once, when the entry is removed.
	release func()
	// wait, for a kinformer informer, waits for its sync and returns at
	// once an error retrying cannot fix (a 403): a Get of a kind the
	// manager may not list fails with it, rather than waiting out its
	// context. Nil for cache.Options.NewInformer's.
	wait func(context.Context) error
	// lastError is the kinformer informer's LastError (nil for
	// NewInformer's).
	lastError func() (error, time.Time)
	// gone: the entry was removed, or the cache has stopped (IsStopped).
	gone atomic.Bool
}

// sharedInformer is a factory's informer as a namespace cache hands it
// out: once this cache has given it back or stopped (the factory may run
// it on for other caches), it says IsStopped and refuses new handlers and
// indexes, as controller-runtime's own informers do once removed.
type sharedInformer struct {
	toolscache.SharedIndexInformer
	e *entry
}

func (s sharedInformer) IsStopped() bool { return s.e.gone.Load() }

// errStopped is client-go's answer to a handler or an index added to a
// stopped informer.
func (s sharedInformer) errStopped(what any) error {
	return fmt.Errorf("%v was not added to shared informer because it has stopped already", what)
}

func (s sharedInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandler(h)
}

func (s sharedInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, period time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandlerWithResyncPeriod(h, period)
}

func (s sharedInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	if s.IsStopped() {
		return nil, s.errStopped(fmt.Sprintf("handler %v", h))
	}
	return s.SharedIndexInformer.AddEventHandlerWithOptions(h, o)
}

func (s sharedInformer) AddIndexers(indexers toolscache.Indexers) error {
	if s.IsStopped() {
		return s.errStopped("indexers")
	}
	return s.SharedIndexInformer.AddIndexers(indexers)
}

// namespaceCache is one namespace's (or every namespace's) informers, with
// one configuration: controller-runtime's informerCache.
type namespaceCache struct {
	sh        *shared
	namespace string
	config    cache.Config

	mu      sync.Mutex // guards everything below
	entries map[entryKey]*entry
	// transforms holds the Transform given to the factory for each kind,
	// made once: the factory shares an informer only with the same
	// function value, and a kind removed may be acquired again before its
	// last release has stopped it.
	transforms map[entryKey]any
	started    bool
	stopped    bool
	ctx        context.Context // Start's
	startWait  chan struct{}   // closed by Start
	wg         sync.WaitGroup  // the informers' runs
}

func newNamespaceCache(sh *shared, c cache.Config, namespace string) *namespaceCache {
	return &namespaceCache{sh: sh, namespace: namespace, config: c, entries: map[entryKey]*entry{},
		transforms: map[entryKey]any{}, startWait: make(chan struct{})}
}

var _ cache.Cache = (*namespaceCache)(nil)

// get returns the entry of gvk in obj's form, making it unless
// failOnMissing, and waits for its sync if block and the cache runs.
func (c *namespaceCache) get(ctx context.Context, gvk schema.GroupVersionKind, obj runtime.Object, failOnMissing, block bool) (bool, *entry, error) {
	k := entryKey{gvk, formOf(obj)}
	c.mu.Lock()
	e, ok := c.entries[k]
	started := c.started
	c.mu.Unlock()
	if !ok {
		if failOnMissing {
			return started, nil, &cache.ErrResourceNotCached{GVK: gvk}
		}
		var err error
		if e, started, err = c.add(k, obj); err != nil {
			return started, nil, err
		}
	}
	// An informer made by this call was not synced when asked, even if it
	// syncs before the check below (kinformer's can, on a quick server).
	if block && started && (!ok || !e.sii.HasSynced()) {
		timeout := apierrors.NewTimeoutError(fmt.Sprintf("failed waiting for %T Informer to sync", obj), 0)
		if ctx.Err() != nil {
			// No time to wait: an error, as controller-runtime's (a
			// select would pick at random between this and a sync
			// completing meanwhile).
			return started, nil, timeout
		}
		if e.wait != nil {
			err := e.wait(ctx)
			switch {
			case err == nil:
				return started, e, nil
			case ctx.Err() != nil:
				return started, nil, timeout
			case apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err):
				// At once: waiting would only hide it. Not a 404 (a
				// deleted CRD): client.IgnoreNotFound would take it for
				// an object not found.
				return started, nil, fmt.Errorf("%s: %w", gvk.Kind, err)
			}
		}
		select {
		case <-e.sii.HasSyncedChecker().Done():
		case <-ctx.Done():
			return started, nil, timeout
		}
	}
	return started, e, nil
}

// add makes the entry of k, or returns the one made meanwhile.
func (c *namespaceCache) add(k entryKey, obj runtime.Object) (*entry, bool, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if e, ok := c.entries[k]; ok {
		return e, c.started, nil
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
	fields := c.sh.fieldsOf(k)
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
	e := &entry{}
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
		e.sii, e.release, e.wait, e.lastError = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError
		e.reader.store = cacheStore[*unstructured.Unstructured]{inf.Cache()}
		fresh = inf.Cache().Compact()
	case k.form == metadataForm:
		inf, err := f.Metadata(mapping.Resource, ns, &kinformer.Options[*metav1.PartialObjectMetadata]{
			LabelSelector: label, FieldSelector: field, KeepManagedFields: c.sh.keepManaged, DetectMutations: c.sh.detectMutations, Compact: compact,
			Fields: fields, Logger: log,
			Transform: transformOf[*metav1.PartialObjectMetadata](c, k, transform)})
		if err != nil {
			return nil, c.started, err
		}
		e.sii, e.release, e.wait, e.lastError = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError
		e.reader.store = cacheStore[*metav1.PartialObjectMetadata]{inf.Cache()}
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
		e.sii, e.release, e.wait, e.lastError = sharedInformer{clientgo.WrapWithResync(inf, resync), e}, func() { kinformer.Release(f, inf) }, inf.WaitForSync, inf.LastError
		e.reader.store = cacheStore[kinformer.Object]{inf.Cache()}
		fresh = inf.Cache().Compact()
	}
	h := c.sh.watchErrHandler
	if h == nil && !e.own {
		// kinformer's informers: through the cache's logger, not
		// client-go's default (klog).
		h = watchErrorLogger(log)
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
	c.entries[k] = e
	if c.started {
		c.startLocked(e)
	}
	return e, c.started, nil
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

// startLocked runs e, if the cache runs it (own), until the cache's
// context ends or e is removed; the factory runs its own informers. c.mu
// must be held, and the cache started.
func (c *namespaceCache) startLocked(e *entry) {
	if c.stopped || !e.own {
		return
	}
	ctx, cancel := context.WithCancel(c.ctx)
	e.cancel = cancel
	c.wg.Go(func() { e.sii.RunWithContext(ctx) })
}

// Start runs the informers, those made so far and those made later, until
// ctx ends, then waits for them to stop.
func (c *namespaceCache) Start(ctx context.Context) error {
	c.mu.Lock()
	if c.started {
		c.mu.Unlock()
		return errors.New("informer already started") //nolint:staticcheck // controller-runtime's message
	}
	c.ctx = ctx
	for _, e := range c.entries {
		c.startLocked(e)
	}
	c.started = true
	close(c.startWait)
	c.mu.Unlock()
	<-ctx.Done()
	c.mu.Lock()
	c.stopped = true
	for _, e := range c.entries {
		e.gone.Store(true) // the factory stops its own once every cache has stopped (factoryCache)
	}
	c.mu.Unlock()
	c.wg.Wait()
	return nil
}

func (c *namespaceCache) WaitForCacheSync(ctx context.Context) bool {
	select {
	case <-c.startWait:
	case <-ctx.Done():
		return false
	}
	c.mu.Lock()
	entries := make(map[entryKey]*entry, len(c.entries))
	maps.Copy(entries, c.entries)
	c.mu.Unlock()
	for _, e := range entries {
		select {
		case <-e.sii.HasSyncedChecker().Done():
		case <-ctx.Done():
			c.logUnsynced(entries)
			return false
		}
	}
	return true
}

// logUnsynced says, when WaitForCacheSync gives up, which kinds had not
// synced and why, so that a forbidden kind never shows as a bare timeout
// of the whole cache (controller-runtime's manager says only that the
// caches did not sync).
func (c *namespaceCache) logUnsynced(entries map[entryKey]*entry) {
	for k, e := range entries {
		if e.sii.HasSynced() {
			continue
		}
		why := "still listing"
		if e.lastError != nil {
			if err, since := e.lastError(); err != nil {
				why = fmt.Sprintf("%v (since %s)", err, since.Format(time.RFC3339))
			}
		}
		c.sh.log.Error("kinformer: WaitForCacheSync gave up before this kind synced", "kind", k.gvk.Kind, "group", k.gvk.Group,
			"namespace", c.namespace, "reason", why)
	}
}

func (c *namespaceCache) Get(ctx context.Context, key client.ObjectKey, out client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(out, c.sh.scheme)
	if err != nil {
		return err
	}
	return c.getKind(ctx, gvk, key, out, opts...)
}

// kindReader is a cache that can be told the kind of the object it gets,
// so that one Get computes it once however many caches it passes through
// (byGVK, then multiNamespaceCache, then namespaceCache).
type kindReader interface {
	getKind(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey, out client.Object, opts ...client.GetOption) error
}

// getKind is c.Get of an object of kind gvk, told if c can be.
func getKind(ctx context.Context, c cache.Cache, gvk schema.GroupVersionKind, key client.ObjectKey, out client.Object, opts ...client.GetOption) error {
	if kr, ok := c.(kindReader); ok {
		return kr.getKind(ctx, gvk, key, out, opts...)
	}
	return c.Get(ctx, key, out, opts...)
}

func (c *namespaceCache) getKind(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey, out client.Object, opts ...client.GetOption) error {
	started, e, err := c.get(ctx, gvk, out, c.sh.failOnMissing, true)
	if err != nil {
		return err
	}
	if !started {
		return &cache.ErrCacheNotStarted{}
	}
	return e.reader.Get(key, out, opts...)
}

func (c *namespaceCache) List(ctx context.Context, out client.ObjectList, opts ...client.ListOption) error {
	gvk, obj, err := c.itemOf(out)
	if err != nil {
		return err
	}
	started, e, err := c.get(ctx, gvk, obj, c.sh.failOnMissing, true)
	if err != nil {
		return err
	}
	if !started {
		return &cache.ErrCacheNotStarted{}
	}
	return e.reader.List(out, opts...)
}

// itemOf returns the kind of a list's items, and an item of its form.
func (c *namespaceCache) itemOf(list client.ObjectList) (schema.GroupVersionKind, runtime.Object, error) {
	gvk, err := apiutil.GVKForObject(list, c.sh.scheme)
	if err != nil {
		return gvk, nil, err
	}
	gvk.Kind = trimList(gvk.Kind)
	switch formOf(list) {
	case unstructuredForm:
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		return gvk, u, nil
	case metadataForm:
		m := &metav1.PartialObjectMetadata{}
		m.SetGroupVersionKind(gvk)
		return gvk, m, nil
	}
	obj, err := c.sh.scheme.New(gvk)
	return gvk, obj, err
}

func blockOf(opts []cache.InformerGetOption) bool {
	var o cache.InformerGetOptions
	for _, opt := range opts {
		opt(&o)
	}
	return ptr.Deref(o.BlockUntilSynced, true)
}

func (c *namespaceCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	gvk, err := apiutil.GVKForObject(obj, c.sh.scheme)
	if err != nil {
		return nil, err
	}
	_, e, err := c.get(ctx, gvk, obj, false, blockOf(opts))
	if err != nil {
		return nil, err
	}
	return e.sii, nil
}

func (c *namespaceCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	obj, err := c.sh.scheme.New(gvk)
	if err != nil {
		return nil, err
	}
	_, e, err := c.get(ctx, gvk, obj, false, blockOf(opts))
	if err != nil {
		return nil, err
	}
	return e.sii, nil
}

// RemoveInformer stops the kind's informer and forgets it: a later use
// makes a new one.
func (c *namespaceCache) RemoveInformer(_ context.Context, obj client.Object) error {
	gvk, err := apiutil.GVKForObject(obj, c.sh.scheme)
	if err != nil {
		return err
	}
	k := entryKey{gvk, formOf(obj)}
	c.mu.Lock()
	e, ok := c.entries[k]
	delete(c.entries, k)
	c.mu.Unlock()
	if !ok {
		return nil
	}
	e.gone.Store(true)
	if e.cancel != nil {
		e.cancel()
	}
	e.release()
	return nil
}

// releaseAll gives back every informer of the cache (a namespace removed
// from a multi-namespace cache): they say IsStopped, and the factory stops
// those no other cache holds.
func (c *namespaceCache) releaseAll() {
	c.mu.Lock()
	entries := c.entries
	c.entries = map[entryKey]*entry{}
	c.stopped = true
	c.mu.Unlock()
	for _, e := range entries {
		e.gone.Store(true)
		if e.cancel != nil {
			e.cancel()
		}
		e.release()
	}
}

// IndexField adds a field index, before or after the start: values are
// filed per namespace and across namespaces, as controller-runtime's
// field selectors look them up.
func (c *namespaceCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
	if err != nil {
		return err
	}
	return indexByField(inf, field, extract)
}

func indexByField(inf cache.Informer, field string, extract client.IndexerFunc) error {
	return inf.AddIndexers(toolscache.Indexers{fieldIndexName(field): func(raw any) ([]string, error) {
		obj, ok := raw.(client.Object)
		if !ok {
			return nil, fmt.Errorf("object of type %T is not an Object", raw)
		}
		ns := obj.GetNamespace()
		raws := extract(obj)
		vals := make([]string, 0, 2*len(raws))
		for _, v := range raws {
			vals = append(vals, namespacedKey(ns, v))
		}
		if ns != "" {
			for _, v := range raws {
				vals = append(vals, namespacedKey("", v))
			}
		}
		return vals, nil
	}})
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
