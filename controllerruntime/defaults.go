package controllerruntime

import (
	"fmt"
	"maps"
	"slices"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"
)

// The defaulting below is controller-runtime v0.25.2's (pkg/cache/cache.go,
// cache.New): the same
// precedence, so that the same Options cache the same objects.

func defaultOpts(cfg *rest.Config, opts cache.Options) (cache.Options, error) {
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if opts.Scheme == nil {
		opts.Scheme = scheme.Scheme
	}
	if opts.HTTPClient == nil {
		hc, err := rest.HTTPClientFor(cfg)
		if err != nil {
			return opts, fmt.Errorf("could not create HTTP client from config: %w", err)
		}
		opts.HTTPClient = hc
	}
	if opts.Mapper == nil {
		m, err := apiutil.NewDynamicRESTMapper(cfg, opts.HTTPClient)
		if err != nil {
			return opts, fmt.Errorf("could not create RESTMapper from config: %w", err)
		}
		opts.Mapper = m
	}
	opts.ByObject = maps.Clone(opts.ByObject)
	opts.DefaultNamespaces = maps.Clone(opts.DefaultNamespaces)
	for obj, bo := range opts.ByObject {
		namespaced, err := apiutil.IsObjectNamespaced(obj, opts.Scheme, opts.Mapper)
		if err != nil {
			return opts, fmt.Errorf("failed to determine if %T is namespaced: %w", obj, err)
		}
		if !namespaced && bo.Namespaces != nil {
			return opts, fmt.Errorf("type %T is not namespaced, but its ByObject.Namespaces setting is not nil", obj)
		}
		if namespaced && bo.Namespaces == nil {
			bo.Namespaces = maps.Clone(opts.DefaultNamespaces)
		} else {
			bo.Namespaces = maps.Clone(bo.Namespaces)
		}
		for ns, c := range bo.Namespaces {
			c = defaultConfig(c, byObjectToConfig(bo))
			if nsDefaults, ok := opts.DefaultNamespaces[ns]; ok {
				c = defaultConfig(c, nsDefaults)
			}
			c = defaultConfig(c, defaultsToConfig(&opts))
			if ns == metav1.NamespaceAll {
				c.FieldSelector = fields.AndSelectors(appendIfNotNil(notInNamespaces(slices.Collect(maps.Keys(bo.Namespaces))), c.FieldSelector)...)
			}
			bo.Namespaces[ns] = c
		}
		if !namespaced || len(bo.Namespaces) == 0 {
			d := defaultConfig(byObjectToConfig(bo), defaultsToConfig(&opts))
			bo.Label, bo.Field, bo.Transform = d.LabelSelector, d.FieldSelector, d.Transform
			bo.UnsafeDisableDeepCopy, bo.EnableWatchBookmarks, bo.SyncPeriod = d.UnsafeDisableDeepCopy, d.EnableWatchBookmarks, d.SyncPeriod
		}
		opts.ByObject[obj] = bo
	}
	for ns, c := range opts.DefaultNamespaces {
		c = defaultConfig(c, defaultsToConfig(&opts))
		if ns == metav1.NamespaceAll {
			c.FieldSelector = fields.AndSelectors(appendIfNotNil(notInNamespaces(slices.Collect(maps.Keys(opts.DefaultNamespaces))), c.FieldSelector)...)
		}
		opts.DefaultNamespaces[ns] = c
	}
	return opts, nil
}

func defaultsToConfig(o *cache.Options) cache.Config {
	return cache.Config{
		LabelSelector:         o.DefaultLabelSelector,
		FieldSelector:         o.DefaultFieldSelector,
		Transform:             o.DefaultTransform,
		UnsafeDisableDeepCopy: o.DefaultUnsafeDisableDeepCopy,
		EnableWatchBookmarks:  o.DefaultEnableWatchBookmarks,
		SyncPeriod:            o.SyncPeriod,
	}
}

func byObjectToConfig(b cache.ByObject) cache.Config {
	return cache.Config{
		LabelSelector:         b.Label,
		FieldSelector:         b.Field,
		Transform:             b.Transform,
		UnsafeDisableDeepCopy: b.UnsafeDisableDeepCopy,
		EnableWatchBookmarks:  b.EnableWatchBookmarks,
		SyncPeriod:            b.SyncPeriod,
	}
}

func defaultConfig(c, from cache.Config) cache.Config {
	if c.LabelSelector == nil {
		c.LabelSelector = from.LabelSelector
	}
	if c.FieldSelector == nil {
		c.FieldSelector = from.FieldSelector
	}
	if c.Transform == nil {
		c.Transform = from.Transform
	}
	if c.UnsafeDisableDeepCopy == nil {
		c.UnsafeDisableDeepCopy = from.UnsafeDisableDeepCopy
	}
	if c.EnableWatchBookmarks == nil {
		c.EnableWatchBookmarks = from.EnableWatchBookmarks
	}
	if c.SyncPeriod == nil {
		c.SyncPeriod = from.SyncPeriod
	}
	return c
}

// notInNamespaces selects what is in none of namespaces: the
// AllNamespaces entry of a map that also names some.
func notInNamespaces(namespaces []string) []fields.Selector {
	slices.Sort(namespaces)
	var out []fields.Selector
	for _, ns := range namespaces {
		if ns != metav1.NamespaceAll {
			out = append(out, fields.OneTermNotEqualSelector("metadata.namespace", ns))
		}
	}
	return out
}

func appendIfNotNil(a []fields.Selector, b fields.Selector) []fields.Selector {
	if b != nil {
		return append(a, b)
	}
	return a
}

// syncPeriodOf is a config's handler resync, with controller-runtime's
// jitter (±10%) so that informers do not resync in step.
func syncPeriodOf(c cache.Config, jitter float64) time.Duration {
	d := ptr.Deref(c.SyncPeriod, defaultSyncPeriod)
	return time.Duration(float64(d) * (0.9 + jitter/5))
}
