package controllerruntime

import (
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	"github.com/kinformer/kinformer/clientgo"
)

// This file restates the multiNamespaceInformer of
// pkg/cache/multi_namespace_cache.go of controller-runtime v0.25.2: one
// kind's informers of several namespaces as one, whose namespaces (here)
// may join and leave while it runs.

// multiInformer is one kind's informers of several namespaces as one.
// Namespaces join and leave it as its cache's change (join, leave); its
// handlers and indexers follow.
type multiInformer struct {
	example client.Object // of its kind and form, for a namespace that joins

	mu       sync.RWMutex // guards infs, regs and indexers
	infs     map[string]cache.Informer
	regs     []*multiRegistration
	indexers []toolscache.Indexers

	once sync.Once
	done chan struct{}
}

func newMultiInformer(infs map[string]cache.Informer) *multiInformer {
	return &multiInformer{infs: infs, done: make(chan struct{})}
}

var _ cache.Informer = (*multiInformer)(nil)

// informers returns the informers now.
func (i *multiInformer) informers() map[string]cache.Informer {
	i.mu.RLock()
	defer i.mu.RUnlock()
	return maps.Clone(i.infs)
}

// join adds namespace's informer: each handler and indexer is added to it.
func (i *multiInformer) join(namespace string, inf cache.Informer) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, ix := range i.indexers {
		if err := inf.AddIndexers(ix); err != nil {
			return err
		}
	}
	for _, r := range i.regs {
		reg, err := r.add(inf)
		if err != nil {
			return err
		}
		r.set(namespace, reg)
	}
	i.infs[namespace] = inf
	return nil
}

// leave takes namespace's informer out: each handler gets OnDelete for
// its objects (clientgo.Leave), then nothing more from it. It returns the
// channels closed once they have been handled.
func (i *multiInformer) leave(namespace string, log *slog.Logger) []<-chan struct{} {
	i.mu.Lock()
	defer i.mu.Unlock()
	inf, ok := i.infs[namespace]
	if !ok {
		return nil
	}
	delete(i.infs, namespace)
	var left []<-chan struct{}
	for _, r := range i.regs {
		reg := r.take(namespace)
		if reg == nil {
			continue
		}
		ch, err := leaveHandler(inf, reg)
		if err != nil {
			// Not kinformer's (cache.Options.NewInformer): removed
			// without the Deleted.
			log.Warn("kinformer: a handler of a namespace leaving the cache was removed without OnDelete for its objects", "namespace", namespace, "error", err.Error())
			_ = inf.RemoveEventHandler(reg)
			continue
		}
		r.leavingOn(inf, reg, ch)
		left = append(left, ch)
	}
	return left
}

// drop takes namespace's informer out without telling the handlers (the
// cache does not run: they were given nothing).
func (i *multiInformer) drop(namespace string) {
	i.mu.Lock()
	defer i.mu.Unlock()
	inf, ok := i.infs[namespace]
	if !ok {
		return
	}
	delete(i.infs, namespace)
	for _, r := range i.regs {
		if reg := r.take(namespace); reg != nil {
			_ = inf.RemoveEventHandler(reg)
		}
	}
}

// leaveHandler is clientgo.Leave through a namespace cache's wrapper.
func leaveHandler(inf cache.Informer, reg toolscache.ResourceEventHandlerRegistration) (<-chan struct{}, error) {
	if s, ok := inf.(sharedInformer); ok {
		return clientgo.Leave(s.SharedIndexInformer, reg)
	}
	sii, ok := inf.(toolscache.SharedIndexInformer)
	if !ok {
		return nil, fmt.Errorf("%T is not a SharedIndexInformer", inf)
	}
	return clientgo.Leave(sii, reg)
}

func (i *multiInformer) addHandler(fn func(cache.Informer) (toolscache.ResourceEventHandlerRegistration, error)) (toolscache.ResourceEventHandlerRegistration, error) {
	i.mu.Lock()
	defer i.mu.Unlock()
	r := &multiRegistration{regs: make(map[string]toolscache.ResourceEventHandlerRegistration, len(i.infs)), add: fn, done: make(chan struct{})}
	for name, inf := range i.infs {
		reg, err := fn(inf)
		if err != nil {
			return nil, err
		}
		r.regs[name] = reg
	}
	i.regs = append(i.regs, r)
	return r, nil
}

func (i *multiInformer) AddEventHandler(h toolscache.ResourceEventHandler) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.addHandler(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandler(h)
	})
}

func (i *multiInformer) AddEventHandlerWithResyncPeriod(h toolscache.ResourceEventHandler, d time.Duration) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.addHandler(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithResyncPeriod(h, d)
	})
}

func (i *multiInformer) AddEventHandlerWithOptions(h toolscache.ResourceEventHandler, o toolscache.HandlerOptions) (toolscache.ResourceEventHandlerRegistration, error) {
	return i.addHandler(func(inf cache.Informer) (toolscache.ResourceEventHandlerRegistration, error) {
		return inf.AddEventHandlerWithOptions(h, o)
	})
}

func (i *multiInformer) RemoveEventHandler(h toolscache.ResourceEventHandlerRegistration) error {
	r, ok := h.(*multiRegistration)
	if !ok {
		return fmt.Errorf("registration is not a registration returned by multiNamespaceInformer")
	}
	i.mu.Lock()
	i.regs = slices.DeleteFunc(i.regs, func(x *multiRegistration) bool { return x == r })
	infs := maps.Clone(i.infs)
	i.mu.Unlock()
	for name, inf := range infs {
		if reg := r.take(name); reg != nil {
			if err := inf.RemoveEventHandler(reg); err != nil {
				return err
			}
		}
	}
	for _, l := range r.takeLeaving() {
		_ = l.inf.RemoveEventHandler(l.reg) // ends its leave: no call after this returns
	}
	return nil
}

func (i *multiInformer) AddIndexers(indexers toolscache.Indexers) error {
	i.mu.Lock()
	defer i.mu.Unlock()
	for _, inf := range i.infs {
		if err := inf.AddIndexers(indexers); err != nil {
			return err
		}
	}
	i.indexers = append(i.indexers, indexers)
	return nil
}

func (i *multiInformer) HasSynced() bool {
	for _, inf := range i.informers() {
		if !inf.HasSynced() {
			return false
		}
	}
	return true
}

func (i *multiInformer) HasSyncedChecker() toolscache.DoneChecker { return i }

func (i *multiInformer) Name() string {
	infs := i.informers()
	names := make([]string, 0, len(infs))
	for ns, inf := range infs {
		names = append(names, fmt.Sprintf("%s: %s", ns, inf.HasSyncedChecker().Name()))
	}
	return strings.Join(names, ", ")
}

// Done is closed once every namespace's informer of the first call has
// synced. The goroutine that closes it starts on the first call, and ends
// once they all have.
func (i *multiInformer) Done() <-chan struct{} {
	i.once.Do(func() {
		infs := i.informers()
		chs := make([]<-chan struct{}, 0, len(infs))
		for _, inf := range infs {
			chs = append(chs, inf.HasSyncedChecker().Done())
		}
		go allDone(chs, i.done)
	})
	return i.done
}

func (i *multiInformer) IsStopped() bool {
	for _, inf := range i.informers() {
		if !inf.IsStopped() {
			return false
		}
	}
	return true
}

// allDone closes done once every channel of chs is closed.
func allDone(chs []<-chan struct{}, done chan struct{}) {
	for _, ch := range chs {
		<-ch
	}
	close(done)
}

// multiRegistration is a handler's registrations with several informers.
type multiRegistration struct {
	// add registers the handler on an informer (of a namespace joining).
	add  func(cache.Informer) (toolscache.ResourceEventHandlerRegistration, error)
	mu   sync.Mutex // guards regs and leaving
	regs map[string]toolscache.ResourceEventHandlerRegistration
	// leaving are its registrations on informers of namespaces that left,
	// until their leave has been handled: RemoveEventHandler ends them.
	leaving []leavingReg
	once    sync.Once
	done    chan struct{}
}

func (r *multiRegistration) set(namespace string, reg toolscache.ResourceEventHandlerRegistration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.regs[namespace] = reg
}

// leavingReg is a registration handling a leave, until done is closed.
type leavingReg struct {
	inf  cache.Informer
	reg  toolscache.ResourceEventHandlerRegistration
	done <-chan struct{}
}

// leavingOn records a leave under way, forgetting those handled.
func (r *multiRegistration) leavingOn(inf cache.Informer, reg toolscache.ResourceEventHandlerRegistration, done <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.leaving = slices.DeleteFunc(r.leaving, func(l leavingReg) bool {
		select {
		case <-l.done:
			return true
		default:
			return false
		}
	})
	r.leaving = append(r.leaving, leavingReg{inf, reg, done})
}

func (r *multiRegistration) takeLeaving() []leavingReg {
	r.mu.Lock()
	defer r.mu.Unlock()
	l := r.leaving
	r.leaving = nil
	return l
}

// take removes and returns namespace's registration (nil: none).
func (r *multiRegistration) take(namespace string) toolscache.ResourceEventHandlerRegistration {
	r.mu.Lock()
	defer r.mu.Unlock()
	reg := r.regs[namespace]
	delete(r.regs, namespace)
	return reg
}

func (r *multiRegistration) registrations() map[string]toolscache.ResourceEventHandlerRegistration {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.regs)
}

func (r *multiRegistration) HasSynced() bool {
	for _, reg := range r.registrations() {
		if !reg.HasSynced() {
			return false
		}
	}
	return true
}

func (r *multiRegistration) HasSyncedChecker() toolscache.DoneChecker { return r }

func (r *multiRegistration) Name() string {
	regs := r.registrations()
	names := make([]string, 0, len(regs))
	for ns, reg := range regs {
		names = append(names, fmt.Sprintf("%s: %s", ns, reg.HasSyncedChecker().Name()))
	}
	return strings.Join(names, ", ")
}

func (r *multiRegistration) Done() <-chan struct{} {
	r.once.Do(func() {
		regs := r.registrations()
		chs := make([]<-chan struct{}, 0, len(regs))
		for _, reg := range regs {
			chs = append(chs, reg.HasSyncedChecker().Done())
		}
		go allDone(chs, r.done)
	})
	return r.done
}
