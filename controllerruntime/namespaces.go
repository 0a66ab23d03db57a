package controllerruntime

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	"github.com/kinformer/kinformer"
)

// namespaceSet is the namespaces of a cache that may change while it runs:
// those named (DefaultNamespaces, AddNamespace) and those its
// NamespaceSelector matches, applied to every multi-namespace cache that
// follows them (the default one, and those of ByObject kinds without
// namespaces of their own).
type namespaceSet struct {
	sh     *shared
	caches []*multiNamespaceCache

	mu       sync.Mutex // guards named and selected; held while the caches change
	named    map[string]bool
	selected map[string]bool

	nsInf *kinformer.Informer[*metav1.PartialObjectMetadata] // the selector's; nil without one
	nsReg *kinformer.Registration
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
	s.mu.Lock()
	defer s.mu.Unlock()
	s.nsInf = inf
	s.nsReg = inf.AddHandlerFuncs(kinformer.HandlerFuncs[*metav1.PartialObjectMetadata]{
		Added:   func(e kinformer.Event[*metav1.PartialObjectMetadata]) { s.select_(e.Object.Name, true) },
		Deleted: func(e kinformer.Event[*metav1.PartialObjectMetadata]) { s.select_(e.Object.Name, false) },
	})
	return nil
}

func (s *namespaceSet) select_(namespace string, in bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.selected[namespace] == in {
		return
	}
	if in {
		s.selected[namespace] = true
	} else {
		delete(s.selected, namespace)
	}
	if err := s.applyLocked(context.Background(), namespace); err != nil {
		s.sh.log.Error("kinformer: a namespace the selector matches could not join the cache", "namespace", namespace, "error", err.Error())
	}
}

// applyLocked makes namespace's membership of every cache what named and
// selected say.
func (s *namespaceSet) applyLocked(ctx context.Context, namespace string) error {
	in := s.named[namespace] || s.selected[namespace]
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
	s.mu.Lock()
	reg := s.nsReg
	s.mu.Unlock()
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
	if !ok || len(fc.namespaces.caches) == 0 {
		return nil, ErrNamespacesFixed
	}
	return fc.namespaces, nil
}

func checkNamespace(namespace string) error {
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("kcr: namespace %q: %s", namespace, errs[0])
	}
	return nil
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
	if err := checkNamespace(namespace); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.named[namespace] {
		return nil
	}
	s.named[namespace] = true
	if err := s.applyLocked(ctx, namespace); err != nil {
		delete(s.named, namespace)
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
	s.mu.Lock()
	defer s.mu.Unlock()
	if !s.named[namespace] {
		return nil
	}
	delete(s.named, namespace)
	if err := s.applyLocked(context.Background(), namespace); err != nil {
		s.named[namespace] = true
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
	for _, ns := range namespaces {
		if err := checkNamespace(ns); err != nil {
			return err
		}
	}
	s.mu.Lock()
	var gone []string
	for ns := range s.named {
		if !slices.Contains(namespaces, ns) {
			gone = append(gone, ns)
		}
	}
	s.mu.Unlock()
	for _, ns := range gone {
		if err := RemoveNamespace(c, ns); err != nil {
			return err
		}
	}
	for _, ns := range namespaces {
		if err := AddNamespace(ctx, c, ns); err != nil {
			return err
		}
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
