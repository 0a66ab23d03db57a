package controllerruntime

import (
	"context"
	"errors"
	"fmt"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/nsmember"
)

// namespaceSet is the namespaces of a cache that may change while it runs:
// those named (DefaultNamespaces, AddNamespace) and those its
// NamespaceSelector matches (their membership is an nsmember.Set's, as a
// kinformer view's is), applied to every multi-namespace cache that
// follows them (the default one, and those of ByObject kinds without
// namespaces of their own).
type namespaceSet struct {
	sh     *shared
	caches []*multiNamespaceCache
	set    *nsmember.Set // nil for a cache whose namespaces cannot change

	nsInf *kinformer.Informer[*metav1.PartialObjectMetadata] // the selector's; nil without one
	nsReg *kinformer.Registration
}

// newNamespaceSet returns the set of caches, named holding the namespaces
// they were made with.
func newNamespaceSet(sh *shared, caches []*multiNamespaceCache, named []string) *namespaceSet {
	s := &namespaceSet{sh: sh, caches: caches}
	if len(caches) > 0 {
		s.set = nsmember.New(nsmember.Config{Apply: s.apply, Members: named, Log: sh.log, Resource: "the cache's kinds", Holder: "the cache"})
	}
	return s
}

// ErrNamespacesFixed is returned by AddNamespace, RemoveNamespace and
// SetNamespaces for a cache whose namespaces cannot change: one of every
// namespace (no DefaultNamespaces nor NamespaceSelector), one with
// DefaultNamespaces[""], or a cache not made by NewCache or With.
var ErrNamespacesFixed = errors.New("kcr: the cache's namespaces cannot change (it holds every namespace, DefaultNamespaces[\"\"], or is not kinformer's)")

// follow makes the set follow the namespaces sel matches.
func (s *namespaceSet) follow(sel labels.Selector) error {
	inf, err := s.sh.factory.Metadata(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "",
		&kinformer.Options[*metav1.PartialObjectMetadata]{LabelSelector: sel.String(), Logger: informerLogger(s.sh.log, schema.GroupVersionKind{Version: "v1", Kind: "Namespace"}, "")})
	if err != nil {
		return fmt.Errorf("kcr: Options.NamespaceSelector: %w", err)
	}
	s.set.Locked(func() {
		s.nsInf = inf
		s.nsReg = inf.AddHandlerFuncs(kinformer.HandlerFuncs[*metav1.PartialObjectMetadata]{
			Added:   func(e kinformer.Event[*metav1.PartialObjectMetadata]) { s.set.Select(e.Object.Name, true) },
			Deleted: func(e kinformer.Event[*metav1.PartialObjectMetadata]) { s.set.Select(e.Object.Name, false) },
		})
	})
	return nil
}

// apply makes namespace's membership of every cache in or not: the set's
// Apply. On an error, the caches changed are changed back.
func (s *namespaceSet) apply(ctx context.Context, namespace string, in bool) error {
	changed := false
	var done []*multiNamespaceCache // changed, to undo on an error
	for _, m := range s.caches {
		added, removed, err := m.setNamespace(ctx, namespace, in)
		if err != nil {
			for _, d := range done {
				if _, _, uerr := d.setNamespace(ctx, namespace, !in); uerr != nil {
					s.sh.log.Error("kinformer: undoing a namespace change failed", "namespace", namespace, "error", uerr.Error())
				}
			}
			return err
		}
		if added || removed {
			done = append(done, m)
			changed = true
		}
	}
	if changed && in {
		s.sh.log.Info("kinformer: a namespace joined the cache", "namespace", namespace)
	} else if changed {
		s.sh.log.Info("kinformer: a namespace left the cache", "namespace", namespace)
	}
	return nil
}

// waitFollowed waits until the selector's Namespace objects have been
// applied (at once without a selector); false if ctx ends first.
func (s *namespaceSet) waitFollowed(ctx context.Context) bool {
	if s.set == nil {
		return true
	}
	var reg *kinformer.Registration
	s.set.Locked(func() { reg = s.nsReg })
	if reg == nil {
		return true
	}
	select {
	case <-reg.Synced():
		return true
	case <-ctx.Done():
		return false
	}
}

// WaitForCacheSync waits, with a NamespaceSelector, until the namespaces
// it matches have joined, then until every informer has synced.
func (c *factoryCache) WaitForCacheSync(ctx context.Context) bool {
	return c.namespaces.waitFollowed(ctx) && c.Cache.WaitForCacheSync(ctx)
}

func setOf(c cache.Cache) (*namespaceSet, error) {
	fc, ok := c.(*factoryCache)
	if !ok || fc.namespaces.set == nil {
		return nil, ErrNamespacesFixed
	}
	return fc.namespaces, nil
}

// AddNamespace adds namespace to a cache made by NewCache or With with
// cache.Options.DefaultNamespaces or Options.NamespaceSelector, while it
// runs (or before): the kinds it caches are listed and watched there too,
// the indexes made so far cover it, and the handlers of its informers get
// OnAdd for each of its objects. The kinds of ByObject with namespaces of
// their own keep theirs. A namespace already there is a no-op; one the
// selector holds stays when the selector lets it go.
func AddNamespace(ctx context.Context, c cache.Cache, namespace string) error {
	s, err := setOf(c)
	if err != nil {
		return err
	}
	if err := nsmember.CheckName(namespace); err != nil {
		return fmt.Errorf("kcr: %w", err)
	}
	if err := s.set.Add(ctx, namespace); err != nil {
		return fmt.Errorf("kcr: AddNamespace(%s): %w", namespace, err)
	}
	return nil
}

// RemoveNamespace takes a namespace added by hand (or in DefaultNamespaces)
// out of the cache, unless the NamespaceSelector holds it: the handlers of
// its informers get OnDelete, with a cache.DeletedFinalStateUnknown, for
// each of its objects, then its informers are released; Get and List of it
// fail as for any namespace the cache does not hold. Unknown: a no-op.
func RemoveNamespace(c cache.Cache, namespace string) error {
	s, err := setOf(c)
	if err != nil {
		return err
	}
	if err := s.set.Remove(context.Background(), namespace); err != nil {
		return fmt.Errorf("kcr: RemoveNamespace(%s): %w", namespace, err)
	}
	return nil
}

// SetNamespaces makes namespaces the cache's named namespaces, as
// AddNamespace and RemoveNamespace do for each difference.
func SetNamespaces(ctx context.Context, c cache.Cache, namespaces ...string) error {
	s, err := setOf(c)
	if err != nil {
		return err
	}
	if err := s.set.SetNamed(ctx, namespaces); err != nil {
		return fmt.Errorf("kcr: %w", err)
	}
	return nil
}

// Namespaces returns the namespaces the cache holds now (named or
// selected), sorted; nil for a cache of every namespace.
func Namespaces(c cache.Cache) []string {
	s, err := setOf(c)
	if err != nil {
		return nil
	}
	return s.caches[0].namespaces()
}
