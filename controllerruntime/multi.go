package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"sync"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// This file restates pkg/cache/multi_namespace_cache.go of
// controller-runtime v0.25.2: a cache per namespace, and one for
// cluster-scoped objects. What upstream has not, namespaces that change
// while the cache runs, is kinformer's own, in multi_change.go.

// clusterScope names the informer of a cluster-scoped kind in a
// multiInformer.
const clusterScope = "_cluster-scope"

// multiNamespaceCache is a namespace cache per namespace, and one for
// cluster-scoped kinds (nil when given no configuration for them: a
// ByObject with namespaces): controller-runtime's multiNamespaceCache.
//
// Its namespaces may change while it runs (addNamespace, removeNamespace;
// kcr's AddNamespace and the like): a namespace added gets a namespace
// cache with the template configuration, the kinds and indexes of the
// others, and each handler of the informers handed out (multiInformer); one
// removed gives those handlers OnDelete for each of its objects, then its
// informers are released.
type multiNamespaceCache struct {
	sh       *shared
	cluster  cache.Cache
	template cache.Config // a namespace added at run time

	mu   sync.RWMutex // guards everything below
	byNS map[string]*namespaceCache
	// informers are the multiInformers handed out, per kind: a namespace
	// added joins them.
	informers map[entryKey]*multiInformer
	// indexes are the IndexField calls so far, made again on a namespace
	// added.
	indexes []fieldIndex
	ctx     context.Context               // Start's; nil before
	stopped bool                          // Start has returned, or is returning
	stops   map[string]context.CancelFunc // the namespace caches' runs
	running sync.WaitGroup                // those runs, and the releases of those removed
	// leaving holds, per namespace removed, a channel closed once its
	// handlers have handled its leave and its informers are released: it
	// joins again only after.
	leaving map[string]chan struct{}
	// With Options.IfAllowed (multi_allowed.go): gated holds the kinds
	// whose gate is made, allowed the namespaces each may be held in.
	// kindsLeaving is leaving's for a kind revoked in a namespace.
	// kindGen counts each kind's changes of where it is held.
	gated        map[schema.GroupVersionKind]bool
	allowed      map[schema.GroupVersionKind]map[string]bool
	kindsLeaving map[leavingKind]chan struct{}
	kindGen      map[schema.GroupVersionKind]uint64

	gates gates // the kinds' gates, with their own lock (outside mu)
}

// fieldIndex is one IndexField call.
type fieldIndex struct {
	obj     client.Object
	field   string
	extract client.IndexerFunc
}

func newMultiNamespaceCache(sh *shared, namespaces map[string]cache.Config, global *cache.Config, template cache.Config) *multiNamespaceCache {
	m := &multiNamespaceCache{sh: sh, byNS: make(map[string]*namespaceCache, len(namespaces)), template: template,
		informers: map[entryKey]*multiInformer{}, stops: map[string]context.CancelFunc{},
		gated: map[schema.GroupVersionKind]bool{}, allowed: map[schema.GroupVersionKind]map[string]bool{}, kindsLeaving: map[leavingKind]chan struct{}{},
		kindGen: map[schema.GroupVersionKind]uint64{}}
	for ns, c := range namespaces {
		m.byNS[ns] = m.newNamespaceCache(c, ns)
	}
	if global != nil {
		m.cluster = newNamespaceCache(sh, *global, metav1.NamespaceAll)
	}
	return m
}

// caches returns the namespace caches now.
func (m *multiNamespaceCache) caches() map[string]*namespaceCache {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return maps.Clone(m.byNS)
}

// cacheOf returns the cache of namespace, or of all namespaces but the
// others (DefaultNamespaces[""]).
func (m *multiNamespaceCache) cacheOf(namespace string) (*namespaceCache, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	c, ok := m.byNS[namespace]
	if !ok {
		c, ok = m.byNS[metav1.NamespaceAll]
	}
	return c, ok
}

var _ cache.Cache = (*multiNamespaceCache)(nil)

func (m *multiNamespaceCache) namespaced(obj runtime.Object) (bool, error) {
	return apiutil.IsObjectNamespaced(obj, m.sh.scheme, m.sh.mapper)
}

// clusterCache is the cache of cluster-scoped kinds, or an error saying
// there is none.
func (m *multiNamespaceCache) clusterCache(what string) (cache.Cache, error) {
	if m.cluster == nil {
		return nil, fmt.Errorf("%s: the cache has no configuration for cluster-scoped objects", what)
	}
	return m.cluster, nil
}

func (m *multiNamespaceCache) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	ns, err := m.namespaced(obj)
	if err != nil {
		return nil, err
	}
	if !ns {
		cc, err := m.clusterCache("GetInformer")
		if err != nil {
			return nil, err
		}
		inf, err := cc.GetInformer(ctx, obj, opts...)
		if err != nil {
			return nil, err
		}
		return newMultiInformer(map[string]cache.Informer{clusterScope: inf}), nil
	}
	gvk, err := apiutil.GVKForObject(obj, m.sh.scheme)
	if err != nil {
		return nil, err
	}
	return m.informer(entryKey{gvk, formOf(obj)}, obj, func(c *namespaceCache) (cache.Informer, error) {
		return c.GetInformer(ctx, obj, opts...)
	})
}

// informer returns the multiInformer of kind k, made with get from every
// namespace cache, and kept: namespaces added later join it.
func (m *multiNamespaceCache) informer(k entryKey, example client.Object, get func(*namespaceCache) (cache.Informer, error)) (cache.Informer, error) {
	// Without m.mu while get waits for a sync (BlockUntilSynced): a
	// namespace added (or allowed) meanwhile joins the informer if it was
	// kept by then, else is met below.
	// With IfAllowed, the kind may also be revoked and allowed again in a
	// namespace meanwhile (its informer released, a new one made): the
	// kind's generation (kindGen) says so.
	if m.ifAllowed() {
		m.gate(k.gvk)
	}
outer:
	for {
		byNS, gen := m.allowedNow(k.gvk)
		infs := make(map[string]cache.Informer, len(byNS))
		for name, c := range byNS {
			inf, err := get(c)
			if errors.Is(err, errNotAllowed) {
				continue outer // revoked there meanwhile
			}
			if err != nil {
				return nil, err
			}
			infs[name] = inf
		}
		m.mu.Lock()
		if mi, ok := m.informers[k]; ok {
			m.mu.Unlock()
			return mi, nil
		}
		now := m.byNS
		if m.ifAllowed() {
			now = m.allowedLocked(k.gvk)
		}
		if !maps.Equal(byNS, now) || m.kindGen[k.gvk] != gen {
			m.mu.Unlock()
			continue // the namespaces changed meanwhile
		}
		mi := newMultiInformer(infs)
		mi.example = example
		m.informers[k] = mi
		m.mu.Unlock()
		return mi, nil
	}
}

func (m *multiNamespaceCache) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	ns, err := apiutil.IsGVKNamespaced(gvk, m.sh.mapper)
	if err != nil {
		return nil, err
	}
	if !ns {
		cc, err := m.clusterCache("GetInformerForKind")
		if err != nil {
			return nil, err
		}
		inf, err := cc.GetInformerForKind(ctx, gvk, opts...)
		if err != nil {
			return nil, err
		}
		return newMultiInformer(map[string]cache.Informer{clusterScope: inf}), nil
	}
	obj, err := m.sh.scheme.New(gvk)
	if err != nil {
		// As controller-runtime: a kind without a Go type is read as
		// unstructured.
		u := &unstructured.Unstructured{}
		u.SetGroupVersionKind(gvk)
		obj = u
	}
	cobj, ok := obj.(client.Object)
	if !ok {
		return nil, fmt.Errorf("%v is not a client.Object", gvk)
	}
	return m.informer(entryKey{gvk, formOf(cobj)}, cobj, func(c *namespaceCache) (cache.Informer, error) {
		return c.GetInformerForKind(ctx, gvk, opts...)
	})
}

func (m *multiNamespaceCache) RemoveInformer(ctx context.Context, obj client.Object) error {
	ns, err := m.namespaced(obj)
	if err != nil {
		return err
	}
	if !ns {
		cc, err := m.clusterCache("RemoveInformer")
		if err != nil {
			return err
		}
		return cc.RemoveInformer(ctx, obj)
	}
	if gvk, err := apiutil.GVKForObject(obj, m.sh.scheme); err == nil {
		m.mu.Lock()
		delete(m.informers, entryKey{gvk, formOf(obj)})
		m.mu.Unlock()
	}
	for _, c := range m.caches() {
		if err := c.RemoveInformer(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

func (m *multiNamespaceCache) Start(ctx context.Context) error {
	m.mu.Lock()
	if m.ctx != nil {
		m.mu.Unlock()
		return errors.New("informer already started") //nolint:staticcheck // controller-runtime's message
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()
	m.ctx = runCtx
	for name, c := range m.byNS {
		m.startLocked(name, c)
	}
	if m.ifAllowed() {
		m.running.Go(func() { m.recheckGates(runCtx) })
	}
	m.mu.Unlock()
	var err error
	if m.cluster != nil {
		err = m.cluster.Start(runCtx)
	} else {
		<-runCtx.Done()
	}
	cancel() // the cluster cache failed, or ctx ended: every namespace stops
	m.mu.Lock()
	m.stopped = true
	m.mu.Unlock()
	m.running.Wait()
	return ignoreCanceled(err)
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (m *multiNamespaceCache) WaitForCacheSync(ctx context.Context) bool {
	synced := true
	for _, c := range m.caches() {
		if !c.WaitForCacheSync(ctx) {
			synced = false
		}
	}
	if m.cluster != nil && !m.cluster.WaitForCacheSync(ctx) {
		synced = false
	}
	return synced
}

func (m *multiNamespaceCache) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	ns, err := m.namespaced(obj)
	if err != nil {
		return err
	}
	if !ns {
		cc, err := m.clusterCache("IndexField")
		if err != nil {
			return err
		}
		return cc.IndexField(ctx, obj, field, extract)
	}
	if m.ifAllowed() {
		return m.indexAllowed(ctx, obj, field, extract)
	}
	m.mu.Lock()
	m.indexes = append(m.indexes, fieldIndex{obj, field, extract})
	m.mu.Unlock()
	for _, c := range m.caches() {
		if err := c.IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
	}
	return nil
}

func (m *multiNamespaceCache) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, m.sh.scheme)
	if err != nil {
		return err
	}
	return m.getKind(ctx, gvk, key, obj, opts...)
}

func (m *multiNamespaceCache) getKind(ctx context.Context, gvk schema.GroupVersionKind, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	ns, err := apiutil.IsGVKNamespaced(gvk, m.sh.mapper)
	if err != nil {
		return err
	}
	if !ns {
		cc, err := m.clusterCache("Get")
		if err != nil {
			return err
		}
		return getKind(ctx, cc, gvk, key, obj, opts...)
	}
	c, ok := m.cacheOf(key.Namespace)
	if !ok {
		return fmt.Errorf("unable to get: %v because of unknown namespace for the cache", key)
	}
	if !m.allowedIn(gvk, key.Namespace) {
		return fmt.Errorf("unable to get: %v because of unknown namespace for the cache: %w", key, errNotAllowed)
	}
	return getKind(ctx, c, gvk, key, obj, opts...)
}

func (m *multiNamespaceCache) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	var o client.ListOptions
	o.ApplyOptions(opts)
	if o.Continue != "" {
		return fmt.Errorf("continue list option is not supported by the cache")
	}
	ns, err := m.namespaced(list)
	if err != nil {
		return err
	}
	if !ns {
		cc, err := m.clusterCache("List")
		if err != nil {
			return err
		}
		return cc.List(ctx, list, opts...)
	}
	var gvk schema.GroupVersionKind
	if m.ifAllowed() {
		if gvk, err = apiutil.GVKForObject(list, m.sh.scheme); err != nil {
			return err
		}
		gvk.Kind = trimList(gvk.Kind)
	}
	if o.Namespace != metav1.NamespaceAll {
		c, ok := m.cacheOf(o.Namespace)
		if !ok {
			return fmt.Errorf("unable to list: %v because of unknown namespace for the cache", o.Namespace)
		}
		if !m.allowedIn(gvk, o.Namespace) {
			return fmt.Errorf("unable to list: %v because of unknown namespace for the cache: %w", o.Namespace, errNotAllowed)
		}
		return c.List(ctx, list, opts...)
	}
	acc, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	var all []runtime.Object
	var rv string
	for _, c := range m.allowedCaches(gvk) {
		part := list.DeepCopyObject().(client.ObjectList)
		if err := c.List(ctx, part, &o); err != nil {
			return err
		}
		items, err := meta.ExtractList(part)
		if err != nil {
			return err
		}
		pacc, err := meta.ListAccessor(part)
		if err != nil {
			return fmt.Errorf("object: %T must be a list type", list)
		}
		all = append(all, items...)
		rv = pacc.GetResourceVersion()
		if o.Limit > 0 {
			if o.Limit -= int64(len(items)); o.Limit == 0 {
				break
			}
		}
	}
	acc.SetResourceVersion(rv)
	if err := meta.SetList(list, all); err != nil {
		return err
	}
	list.SetContinue("continue-not-supported")
	return nil
}
