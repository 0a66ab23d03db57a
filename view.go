package kinformer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/labels"
)

// View is one read-only view over several informers of one kind: one per
// namespace (a controller that may watch only some namespaces, as
// controller-runtime's per-namespace cache), or one per selector. Each
// informer keeps its own watch; the view reads all their caches and
// registers its handlers on all of them. The informers' objects should not
// overlap (distinct namespaces, disjoint selectors): an object in two of
// them is listed and delivered twice.
//
// A view's informers may change while it runs: [View.Add] and
// [View.Remove], or, for a view made by [SharedView] or [NamespacedView],
// [View.AddNamespace], [View.RemoveNamespace], [View.SetNamespaces] and a
// namespace label selector that follows the Namespace objects
// ([Namespaces].Selector). The view's handlers see an informer that joins
// as Added for each of its objects, with [CauseJoin], and one that leaves as
// Deleted for each, with [CauseLeave], in order with that informer's other
// events.
//
// A View is safe for concurrent use.
type View[T Object] struct {
	mu       sync.RWMutex // guards everything below
	infs     []*Informer[T]
	handlers []*viewHandler[T]
	// leaving holds, per informer removed, a channel closed once every
	// handler has handled its Deleted: an informer joins again only after.
	// The entry goes when the channel closes, so that the view does not
	// keep an informer that left (and its cache) alive.
	leaving map[*Informer[T]]<-chan struct{}

	ns *viewNamespaces[T] // nil: not a namespaced view
}

// viewHandler is one handler of a view and its registration on each
// informer.
type viewHandler[T Object] struct {
	h    HandlerFuncs[T]
	regs map[*Informer[T]]*Registration
	vr   *ViewRegistration
	// leaving: its registrations on informers that left the view, until
	// they have handled the leave (guarded by View.mu).
	leaving map[*Registration]*Informer[T]
}

// NewView returns a view over infs.
func NewView[T Object](infs ...*Informer[T]) *View[T] {
	return &View[T]{infs: slices.Clone(infs)}
}

// Informers returns the view's informers.
func (v *View[T]) Informers() []*Informer[T] {
	v.mu.RLock()
	defer v.mu.RUnlock()
	return slices.Clone(v.infs)
}

// HasSynced reports whether every informer has synced (and, for a view that
// follows a namespace selector, whether it has caught up with the
// Namespace objects).
func (v *View[T]) HasSynced() bool {
	if v.ns != nil && !v.ns.followed() {
		return false
	}
	for _, inf := range v.Informers() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

// WaitForSync waits until the view has synced (nil), until one of its
// informers fails in a way retrying cannot fix (that error, naming the
// informer: [IsPersistent] and apierrors.IsForbidden still work on it), or
// until ctx ends (ctx.Err()). The informers keep retrying in every case.
// Informers that join meanwhile are waited for too.
func (v *View[T]) WaitForSync(ctx context.Context) error {
	for {
		if v.ns != nil {
			if err := v.ns.waitFollowed(ctx); err != nil {
				return err
			}
		}
		infs := v.Informers()
		g, gctx := errgroup.WithContext(ctx)
		for _, inf := range infs {
			g.Go(func() error {
				if err := inf.WaitForSync(gctx); err != nil {
					if gctx.Err() != nil && errors.Is(err, gctx.Err()) {
						return err
					}
					return fmt.Errorf("%s: %w", inf.Name(), err)
				}
				return nil
			})
		}
		if err := g.Wait(); err != nil {
			if ctx.Err() != nil && !IsPersistent(err) {
				return ctx.Err()
			}
			return err
		}
		if v.HasSynced() {
			return nil
		}
		if err := ctx.Err(); err != nil {
			return err
		}
	}
}

// GetByKey returns the object under key in the first cache that has it.
func (v *View[T]) GetByKey(key string) (T, bool) {
	for _, inf := range v.Informers() {
		if obj, ok := inf.Cache().GetByKey(key); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
}

// GetNamespaced returns the object with this namespace and name.
func (v *View[T]) GetNamespaced(namespace, name string) (T, bool) {
	for _, inf := range v.Informers() {
		if obj, ok := inf.Cache().GetNamespaced(namespace, name); ok {
			return obj, true
		}
	}
	var zero T
	return zero, false
}

// Select returns the objects of every cache in namespace ("" for all)
// whose labels match sel (nil matches everything).
func (v *View[T]) Select(namespace string, sel labels.Selector) []T {
	var out []T
	for _, inf := range v.Informers() {
		out = append(out, inf.Cache().Select(namespace, sel)...)
	}
	return out
}

// ViewRegistration is a handler registered on a view: one [Registration]
// on each of its informers, which changes as informers join and leave.
type ViewRegistration struct {
	regs    func() []*Registration
	removed atomic.Bool
}

// HasSynced reports whether the handler has been given the objects of
// every informer of the view (a removed one has synced).
func (r *ViewRegistration) HasSynced() bool {
	if r.removed.Load() {
		return true
	}
	for _, reg := range r.regs() {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

// Registrations returns the handler's registration on each informer of
// the view, as it is now.
func (r *ViewRegistration) Registrations() []*Registration { return r.regs() }

// AddHandlerFuncs registers h on every informer of the view, one ordered
// registration each: the events of one object come from one informer, in
// order. Informers that join the view later are given h too; their objects
// come as Added with [CauseJoin].
func (v *View[T]) AddHandlerFuncs(h HandlerFuncs[T]) *ViewRegistration {
	vh := &viewHandler[T]{h: h, regs: map[*Informer[T]]*Registration{}}
	v.mu.Lock()
	for _, inf := range v.infs {
		vh.regs[inf] = inf.AddHandlerFuncs(h)
	}
	v.handlers = append(v.handlers, vh)
	v.mu.Unlock()
	vr := &ViewRegistration{}
	vr.regs = func() []*Registration {
		v.mu.RLock()
		defer v.mu.RUnlock()
		out := make([]*Registration, 0, len(vh.regs))
		for _, reg := range vh.regs {
			out = append(out, reg)
		}
		return out
	}
	vh.vr = vr
	return vr
}

// RemoveHandler unregisters a handler from every informer of the view;
// once it returns, the handler is not running and will never be called
// again (as [Informer.RemoveEventHandler]). Nil or unknown: a no-op.
func (v *View[T]) RemoveHandler(r *ViewRegistration) {
	if r == nil {
		return
	}
	v.mu.Lock()
	var found *viewHandler[T]
	v.handlers = slices.DeleteFunc(v.handlers, func(vh *viewHandler[T]) bool {
		if vh.vr == r {
			found = vh
			return true
		}
		return false
	})
	type held struct {
		inf *Informer[T]
		reg *Registration
	}
	var regs []held
	if found != nil {
		for inf, reg := range found.regs {
			regs = append(regs, held{inf, reg})
		}
		for reg, inf := range found.leaving {
			regs = append(regs, held{inf, reg}) // still handling a leave
		}
	}
	v.mu.Unlock()
	if found == nil {
		return
	}
	r.removed.Store(true)
	for _, h := range regs {
		h.inf.RemoveEventHandler(h.reg)
	}
}

// Add makes inf one of the view's informers: each handler of the view is
// registered on it, and given its objects as Added with [CauseJoin]. If
// inf left the view before, Add first waits until the handlers have
// handled the Deleted of that leave, so that one object's events stay in
// order (inf must run for that; a handler must not call Add). Adding an
// informer of the view is a no-op.
func (v *View[T]) Add(inf *Informer[T]) { v.add(inf, true) }

// add is Add; join false keeps the causes of the Added inf gives the
// handlers (a namespaced view's first namespaces).
func (v *View[T]) add(inf *Informer[T], join bool) {
	for {
		v.mu.Lock()
		if slices.Contains(v.infs, inf) {
			v.mu.Unlock()
			return
		}
		if left, ok := v.leaving[inf]; ok {
			v.mu.Unlock()
			<-left
			v.mu.Lock()
			if v.leaving[inf] == left {
				delete(v.leaving, inf)
			}
			v.mu.Unlock()
			continue
		}
		v.infs = append(v.infs, inf)
		for _, vh := range v.handlers {
			if !join {
				vh.regs[inf] = inf.AddHandlerFuncs(vh.h)
				continue
			}
			h, set := joining(vh.h)
			reg := inf.AddHandlerFuncs(h)
			set(reg)
			vh.regs[inf] = reg
		}
		v.mu.Unlock()
		return
	}
}

// joining returns h with the Added it gets before its registration has
// synced (the objects the informer had or listed as it joined) caused
// CauseJoin, and the function that tells it its registration.
func joining[T Object](h HandlerFuncs[T]) (HandlerFuncs[T], func(*Registration)) {
	var reg atomic.Pointer[Registration]
	if h.Added == nil {
		return h, reg.Store
	}
	added := h.Added
	var synced atomic.Bool
	h.Added = func(e Event[T]) {
		if !synced.Load() {
			if r := reg.Load(); r != nil && r.HasSynced() {
				synced.Store(true)
			} else {
				e.Cause = CauseJoin
			}
		}
		added(e)
	}
	return h, reg.Store
}

// Remove takes inf out of the view: the view no longer reads its cache,
// and each handler of the view leaves inf ([Informer.Leave]): it gets, after the events inf has already
// queued for it, Deleted with [CauseLeave] for every object inf had then,
// and nothing more from inf. The returned channel is closed once every
// handler has handled them (inf must run for that). inf itself keeps
// running: stop it, or release it, once the channel is closed. Removing an
// informer not in the view returns a closed channel.
func (v *View[T]) Remove(inf *Informer[T]) <-chan struct{} {
	v.mu.Lock()
	i := slices.Index(v.infs, inf)
	if i < 0 {
		v.mu.Unlock()
		done := make(chan struct{})
		close(done)
		return done
	}
	v.infs = slices.Delete(v.infs, i, i+1)
	done := make(chan struct{})
	// One more than the handlers: the last leave to end, or the end
	// below, closes done.
	var left atomic.Int64
	left.Store(1)
	end := func() {
		if left.Add(-1) == 0 {
			close(done)
			// Handled: a later Add need not wait, and the view must
			// not keep inf (and its cache) alive.
			v.mu.Lock()
			if v.leaving[inf] == done {
				delete(v.leaving, inf)
			}
			v.mu.Unlock()
		}
	}
	var leaves []func()
	for _, vh := range v.handlers {
		if reg := vh.regs[inf]; reg != nil {
			delete(vh.regs, inf)
			if vh.leaving == nil {
				vh.leaving = map[*Registration]*Informer[T]{}
			}
			vh.leaving[reg] = inf
			left.Add(1)
			leaves = append(leaves, func() {
				inf.leave(reg, func() {
					v.mu.Lock()
					delete(vh.leaving, reg)
					v.mu.Unlock()
					end()
				})
			})
		}
	}
	if v.leaving == nil {
		v.leaving = map[*Informer[T]]<-chan struct{}{}
	}
	v.leaving[inf] = done
	v.mu.Unlock()
	// Outside v.mu: a leave with nothing to handle ends at once.
	for _, leave := range leaves {
		leave()
	}
	end()
	return done
}
