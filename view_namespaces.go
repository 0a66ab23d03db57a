package kinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer/internal/nsmember"
	"github.com/kinformer/kinformer/internal/persist"
)

// Namespaces chooses the namespaces of a view made by [SharedView]: those
// named, and those whose Namespace objects' labels match Selector, both
// changeable while the view runs.
type Namespaces struct {
	// Names are namespaces the view holds until [View.RemoveNamespace]
	// (or [View.SetNamespaces]) takes them out.
	Names []string
	// Selector, if not empty, is a label selector of Namespace objects
	// ("tenant=acme", "team in (a,b)"): the view follows it. A namespace
	// created with matching labels, or whose labels come to match, joins
	// the view; one deleted, or whose labels no longer match, leaves it
	// (unless it is also named). It needs permission to list and watch
	// namespaces; the Namespace objects are watched as metadata only,
	// filtered by the server.
	Selector string
	// IfAllowed holds, of those namespaces (of every namespace if neither
	// Names nor Selector is given), only the ones where the client may
	// list and watch the resource, as SelfSubjectAccessReviews say: a
	// controller allowed some namespaces and not the cluster caches those
	// it may read, instead of failing on the others. The reviews are made
	// as a namespace becomes a candidate and again every Recheck: a
	// namespace whose Role is granted joins, one whose Role is revoked
	// leaves (an open watch outlives a revoked permission; the review does
	// not). A member refused with a 403 is reviewed at the next Recheck.
	IfAllowed bool
	// Recheck is how often IfAllowed reviews the permissions again.
	// Default 1 minute.
	Recheck time.Duration
}

// manyNamespaces is how many namespaces a view holds before it warns that
// one informer per namespace is the costly form (a var for tests).
var manyNamespaces = 100

// ErrNotNamespaced is returned by a view's namespace methods when the view
// was not made with namespaces ([SharedView], [DynamicView]).
var ErrNotNamespaced = errors.New("kinformer: the view was not made with namespaces (SharedView, DynamicView)")

// viewNamespaces is a namespaced view's namespaces (their membership is
// an nsmember.Set's), each an informer of a Factory acquired while it is
// in the view.
type viewNamespaces[T Object] struct {
	v       *View[T]
	f       *Factory
	acquire func(namespace string) (*Informer[T], error)
	set     *nsmember.Set
	resName string // the resource, for the logs

	// infs and warnedMany are guarded by the set's lock: only its Apply
	// (join) and its Close's last step touch them.
	infs       map[string]*Informer[T]
	warnedMany bool                     // the view reached manyNamespaces, and said so
	names      atomic.Pointer[[]string] // the namespaces in the view (publishLocked)

	nsInf *Informer[*metav1.PartialObjectMetadata] // the selector's; nil without one
	nsReg *Registration

	closing  chan struct{}  // closed by Close: releases wait no more
	releases sync.WaitGroup // informers released once their leave is handled
}

// SharedView returns a view of T's informers, one per namespace of ns,
// each the factory's shared informer for that namespace
// (Shared[T](f, namespace, opts)), acquired while the namespace is in the
// view and released when it leaves. Its namespaces may change while it
// runs: [View.AddNamespace], [View.RemoveNamespace], [View.SetNamespaces],
// and ns.Selector. The factory runs its informers (Start); [View.Close]
// releases them.
//
// A multi-tenant controller allowed to watch only some namespaces keeps
// one SharedView per kind; the view's handlers see a namespace that joins
// as Added for each of its objects ([CauseJoin]) and one that leaves as
// Deleted for each ([CauseLeave]).
//
// With a StateDir, each namespace's informer keeps its own state file; a
// namespace that leaves the view takes its files with it (also one a wider
// projection made it leave, see Options.Fields) once its informer
// has stopped (unless another holder of the informer, or process, still
// uses it), so that files of departed namespaces do not pile up: one that
// joins again lists. Close keeps the files, for the next start.
//
// The view changes one namespace at a time: a namespace that joins again
// waits until the handlers have handled its leave, and the selector's
// changes (and IfAllowed's reviews) run on the Namespace informer's
// handler. So the view's handlers may read it (Select, Namespaces, …) but
// must not call AddNamespace, RemoveNamespace, SetNamespaces or Close.
func SharedView[T Object](f *Factory, ns Namespaces, opts *Options[T]) (*View[T], error) {
	var gvr schema.GroupVersionResource
	if ns.IfAllowed {
		if err := f.setup(); err != nil {
			return nil, err
		}
		t := reflect.TypeFor[T]()
		if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
			return nil, fmt.Errorf("kinformer: SharedView[%s]: want a pointer to a struct type registered in the scheme", t)
		}
		obj, _ := reflect.New(t.Elem()).Interface().(runtime.Object)
		typed, err := f.api.ForType(obj)
		if err != nil {
			return nil, fmt.Errorf("kinformer: SharedView[%s]: %w", t, err)
		}
		gvr = typed.Mapping.Resource
	}
	return newNamespacedView(f, ns, gvr, func(namespace string) (*Informer[T], error) {
		return Shared[T](f, namespace, opts)
	})
}

// DynamicView is [SharedView] for unstructured objects of the resource gvr
// ([Factory.Dynamic]).
func DynamicView(f *Factory, gvr schema.GroupVersionResource, ns Namespaces, opts *Options[*unstructured.Unstructured]) (*View[*unstructured.Unstructured], error) {
	return newNamespacedView(f, ns, gvr, func(namespace string) (*Informer[*unstructured.Unstructured], error) {
		return f.Dynamic(gvr, namespace, opts)
	})
}

func newNamespacedView[T Object](f *Factory, ns Namespaces, gvr schema.GroupVersionResource, acquire func(string) (*Informer[T], error)) (*View[T], error) {
	v := &View[T]{}
	n := &viewNamespaces[T]{v: v, f: f, acquire: acquire, infs: map[string]*Informer[T]{}, closing: make(chan struct{}),
		resName: gvr.GroupResource().String()}
	v.ns = n
	var sel labels.Selector
	if ns.Selector != "" {
		var err error
		if sel, err = labels.Parse(ns.Selector); err != nil {
			return nil, fmt.Errorf("kinformer: namespace selector %q: %w", ns.Selector, err)
		}
	}
	c := nsmember.Config{Apply: n.join, Recheck: ns.Recheck, Log: f.log, Resource: n.resName, Holder: "the view"}
	if ns.IfAllowed {
		if err := f.setup(); err != nil {
			return nil, err
		}
		c.Review = func(ctx context.Context, namespace string) (bool, string, error) {
			return f.api.MayListAndWatch(ctx, gvr, namespace)
		}
		if sel == nil && len(ns.Names) == 0 {
			sel = labels.Everything() // every namespace the client may read
		}
	}
	n.set = nsmember.New(c)
	for _, name := range ns.Names {
		if err := v.AddNamespace(name); err != nil {
			v.Close()
			return nil, err
		}
	}
	if sel != nil {
		var nsOpts *Options[*metav1.PartialObjectMetadata]
		if !sel.Empty() {
			nsOpts = &Options[*metav1.PartialObjectMetadata]{LabelSelector: sel.String()}
		}
		nsInf, err := f.Metadata(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}, "", nsOpts)
		if err != nil {
			v.Close()
			return nil, fmt.Errorf("kinformer: namespace selector %q: %w", ns.Selector, err)
		}
		n.set.Locked(func() {
			n.nsInf = nsInf
			n.nsReg = nsInf.AddHandlerFuncs(HandlerFuncs[*metav1.PartialObjectMetadata]{
				Added:   func(e Event[*metav1.PartialObjectMetadata]) { n.set.Select(e.Object.Name, true) },
				Deleted: func(e Event[*metav1.PartialObjectMetadata]) { n.set.Select(e.Object.Name, false) },
			})
		})
	}
	return v, nil
}

// join makes namespace's informer join the view (in: acquired from the
// factory) or leave it (released once the view's handlers have handled
// its leave): the set's Apply, with its lock held.
func (n *viewNamespaces[T]) join(_ context.Context, namespace string, in bool) error {
	inf, have := n.infs[namespace]
	switch {
	case in && !have:
		inf, err := n.acquire(namespace)
		if err != nil {
			return err
		}
		n.infs[namespace] = inf
		n.publishLocked()
		// The namespaces the selector's first list finds are the view's
		// start, not joins.
		n.v.add(inf, n.followed())
		n.logf(slog.LevelInfo, "kinformer: a namespace joined the view", "resource", inf.Name(), "namespace", namespace)
	case !in && have:
		delete(n.infs, namespace)
		n.publishLocked()
		left := n.v.Remove(inf)
		n.logf(slog.LevelInfo, "kinformer: a namespace left the view", "resource", inf.Name(), "namespace", namespace)
		n.releases.Go(func() {
			select {
			case <-left:
			case <-n.closing:
			}
			if _, retired := release(n.f, inf); retired {
				n.forget(namespace, inf)
			}
		})
	}
	return nil
}

// forget removes the state files of inf, a namespace's informer that left
// the view and has stopped (its current one, and those of narrower
// projections a consumer's wider Fields made it leave): a namespace that
// leaves does not leave its files behind for good (one that joins again
// lists). Not if the view
// closed (it stops, the namespace did not leave), nor if the namespace
// joined again meanwhile (its new informer has the file), nor a file in
// use (by another process).
func (n *viewNamespaces[T]) forget(namespace string, inf *Informer[T]) {
	paths := inf.stateFiles()
	if len(paths) == 0 {
		return
	}
	n.set.Locked(func() {
		select {
		case <-n.closing: // closed under the set's lock
			return
		default:
		}
		if n.infs[namespace] != nil {
			return
		}
		for _, path := range paths {
			if err := persist.Forget(path); err != nil {
				n.logf(slog.LevelError, "kinformer: could not remove the state file of a namespace that left the view", "namespace", namespace, "file", path, "error", err.Error())
				continue
			}
			n.logf(slog.LevelInfo, "kinformer: removed the state file of a namespace that left the view", "namespace", namespace, "file", path)
		}
	})
}

func (n *viewNamespaces[T]) logf(level slog.Level, msg string, args ...any) {
	if n.f.log != nil {
		n.f.log.Log(context.Background(), level, msg, args...)
	}
}

// followed reports whether the view has caught up with the Namespace
// objects its selector matches (true without a selector).
func (n *viewNamespaces[T]) followed() bool {
	return n.nsReg == nil || n.nsReg.HasSynced()
}

// waitFollowed waits until followed, or the Namespace informer fails for
// good, or ctx ends.
func (n *viewNamespaces[T]) waitFollowed(ctx context.Context) error {
	if n.nsReg == nil {
		return nil
	}
	if err := n.nsInf.WaitForSync(ctx); err != nil {
		if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
			return err
		}
		return fmt.Errorf("%s (the view's namespace selector): %w", n.nsInf.Name(), err)
	}
	select {
	case <-n.nsReg.Synced():
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

// AddNamespace adds namespace to a view made with namespaces: its informer
// is acquired from the factory, and the view's handlers get its objects as
// Added with [CauseJoin]. A namespace already named is a no-op; one the
// selector holds becomes named too (it stays when the selector lets it go).
// It must not be called from one of the view's handlers.
func (v *View[T]) AddNamespace(namespace string) error {
	if v.ns == nil {
		return ErrNotNamespaced
	}
	err := v.ns.set.Add(context.Background(), namespace)
	if errors.Is(err, nsmember.ErrClosed) {
		return errors.New("kinformer: AddNamespace: the view is closed")
	}
	return kinformerError(err)
}

// RemoveNamespace takes a named namespace out of the view (unless its
// selector holds it too): the view's handlers get Deleted with
// [CauseLeave] for each of its objects, after which its informer is
// released. Unknown: a no-op.
func (v *View[T]) RemoveNamespace(namespace string) error {
	if v.ns == nil {
		return ErrNotNamespaced
	}
	return kinformerError(v.ns.set.Remove(context.Background(), namespace))
}

// SetNamespaces makes namespaces the view's named namespaces: those
// missing are added, the others removed, as AddNamespace and
// RemoveNamespace do. On an error the namespaces before it are set.
func (v *View[T]) SetNamespaces(namespaces ...string) error {
	if v.ns == nil {
		return ErrNotNamespaced
	}
	return kinformerError(v.ns.set.SetNamed(context.Background(), namespaces))
}

// kinformerError prefixes an error of the namespace set with "kinformer: ".
func kinformerError(err error) error {
	if err == nil || strings.HasPrefix(err.Error(), "kinformer: ") {
		return err
	}
	return fmt.Errorf("kinformer: %w", err)
}

// Namespaces returns the namespaces in the view now, named or selected,
// sorted; nil for a view not made with namespaces.
func (v *View[T]) Namespaces() []string {
	n := v.ns
	if n == nil {
		return nil
	}
	if p := n.names.Load(); p != nil {
		return slices.Clone(*p)
	}
	return []string{}
}

// publishLocked records the namespaces in the view for Namespaces, which
// reads them without the set's lock (a handler may call it while a
// namespace waits to join). The set's lock must be held.
func (n *viewNamespaces[T]) publishLocked() {
	if len(n.infs) >= manyNamespaces && !n.warnedMany {
		n.warnedMany = true
		n.logf(slog.LevelWarn, "kinformer: a view over many namespaces makes an informer, a list and a watch for each (memory, goroutines and start-up grow with them); where they share a label, one cluster-wide informer with a label selector on the objects (the CLI's -A -l) holds the same objects with one list and one watch",
			"resource", n.resName, "namespaces", len(n.infs))
	}
	out := make([]string, 0, len(n.infs))
	for ns := range n.infs {
		out = append(out, ns)
	}
	sort.Strings(out)
	n.names.Store(&out)
}

// Close ends a view made with namespaces: it stops following its
// selector, removes its handlers and releases every informer it acquired
// (the factory stops those no one else holds); its handlers are given no
// Deleted. It waits for the releases. A view made by NewView, or closed:
// a no-op.
func (v *View[T]) Close() {
	n := v.ns
	if n == nil {
		return
	}
	var nsInf *Informer[*metav1.PartialObjectMetadata]
	var nsReg *Registration
	var infs map[string]*Informer[T]
	if !n.set.Close(func() {
		close(n.closing)
		nsInf, nsReg = n.nsInf, n.nsReg
		infs = n.infs
		n.infs = map[string]*Informer[T]{}
		n.publishLocked()
	}) {
		return
	}
	if nsInf != nil {
		if nsReg != nil {
			nsInf.RemoveEventHandler(nsReg)
		}
		Release(n.f, nsInf)
	}
	v.mu.Lock()
	handlers := v.handlers
	v.handlers, v.infs = nil, nil
	type held struct {
		inf *Informer[T]
		reg *Registration
	}
	var regs []held
	for _, vh := range handlers {
		vh.vr.removed.Store(true)
		for inf, reg := range vh.regs {
			regs = append(regs, held{inf, reg})
		}
		for reg, inf := range vh.leaving {
			regs = append(regs, held{inf, reg})
		}
	}
	v.mu.Unlock()
	for _, h := range regs {
		h.inf.RemoveEventHandler(h.reg)
	}
	for _, inf := range infs {
		Release(n.f, inf)
	}
	n.releases.Wait()
}
