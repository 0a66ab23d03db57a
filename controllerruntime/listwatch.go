package controllerruntime

import (
	"context"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// This file restates the ListWatch making of
// pkg/cache/internal/informers.go (controller-runtime v0.25.2), for
// informers of cache.Options.NewInformer only: the factory's informers
// list and watch through kinformer's own clients.

// listWatch is a client-go ListWatch of one kind in one namespace with
// selectors, for cache.Options.NewInformer: an informer of the caller's
// own (a test's fake, or clientgo.NewSharedIndexInformer) in place of the
// factory's. It lists and watches as controller-runtime's cache does.
func (c *namespaceCache) listWatch(k entryKey, mapping *meta.RESTMapping, namespace, label, field string) (*toolscache.ListWatch, error) {
	sh := c.sh
	apply := func(o *metav1.ListOptions, watching bool) {
		if label != "" {
			o.LabelSelector = label
		}
		if field != "" {
			o.FieldSelector = field
		}
		if watching {
			o.Watch = true
			o.AllowWatchBookmarks = true
		}
	}
	cfg := rest.CopyConfig(sh.cfg)
	switch k.form {
	case unstructuredForm:
		cfg.NegotiatedSerializer = nil
		dc, err := dynamic.NewForConfigAndClient(cfg, sh.httpClient)
		if err != nil {
			return nil, err
		}
		res := dc.Resource(mapping.Resource).Namespace(namespace)
		return &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				apply(&o, false)
				return res.List(ctx, o)
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				apply(&o, true)
				return res.Watch(ctx, o)
			},
		}, nil
	case metadataForm:
		cfg.NegotiatedSerializer = nil
		mc, err := metadata.NewForConfigAndClient(cfg, sh.httpClient)
		if err != nil {
			return nil, err
		}
		res := mc.Resource(mapping.Resource).Namespace(namespace)
		gvk := k.gvk
		return &toolscache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
				apply(&o, false)
				list, err := res.List(ctx, o)
				if list != nil {
					for i := range list.Items {
						list.Items[i].SetGroupVersionKind(gvk)
					}
				}
				return list, err
			},
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				apply(&o, true)
				w, err := res.Watch(ctx, o)
				if err != nil {
					return nil, err
				}
				return watch.Filter(w, func(e watch.Event) (watch.Event, bool) {
					if m, ok := e.Object.(*metav1.PartialObjectMetadata); ok {
						m.SetGroupVersionKind(gvk)
					}
					return e, true
				}), nil
			},
		}, nil
	}
	rc, err := apiutil.RESTClientForGVK(k.gvk, false, false, cfg, serializer.NewCodecFactory(sh.scheme), sh.httpClient)
	if err != nil {
		return nil, err
	}
	listObj, err := sh.scheme.New(k.gvk.GroupVersion().WithKind(k.gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	params := runtime.NewParameterCodec(sh.scheme)
	request := func(o *metav1.ListOptions) *rest.Request {
		r := rc.Get().Resource(mapping.Resource.Resource).VersionedParams(o, params)
		if namespace != "" {
			r = r.Namespace(namespace)
		}
		return r
	}
	return &toolscache.ListWatch{
		ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) {
			apply(&o, false)
			out := listObj.DeepCopyObject()
			if err := request(&o).Do(ctx).Into(out); err != nil {
				return nil, err
			}
			return out, nil
		},
		WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
			apply(&o, true)
			return request(&o).Watch(ctx)
		},
	}, nil
}
