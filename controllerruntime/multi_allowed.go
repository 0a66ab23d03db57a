package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
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
// Locks, outermost first: the cache's namespaceSet, a gate's, m.mu;
// gatesMu guards the gates' map alone.

// reviewHook, if set (by tests), is every cache's review instead of
// SelfSubjectAccessReviews.
var reviewHook atomic.Pointer[func(context.Context, schema.GroupVersionKind, string) (bool, string, error)]

// gates are the gates of a multiNamespaceCache, one per kind, made on
// first use.
type gates struct {
	mu     sync.Mutex // gatesMu: guards byKind
	byKind map[schema.GroupVersionKind]*kindGate
}

// kindGate is one kind's gate.
type kindGate struct {
	set   *nsmember.Set
	ready chan struct{} // closed once the namespaces at its making are reviewed
}

// reviewer returns, for Options.IfAllowed, the review of one kind in one
// namespace, through a dynamic client of cfg.
func reviewer(sh *shared) (func(context.Context, schema.GroupVersionKind, string) (bool, string, error), error) {
	if h := reviewHook.Load(); h != nil {
		return *h, nil
	}
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
	if g, ok := m.gates.byKind[gvk]; ok {
		m.gates.mu.Unlock()
		<-g.ready // made by another caller, reviewing
		return
	}
	resource := gvk.Kind
	if mapping, err := m.sh.mapper.RESTMapping(gvk.GroupKind(), gvk.Version); err == nil {
		resource = mapping.Resource.GroupResource().String()
	}
	g := &kindGate{ready: make(chan struct{}), set: nsmember.New(nsmember.Config{
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
	})}
	if m.gates.byKind == nil {
		m.gates.byKind = map[schema.GroupVersionKind]*kindGate{}
	}
	m.gates.byKind[gvk] = g
	m.gates.mu.Unlock()
	// Reviewed without gatesMu: the first use of another kind, and the
	// namespaces' changes (candidate), go on meanwhile; SelectNow asks
	// whether each namespace is the cache's under the gate's lock, so
	// that a namespace candidate changes meanwhile ends as it is.
	for _, ns := range m.namespaces() {
		g.set.SelectNow(ns, func() bool { return m.has(ns) })
	}
	m.mu.Lock()
	m.gated[gvk] = true
	m.mu.Unlock()
	close(g.ready)
}

// has reports whether namespace is one of the cache's.
func (m *multiNamespaceCache) has(namespace string) bool {
	m.mu.RLock()
	defer m.mu.RUnlock()
	_, ok := m.byNS[namespace]
	return ok
}

// newNamespaceCache returns the cache of one of m's namespaces: with
// IfAllowed, it makes the informers only of the kinds allowed there.
func (m *multiNamespaceCache) newNamespaceCache(c cache.Config, namespace string) *namespaceCache {
	nc := newNamespaceCache(m.sh, c, namespace)
	if m.ifAllowed() {
		nc.kinds = map[schema.GroupVersionKind]bool{}
	}
	return nc
}

// allowKind lets c make the informers of gvk, or not.
func (c *namespaceCache) allowKind(gvk schema.GroupVersionKind, in bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if in {
		c.kinds[gvk] = true
	} else {
		delete(c.kinds, gvk)
	}
}

// candidate makes namespace's membership of the cache known to every
// gate, which reviews it (in) or lets it go: after a namespace is added
// or removed. A gate made meanwhile finds the namespaces as they are
// now.
func (m *multiNamespaceCache) candidate(namespace string) {
	for _, g := range m.gateList() {
		g.set.SelectNow(namespace, func() bool { return m.has(namespace) })
	}
}

// gateList returns the gates made so far.
func (m *multiNamespaceCache) gateList() []*kindGate {
	m.gates.mu.Lock()
	defer m.gates.mu.Unlock()
	return slices.Collect(maps.Values(m.gates.byKind))
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
	return m.heldLocked(gvk, namespace)
}

// heldLocked reports whether gvk is held in namespace: allowed, and not
// still leaving it. m.mu must be held.
func (m *multiNamespaceCache) heldLocked(gvk schema.GroupVersionKind, namespace string) bool {
	return m.allowed[gvk][namespace] && m.kindsLeaving[leavingKind{gvk, namespace}] == nil
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

// allowedNow returns the namespace caches that hold gvk (every one, if
// the cache has no IfAllowed) and gvk's generation, together.
func (m *multiNamespaceCache) allowedNow(gvk schema.GroupVersionKind) (map[string]*namespaceCache, uint64) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if !m.ifAllowed() {
		return maps.Clone(m.byNS), 0
	}
	return m.allowedLocked(gvk), m.kindGen[gvk]
}

// allowedLocked is allowedCaches with m.mu held, for a gated cache: the
// caches that hold gvk.
func (m *multiNamespaceCache) allowedLocked(gvk schema.GroupVersionKind) map[string]*namespaceCache {
	out := make(map[string]*namespaceCache, len(m.byNS))
	for ns, c := range m.byNS {
		if m.heldLocked(gvk, ns) {
			out[ns] = c
		}
	}
	return out
}

// allow makes gvk held in namespace (in: its indexes added, its informer
// joining the multiInformers handed out) or not (its handlers told of
// the leave, after which its informers are released): a gate's Apply,
// with the gate's lock held. It never waits for handlers: a kind allowed
// again before its handlers have handled its leave stays out until a
// recheck after (nsmember.ErrLater).
func (m *multiNamespaceCache) allow(ctx context.Context, gvk schema.GroupVersionKind, namespace string, in bool) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.allowed[gvk] == nil {
		m.allowed[gvk] = map[string]bool{}
	}
	c := m.byNS[namespace]
	lk := leavingKind{gvk, namespace}
	m.kindGen[gvk]++
	if in {
		if m.kindsLeaving[lk] != nil {
			return fmt.Errorf("%s in %s: its handlers are still handling its leave: %w", gvk.Kind, namespace, nsmember.ErrLater)
		}
		if c != nil {
			if err := m.holdLocked(ctx, c, gvk, namespace); err != nil {
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
	c.allowKind(gvk, false) // from now on, no read makes its informer there
	var left []<-chan struct{}
	for k, mi := range m.informers {
		if k.gvk != gvk {
			continue
		}
		if m.ctx == nil || m.stopped {
			mi.drop(namespace) // not running: no handler runs to be told
		} else {
			left = append(left, mi.leave(namespace, m.sh.log)...)
		}
	}
	m.letGoLocked(c, gvk, namespace, left)
	return nil
}

// letGoLocked releases gvk's informers in namespace's cache c once its
// handlers have handled what left says (their leave), from a goroutine
// (m.kindsLeaving holds it meanwhile): never waiting for handlers under
// m.mu, which must be held. Not running: at once.
func (m *multiNamespaceCache) letGoLocked(c *namespaceCache, gvk schema.GroupVersionKind, namespace string, left []<-chan struct{}) {
	if m.ctx == nil || m.stopped {
		c.removeKind(gvk)
		return
	}
	lk := leavingKind{gvk, namespace}
	done := m.ctx.Done()
	released := make(chan struct{})
	m.kindsLeaving[lk] = released
	m.running.Go(func() {
		defer close(released)
		awaitLeft(left, done)
		c.removeKind(gvk)
		m.mu.Lock()
		if m.kindsLeaving[lk] == released {
			delete(m.kindsLeaving, lk)
		}
		m.mu.Unlock()
	})
}

// leavingKind is a kind leaving a namespace (multiNamespaceCache.kindsLeaving).
type leavingKind struct {
	gvk       schema.GroupVersionKind
	namespace string
}

// holdLocked lets namespace's cache c make gvk's informers, adds gvk's
// indexes to it, and its informer to the multiInformers of gvk handed
// out: every step that can fail before the handlers are added; on an
// error, undone as a revoke is (the handlers told of the leave, the
// informers released after it, not under m.mu), and allowed again at a
// recheck after. m.mu must be held.
func (m *multiNamespaceCache) holdLocked(ctx context.Context, c *namespaceCache, gvk schema.GroupVersionKind, namespace string) error {
	c.allowKind(gvk, true)
	undo := func(err error, joined []*multiInformer) error {
		c.allowKind(gvk, false)
		var left []<-chan struct{}
		for _, d := range joined {
			left = append(left, d.leave(namespace, m.sh.log)...)
		}
		m.letGoLocked(c, gvk, namespace, left)
		return err
	}
	for _, ix := range m.indexes {
		if k, err := apiutil.GVKForObject(ix.obj, m.sh.scheme); err != nil || k != gvk {
			continue
		}
		if err := c.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			return undo(err, nil)
		}
	}
	infs := map[*multiInformer]cache.Informer{}
	for k, mi := range m.informers {
		if k.gvk != gvk {
			continue
		}
		inf, err := c.GetInformer(ctx, mi.example, cache.BlockUntilSynced(false))
		if err != nil {
			return undo(err, nil)
		}
		infs[mi] = inf
	}
	var joined []*multiInformer
	for mi, inf := range infs {
		if err := mi.join(namespace, inf); err != nil {
			return undo(err, joined)
		}
		joined = append(joined, mi)
	}
	return nil
}

// indexAllowed is IndexField for a cache with IfAllowed: the index is
// added to the namespaces allowed the kind now, and kept for those
// allowed later, at once (m.mu held: a namespace allowed meanwhile gets
// it from one or the other, never both).
func (m *multiNamespaceCache) indexAllowed(ctx context.Context, obj client.Object, field string, extract client.IndexerFunc) error {
	gvk, err := apiutil.GVKForObject(obj, m.sh.scheme)
	if err != nil {
		return err
	}
	m.gate(gvk)
	m.mu.Lock()
	defer m.mu.Unlock()
	m.indexes = append(m.indexes, fieldIndex{obj, field, extract})
	for _, c := range m.allowedLocked(gvk) { // not those leaving: they join again with m.indexes
		if err := c.IndexField(ctx, obj, field, extract); err != nil {
			return err
		}
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
			for _, g := range m.gateList() {
				g.set.Close(nil)
			}
			return
		case <-t.C:
		}
		for _, g := range m.gateList() {
			g.set.Recheck(ctx)
		}
	}
}

// errNotAllowed is wrapped by the errors of Get and List of a kind in a
// namespace the client may not read it in.
var errNotAllowed = errors.New("the client may not list and watch it there (Options.IfAllowed)")
