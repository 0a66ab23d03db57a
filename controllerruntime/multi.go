package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// This file restates pkg/cache/multi_namespace_cache.go of
// controller-runtime v0.25.2: a cache per namespace, and one for
// cluster-scoped objects.

// clusterScope names the informer of a cluster-scoped kind in a
// multiInformer.
const clusterScope = "_cluster-scope"

// multiNamespaceCache is a namespace cache per namespace, and one for
// cluster-scoped kinds (nil when given no configuration for them: a
// ByObject with namespaces): controller-runtime's multiNamespaceCache.
type multiNamespaceCache struct {
	sh      *shared
	byNS    map[string]cache.Cache
	cluster cache.Cache
}

func newMultiNamespaceCache(sh *shared, namespaces map[string]cache.Config, global *cache.Config) *multiNamespaceCache {
	m := &multiNamespaceCache{sh: sh, byNS: make(map[string]cache.Cache, len(namespaces))}
	for ns, c := range namespaces {
		m.byNS[ns] = newNamespaceCache(sh, c, ns)
	}
	if global != nil {
		m.cluster = newNamespaceCache(sh, *global, metav1.NamespaceAll)
	}
	return m
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
	infs := map[string]cache.Informer{}
	for name, c := range m.byNS {
		inf, err := c.GetInformer(ctx, obj, opts...)
		if err != nil {
			return nil, err
		}
		infs[name] = inf
	}
	return newMultiInformer(infs), nil
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
	infs := map[string]cache.Informer{}
	for name, c := range m.byNS {
		inf, err := c.GetInformerForKind(ctx, gvk, opts...)
		if err != nil {
			return nil, err
		}
		infs[name] = inf
	}
	return newMultiInformer(infs), nil
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
	for _, c := range m.byNS {
		if err := c.RemoveInformer(ctx, obj); err != nil {
			return err
		}
	}
	return nil
}

func (m *multiNamespaceCache) Start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	if m.cluster != nil {
		g.Go(func() error { return m.cluster.Start(gctx) })
	}
	for name, c := range m.byNS {
		g.Go(func() error {
			if err := c.Start(gctx); err != nil {
				return fmt.Errorf("failed to start cache for namespace %s: %w", name, err)
			}
			return nil
		})
	}
	return ignoreCanceled(g.Wait())
}

func ignoreCanceled(err error) error {
	if errors.Is(err, context.Canceled) {
		return nil
	}
	return err
}

func (m *multiNamespaceCache) WaitForCacheSync(ctx context.Context) bool {
	synced := true
	for _, c := range m.byNS {
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
	for _, c := range m.byNS {
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
	c, ok := m.byNS[key.Namespace]
	if !ok {
		if all, ok := m.byNS[metav1.NamespaceAll]; ok {
			return getKind(ctx, all, gvk, key, obj, opts...)
		}
		return fmt.Errorf("unable to get: %v because of unknown namespace for the cache", key)
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
	if o.Namespace != metav1.NamespaceAll {
		c, ok := m.byNS[o.Namespace]
		if !ok {
			if all, ok := m.byNS[metav1.NamespaceAll]; ok {
				return all.List(ctx, list, opts...)
			}
			return fmt.Errorf("unable to list: %v because of unknown namespace for the cache", o.Namespace)
		}
		return c.List(ctx, list, opts...)
	}
	acc, err := meta.ListAccessor(list)
	if err != nil {
		return err
	}
	var all []runtime.Object
	var rv string
	for _, c := range m.byNS {
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

// multiInformer is one kind's informers of several namespaces as one.
type multiInformer struct {
	infs map[string]cache.Informer
	once sync.Once
	done chan struct{}
}

func newMultiInformer(infs map[string]cache.Informer) *multiInformer {
	return &multiInformer{infs: infs, done: make(chan struct{})}
}

var _ cache.Informer = (*multiInformer)(nil)

func (i *multiInformer) add(fn func(cache.Informer) (toolscache.ResourceEventHandlerRegistration, error)) (toolscache.ResourceEventHandlerRegistration, error) {
	regs := make(map[string]toolscache.ResourceEventHandlerRegistration, len(i.infs))
	for name, inf := range i.infs {
		r, err := fn(inf)
		if err != nil {
			return nil, err
		}
		regs[name] = r
	}
	return &multiRegistration{regs: regs, done: make(chan struct{})}, nil
}

func (i *multiInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandler(h)
	})
}

func (i *multiInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithResyncPeriod(h, d)
	})
}

func (i *multiInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.add(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithOptions(h, o)
	})
}

func (i *multiInformer) RemoveEventHandler(h toolscache.ResourceEventHandlerRegistration) error {
	r, ok := h.(*multiRegistration)
	if !ok {
		return fmt.Errorf("registration is not a registration returned by multiNamespaceInformer")
	}
	for name, inf := range i.infs {
		if reg, ok := r.regs[name]; ok {
			if err := inf.RemoveEventHandler(reg); err != nil {
				return err
			}
		}
	}
	return nil
}

func (i *multiInformer) AddIndexers(indexers toolscache.Indexers) error {
	for _, inf := range i.infs {
		if err := inf.AddIndexers(indexers); err != nil {
			return err
		}
	}
	return nil
}

func (i *multiInformer) HasSynced() bool {
	for _, inf := range i.infs {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (i *multiInformer) HasSyncedChecker() toolscache.DoneChecker { return i }

func (i *multiInformer) Name() string {
	names := make([]string, 0, len(i.infs))
	for ns, inf := range i.infs {
		names = append(names, fmt.Sprintf("%s: %s", ns, inf.HasSyncedChecker().Name()))
	}
	return strings.Join(names, ", ")
}

// Done is closed once every namespace's informer has synced. The goroutine
// that closes it starts on the first call, and ends once they all have.
func (i *multiInformer) Done() <-chan struct{} {
	i.once.Do(func() {
		chs := make([]<-chan struct{}, 0, len(i.infs))
		for _, inf := range i.infs {
			chs = append(chs, inf.HasSyncedChecker().Done())
		}
		go allDone(chs, i.done)
	})
	return i.done
}

func (i *multiInformer) IsStopped() bool {
	for _, inf := range i.infs {
		if !inf.IsStopped() {
			return false
		}
	}
	return true
}

// allDone closes done once every channel of chs is closed.
func allDone(chs []<-chan struct{}, done chan struct{}) {
	for _, ch := range chs {
		<-ch
	}
	close(done)
}

// multiRegistration is a handler's registrations with several informers.
type multiRegistration struct {
	regs map[string]toolscache.ResourceEventHandlerRegistration
	once sync.Once
	done chan struct{}
}

func (r *multiRegistration) HasSynced() bool {
	for _, reg := range r.regs {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (r *multiRegistration) HasSyncedChecker() toolscache.DoneChecker { return r }

func (r *multiRegistration) Name() string {
	names := make([]string, 0, len(r.regs))
	for ns, reg := range r.regs {
		names = append(names, fmt.Sprintf("%s: %s", ns, reg.HasSyncedChecker().Name()))
	}
	return strings.Join(names, ", ")
}

func (r *multiRegistration) Done() <-chan struct{} {
	r.once.Do(func() {
		chs := make([]<-chan struct{}, 0, len(r.regs))
		for _, reg := range r.regs {
			chs = append(chs, reg.HasSyncedChecker().Done())
		}
		go allDone(chs, r.done)
	})
	return r.done
}
