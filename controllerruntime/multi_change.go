package controllerruntime

import (
	"context"
	"errors"
	"maps"
	"slices"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/cache"
)

// kinformer's own, not in controller-runtime: the namespaces of a
// multiNamespaceCache change while it runs (kcr's AddNamespace,
// RemoveNamespace, SetNamespaces and NamespaceSelector, through
// namespaceSet). A namespace added gets a namespace cache with the
// template configuration, the indexes and kinds of the others, and joins
// every multiInformer handed out; one removed leaves them (each handler
// gets OnDelete for its objects), then its informers are released.

// errAllNamespaces: the namespaces of a cache that also holds every other
// namespace cannot change (that cache's field selector names them).
var errAllNamespaces = errors.New(`the cache also holds every other namespace (DefaultNamespaces[""]): its namespaces cannot change`)

// addNamespace adds a namespace cache for namespace: no-op if there is one.
func (m *multiNamespaceCache) addNamespace(ctx context.Context, namespace string) error {
	m.mu.RLock()
	left := m.leaving[namespace]
	m.mu.RUnlock()
	if left != nil {
		// A namespace back before its leave was handled: after it, so
		// that no handler gets an object's OnAdd before its OnDelete.
		select {
		case <-left:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if _, ok := m.byNS[metav1.NamespaceAll]; ok {
		return errAllNamespaces
	}
	if _, ok := m.byNS[namespace]; ok {
		return nil
	}
	c := m.newNamespaceCache(m.template, namespace)
	if m.ifAllowed() {
		// The kinds join as the gates allow them (candidate, after).
		m.byNS[namespace] = c
		if m.ctx != nil {
			m.startLocked(namespace, c)
		}
		return nil
	}
	for _, ix := range m.indexes {
		if err := c.IndexField(ctx, ix.obj, ix.field, ix.extract); err != nil {
			c.releaseAll()
			return err
		}
	}
	joined := map[*multiInformer]cache.Informer{}
	for _, mi := range m.informers {
		inf, err := c.GetInformer(ctx, mi.example, cache.BlockUntilSynced(false))
		if err != nil {
			c.releaseAll()
			return err
		}
		joined[mi] = inf
	}
	var done []*multiInformer
	for mi, inf := range joined {
		if err := mi.join(namespace, inf); err != nil {
			for _, d := range done {
				d.leave(namespace, m.sh.log) // undone; its informers are released below
			}
			c.releaseAll()
			return err
		}
		done = append(done, mi)
	}
	m.byNS[namespace] = c
	if m.ctx != nil {
		m.startLocked(namespace, c)
	}
	return nil
}

// removeNamespace takes namespace's cache out: the handlers of the
// informers handed out get OnDelete for each of its objects, after which
// its informers are released. No-op if there is none.
func (m *multiNamespaceCache) removeNamespace(namespace string) error {
	m.mu.Lock()
	c, ok := m.byNS[namespace]
	if !ok {
		m.mu.Unlock()
		return nil
	}
	if namespace == metav1.NamespaceAll {
		m.mu.Unlock()
		return errAllNamespaces
	}
	delete(m.byNS, namespace)
	stop := m.stops[namespace]
	delete(m.stops, namespace)
	if m.ctx == nil || m.stopped {
		// Not running: no handler runs to be told; let go at once.
		for _, mi := range m.informers {
			mi.drop(namespace)
		}
		m.mu.Unlock()
		if stop != nil {
			stop()
		}
		c.releaseAll()
		return nil
	}
	var left []<-chan struct{}
	for _, mi := range m.informers {
		left = append(left, mi.leave(namespace, m.sh.log)...)
	}
	for lk, ch := range m.kindsLeaving {
		if lk.namespace == namespace {
			left = append(left, ch) // a kind revoked there (IfAllowed) ends its leave first
		}
	}
	done := m.ctx.Done()
	released := make(chan struct{})
	if m.leaving == nil {
		m.leaving = map[string]chan struct{}{}
	}
	m.leaving[namespace] = released
	m.running.Go(func() {
		defer close(released)
		awaitLeft(left, done)
		if stop != nil {
			stop()
		}
		c.releaseAll()
		m.mu.Lock()
		if m.leaving[namespace] == released {
			delete(m.leaving, namespace)
		}
		m.mu.Unlock()
	})
	m.mu.Unlock()
	return nil
}

// setNamespace adds (in) or removes namespace, and says which it did;
// with Options.IfAllowed, the kinds' gates then review it, or let it go.
func (m *multiNamespaceCache) setNamespace(ctx context.Context, namespace string, in bool) (added, removed bool, err error) {
	m.mu.RLock()
	_, had := m.byNS[namespace]
	m.mu.RUnlock()
	if in {
		err = m.addNamespace(ctx, namespace)
		added = !had
	} else {
		err = m.removeNamespace(namespace)
		removed = had
	}
	if m.ifAllowed() {
		m.candidate(namespace)
	}
	return added, removed, err
}

// namespaces returns the namespaces of the cache, sorted.
func (m *multiNamespaceCache) namespaces() []string {
	m.mu.RLock()
	defer m.mu.RUnlock()
	return slices.Sorted(maps.Keys(m.byNS))
}

// startLocked runs c until the cache's context ends or c is removed.
// m.mu must be held.
func (m *multiNamespaceCache) startLocked(namespace string, c *namespaceCache) {
	ctx, cancel := context.WithCancel(m.ctx)
	m.stops[namespace] = cancel
	m.running.Go(func() {
		if err := c.Start(ctx); err != nil {
			m.sh.log.Error("kinformer: the cache of a namespace failed", "namespace", namespace, "error", err.Error())
		}
	})
}

// awaitLeft waits until the handlers have handled the leaves left says,
// or done (the cache stops: no one waits for the handlers).
func awaitLeft(left []<-chan struct{}, done <-chan struct{}) {
	for _, ch := range left {
		select {
		case <-ch:
		case <-done:
		}
	}
}
