package controllerruntime

import (
	"context"
	"maps"
	"slices"
	"strings"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// byGVK sends each kind to its ByObject cache, or to the default one, as
// controller-runtime v0.25.2's pkg/cache/delegating_by_gvk_cache.go does.
type byGVK struct {
	scheme   *runtime.Scheme
	caches   map[schema.GroupVersionKind]cache.Cache
	fallback cache.Cache
}

func (d *byGVK) forObject(o runtime.Object) (cache.Cache, error) {
	gvk, err := apiutil.GVKForObject(o, d.scheme)
	if err != nil {
		return nil, err
	}
	gvk.Kind = strings.TrimSuffix(gvk.Kind, "List")
	return d.forGVK(gvk), nil
}

func (d *byGVK) forGVK(gvk schema.GroupVersionKind) cache.Cache {
	if c, ok := d.caches[gvk]; ok {
		return c
	}
	return d.fallback
}

func (d *byGVK) all() []cache.Cache {
	return append(slices.Collect(maps.Values(d.caches)), d.fallback)
}

func (d *byGVK) Get(ctx context.Context, key client.ObjectKey, obj client.Object, opts ...client.GetOption) error {
	gvk, err := apiutil.GVKForObject(obj, d.scheme)
	if err != nil {
		return err
	}
	return getKind(ctx, d.forGVK(gvk), gvk, key, obj, opts...)
}

func (d *byGVK) List(ctx context.Context, list client.ObjectList, opts ...client.ListOption) error {
	c, err := d.forObject(list)
	if err != nil {
		return err
	}
	return c.List(ctx, list, opts...)
}

func (d *byGVK) GetInformer(ctx context.Context, obj client.Object, opts ...cache.InformerGetOption) (cache.Informer, error) {
	c, err := d.forObject(obj)
	if err != nil {
		return nil, err
	}
	return c.GetInformer(ctx, obj, opts...)
}

func (d *byGVK) GetInformerForKind(ctx context.Context, gvk schema.GroupVersionKind, opts ...cache.InformerGetOption) (cache.Informer, error) {
	return d.forGVK(gvk).GetInformerForKind(ctx, gvk, opts...)
}

func (d *byGVK) RemoveInformer(ctx context.Context, obj client.Object) error {
	c, err := d.forObject(obj)
	if err != nil {
		return err
	}
	return c.RemoveInformer(ctx, obj)
}

func (d *byGVK) IndexField(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	c, err := d.forObject(obj)
	if err != nil {
		return err
	}
	return c.IndexField(ctx, obj, field, extract)
}

func (d *byGVK) Start(ctx context.Context) error {
	g, gctx := errgroup.WithContext(ctx)
	for _, c := range d.all() {
		g.Go(func() error { return c.Start(gctx) })
	}
	return ignoreCanceled(g.Wait())
}

func (d *byGVK) WaitForCacheSync(ctx context.Context) bool {
	synced := true
	for _, c := range d.all() {
		if !c.WaitForCacheSync(ctx) {
			synced = false
		}
	}
	return synced
}
