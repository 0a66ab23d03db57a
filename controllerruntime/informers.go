package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// This file restates, from controller-runtime v0.25.2,
// pkg/cache/informer_cache.go (Get, List, GetInformer, IndexField and its
// index names) and pkg/cache/internal/informers.go (one map of informers
// per cache, Start, RemoveInformer, WaitForCacheSync), on a kinformer
// Factory that owns the informers' runs.

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
	// kinds, with Options.IfAllowed (a namespace of a multiNamespaceCache),
	// are the kinds whose informers it may make (multi_allowed.go); nil:
	// every kind.
	kinds     map[schema.GroupVersionKind]bool
	ctx       context.Context // Start's
	startWait chan struct{}   // closed by Start
	wg        sync.WaitGroup  // the informers' runs
}

func newNamespaceCache(sh *shared, c cache.Config, namespace string) *namespaceCache {
	return &namespaceCache{sh: sh, namespace: namespace, config: c, entries: map[entryKey]*entry{},
		transforms: map[entryKey]any{}, startWait: make(chan struct{})}
}

var _ cache.Cache = (*namespaceCache)(nil)

// get returns the entry of gvk in obj's form, making it unless
// failOnMissing, and waits for its sync if block and the cache runs.
// A read (Get, List) that makes it says so once (implicitly).
func (c *namespaceCache) get(ctx context.Context, gvk schema.GroupVersionKind, obj runtime.Object, failOnMissing, block, read bool) (bool, *entry, error) {
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
		e.replayMissed(ctx)
		if read {
			e.implicitly(k)
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

// startLocked runs e, if the cache runs it (own), until the cache's
// context ends or e is removed; the factory runs its own informers. c.mu
// must be held, and the cache started.
func (c *namespaceCache) startLocked(e *entry) {
	if c.stopped {
		return
	}
	if !e.own {
		e.logStart() // the factory's informer: the factory has started it
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
		args := []any{"kind", k.gvk.Kind, "group", k.gvk.Group, "namespace", c.namespace, "reason", why}
		if e.startup != nil {
			st := e.startup()
			args = append(args, "listing", st.ListTook.Round(time.Millisecond), "objects", st.Objects, "expected", st.Expected)
		}
		c.sh.log.Error("kinformer: WaitForCacheSync gave up before this kind synced", args...)
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
	started, e, err := c.get(ctx, gvk, out, c.sh.failOnMissing, true, true)
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
	started, e, err := c.get(ctx, gvk, obj, c.sh.failOnMissing, true, true)
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
	_, e, err := c.get(ctx, gvk, obj, false, blockOf(opts), false)
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
	_, e, err := c.get(ctx, gvk, obj, false, blockOf(opts), false)
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

// removeKind is RemoveInformer for every form of gvk (a kind a namespace
// may no longer hold, Options.IfAllowed).
func (c *namespaceCache) removeKind(gvk schema.GroupVersionKind) {
	c.mu.Lock()
	var gone []*entry
	for k, e := range c.entries {
		if k.gvk == gvk {
			gone = append(gone, e)
			delete(c.entries, k)
		}
	}
	c.mu.Unlock()
	for _, e := range gone {
		e.gone.Store(true)
		if e.cancel != nil {
			e.cancel()
		}
		e.release()
	}
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
