package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kinformer/kinformer/internal/apiclient"
	"github.com/kinformer/kinformer/internal/nsmember"
)

// kinformer's own, not in controller-runtime: with Options.IfAllowed, a
// multiNamespaceCache holds each kind only in the namespaces where the
// client may list and watch it, as SelfSubjectAccessReviews say. Each kind
// has a gate, an nsmember.Set (the access reviewer of kinformer's views)
// whose candidates are the cache's namespaces and whose members are those
// allowed: a member gets the kind's informer (its indexes, and a place in
// the multiInformers handed out); a namespace refused has none, and Get
// and List of the kind there fail as for a namespace the cache does not
// hold. The gates are reviewed again every Options.Recheck while the cache
// runs: a namespace granted joins (the handlers get OnAdd for its
// objects), one revoked leaves (OnDelete for each, then its informer is
// released).
//
// Locks, outermost first: the cache's namespaceSet, gatesMu, a gate's,
// m.mu.

// gates are the gates of a multiNamespaceCache, one per kind, made on
// first use.
type gates struct {
	mu     sync.Mutex // gatesMu: guards byKind; held while candidates change
	byKind map[schema.GroupVersionKind]*nsmember.Set
}

// reviewer returns, for Options.IfAllowed, the review of one kind in one
// namespace, through a dynamic client of cfg.
func reviewer(sh *shared) (func(context.Context, schema.GroupVersionKind, string) (bool, string, error), error) {
	dyn, err := dynamic.NewForConfigAndClient(sh.cfg, sh.httpClient)
	if err != nil {
		return nil, fmt.Errorf("kcr: Options.IfAllowed: %w", err)
	}
	return func(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (bool, string, error) {
		mapping, err := sh.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
		if err != nil {
			return false, "", err
		}
		return apiclient.MayListAndWatch(ctx, dyn, mapping.Resource, namespace)
	}, nil
}

// ifAllowed reports whether the cache holds each kind only where allowed.
func (m *multiNamespaceCache) ifAllowed() bool { return m.sh.review != nil }

// gate makes gvk's gate on first use, with the cache's namespaces as
// candidates, and returns once they have been reviewed.
func (m *multiNamespaceCache) gate(gvk schema.GroupVersionKind) {
	m.mu.RLock()
	ready := m.gated[gvk]
	m.mu.RUnlock()
	if ready {
		return
	}
	m.gates.mu.Lock()
	defer m.gates.mu.Unlock()
	if _, ok := m.gates.byKind[gvk]; ok {
		return
	}
	resource := gvk.Kind
	if mapping, err := m.sh.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		resource = mapping.Resource.GroupResource().String()
	}
	set := nsmember.New(nsmember.Config{
		Apply: func(ctx context.Context, namespace string, in bool) error {
			return m.allow(ctx, gvk, namespace, in)
		},
		Review: func(ctx context.Context, namespace string) (bool, string, error) {
			return m.sh.review(ctx, gvk, namespace)
		},
		Recheck:  m.sh.recheck,
		Driven:   true, // by m.recheckGates, while the cache runs
		Log:      m.sh.log,
		Resource: resource,
		Holder:   "the cache",
	})
	if m.gates.byKind == nil {
		m.gates.byKind = map[schema.GroupVersionKind]*nsmember.Set{}
	}
	m.gates.byKind[gvk] = set
	for _, ns := range m.namespaces() {
		set.Select(ns, true)
	}
	m.mu.Lock()
	m.gated[gvk] = true
	m.mu.Unlock()
}

// candidate makes namespace's membership of the cache known to every
// gate, which reviews it (in) or lets it go: after a namespace is added
// or removed.
func (m *multiNamespaceCache) candidate(namespace string) {
	m.gates.mu.Lock()
	defer m.gates.mu.Unlock()
	m.mu.RLock()
	_, in := m.byNS[namespace]
	m.mu.RUnlock()
	for _, g := range m.gates.byKind {
		g.Select(namespace, in)
	}
}

// allowedIn reports whether gvk may be held in namespace: always, unless
// the cache is gated.
func (m *multiNamespaceCache) allowedIn(gvk schema.GroupVersionKind, namespace string) bool {
	if !m.ifAllowed() {
		return true
	}
	m.gate(gvk)
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.allowed[gvk][namespace]
}

// allowedCaches returns the namespace caches that may hold gvk.
func (m *multiNamespaceCache) allowedCaches(gvk schema.GroupVersionKind) map[string]*namespaceCache {
	if !m.ifAllowed() {
		return m.caches()
	}
	m.gate(gvk)
	m.mu.RLock()
	defer m.mu.RUnlock()
	return m.allowedLocked(gvk)
}

// allowedLocked is allowedCaches with m.mu held, for a gated cache.
func (m *multiNamespaceCache) allowedLocked(gvk schema.GroupVersionKind) map[string]*namespaceCache {
	out := make(map[string]*namespaceCache, len(m.byNS))
	for ns, c := range m.byNS {
		if m.allowed[gvk][ns] {
			out[ns] = c
		}
	}
	return out
}

// allow makes gvk held in namespace (in: its indexes added, its informer
// joining the multiInformers handed out) or not (its handlers told of
// the leave, after which its informers are released): a gate's Apply,
// with the gate's lock held.
func (m *multiNamespaceCache) allow(ctx context.Context, gvk schema.GroupVersionKind, namespace string, in bool) error {
	lk := leavingKind{gvk, namespace}
	if in {
		m.mu.RLock()
		left := m.kindsLeaving[lk]
		m.mu.RUnlock()
		if left != nil {
			// Back before its leave was handled: after it, so that no
			// handler gets an object's OnAdd before its OnDelete.
			select {
			case <-left:
			case <-ctx.Done():
				return ctx.Err()
			}
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.allowed[gvk] == nil {
		m.allowed[gvk] = map[string]bool{}
	}
	c := m.byNS[namespace]
	if in {
		if c != nil {
			if err := m.holdLocked(ctx, c, gvk, namespace); err != nil {
				c.removeKind(gvk)
				return err
			}
		}
		m.allowed[gvk][namespace] = true
		return nil
	}
	delete(m.allowed[gvk], namespace)
	if c == nil {
		return nil
	}
	if m.ctx == nil || m.stopped {
		// Not running: no handler runs to be told; let go at once.
		for k, mi := range m.informers {
			if k.gvk == gvk {
				mi.drop(namespace)
			}
		}
		c.removeKind(gvk)
		return nil
	}
	var left []<-chan struct{}
	for k, mi := range m.informers {
		if k.gvk == gvk {
			left = append(left, mi.leave(namespace, m.sh.log)...)
		}
	}
	done := m.ctx.Done()
	released := make(chan struct{})
	m.kindsLeaving[lk] = released
	m.running.Go(func() {
		defer close(released)
		for _, ch := range left {
			select {
			case <-ch:
			case <-done: // stopping: no one waits for the handlers
			}
		}
		c.removeKind(gvk)
		m.mu.Lock()
		if m.kindsLeaving[lk] == released {
			delete(m.kindsLeaving, lk)
		}
		m.mu.Unlock()
	})
	return nil
}

// leavingKind is a kind leaving a namespace (multiNamespaceCache.kindsLeaving).
type leavingKind struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// holdLocked adds gvk's indexes to namespace's cache c, and its informer
// to the multiInformers of gvk handed out. m.mu must be held.
func (m *multiNamespaceCache) holdLocked(ctx context.Context, c *namespaceCache, gvk schema.GroupVersionKind, namespace string) error {
	for _, ix := range m.indexes {
		if k, err := apiutil.GVKForObject(ix.obj, m.sh.scheme); err != nil || k != gvk {
			continue
		}
		if err := c.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return err
		}
	}
	var done []*multiInformer
	for k, mi := range m.informers {
		if k.gvk != gvk {
			continue
		}
		inf, err := c.GetInformer(ctx, mi.example, cache.BlockUntilSynced(false))
		if err == nil {
			err = mi.join(namespace, inf)
		}
		if err != nil {
			for _, d := range done {
				d.drop(namespace)
			}
			return err
		}
		done = append(done, mi)
	}
	return nil
}

// recheckGates reviews every gate again each Options.Recheck until ctx
// ends, then closes them: Start's, for a cache with Options.IfAllowed.
func (m *multiNamespaceCache) recheckGates(ctx context.Context) {
	t := time.NewTicker(m.sh.recheck)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			m.gates.mu.Lock()
			sets := slices.Collect(maps.Values(m.gates.byKind))
			m.gates.mu.Unlock()
			for _, set := range sets {
				set.Close(nil)
			}
			return
		case <-t.C:
		}
		m.gates.mu.Lock()
		sets := slices.Collect(maps.Values(m.gates.byKind))
		m.gates.mu.Unlock()
		for _, set := range sets {
			set.Recheck()
		}
	}
}

// errNotAllowed is wrapped by the errors of Get and List of a kind in a
// namespace the client may not read it in.
var errNotAllowed = errors.New("the client may not list and watch it there (Options.IfAllowed)")
