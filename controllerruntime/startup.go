package controllerruntime

import (
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kinformer/kinformer"
)

// KindStartup is how the informer of one kind of a cache NewCache made
// started, or is starting (kinformer.Informer.Startup): whether its first
// list is complete, and whether its handlers (the controllers' event
// handlers) have handled their initial pass.
type KindStartup struct {
	Kind schema.GroupVersionKind
	// Namespace is the namespace the informer watches; "" for all (or a
	// cluster-scoped kind).
	Namespace string
	kinformer.Startup
}

// Startup returns how each kind of c started: which are synced, and
// which still have handlers on their initial pass, with how long each
// took and how many objects it holds. false if c is not a cache of
// NewCache. (controller-runtime's WaitForCacheSync says only whether
// all synced; this cache also logs which kinds it gave up on, and why.)
func Startup(c cache.Cache) ([]KindStartup, bool) {
	r, ok := c.(startupReporter)
	if !ok {
		return nil, false
	}
	return r.kindStartups(), true
}

// startupReporter is a cache of this package that can say how its kinds
// started.
type startupReporter interface {
	kindStartups() []KindStartup
}

func (c *namespaceCache) kindStartups() []KindStartup {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]KindStartup, 0, len(c.entries))
	for k, e := range c.entries {
		s := KindStartup{Kind: k.gvk, Namespace: c.namespace}
		if e.startup != nil {
			s.Startup = e.startup()
		} else {
			s.Started, s.Synced, s.HandlersDone = true, e.sii.HasSynced(), e.sii.HasSynced()
		}
		out = append(out, s)
	}
	return out
}

func (m *multiNamespaceCache) kindStartups() []KindStartup {
	var out []KindStartup
	for _, c := range m.caches() {
		out = append(out, c.kindStartups()...)
	}
	if r, ok := m.cluster.(startupReporter); ok {
		out = append(out, r.kindStartups()...)
	}
	return out
}

func (d *byGVK) kindStartups() []KindStartup {
	var out []KindStartup
	for _, c := range d.all() {
		if r, ok := c.(startupReporter); ok {
			out = append(out, r.kindStartups()...)
		}
	}
	return out
}

func (c *factoryCache) kindStartups() []KindStartup {
	if r, ok := c.Cache.(startupReporter); ok {
		return r.kindStartups()
	}
	return nil
}

// Caches says what c, a cache of NewCache, caches: each informer's kind
// (as its resource), namespace or cluster-wide, selectors, projection,
// holding, objects and bytes (kinformer.Factory.Caches), including those
// a read started. false if c is not NewCache's.
func Caches(c cache.Cache) ([]kinformer.CacheInfo, bool) {
	fc, ok := c.(*factoryCache)
	if !ok {
		return nil, false
	}
	return fc.factory.Caches(), true
}
