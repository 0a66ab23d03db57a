package clientgo

import (
	"errors"
	"fmt"
	"sync"
	"time"

	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kinformer/kinformer"
)

// client-go handlers on a kinformer informer: each a registration of its
// own (handle), called on its goroutine as client-go's listener calls it
// (a panic recovered, then a pause), removed as RemoveEventHandler
// removes it, or leaving with a Deleted for every object (Leave).

// handle is a client-go handler's registration. The handler runs on its
// kinformer registration's goroutine, through call.
type handle[T kinformer.Object] struct {
	inf    *kinformer.Informer[T]
	reg    *kinformer.Registration
	name   string
	resync time.Duration // 0: none
	logger klog.Logger   // where a panic of the handler is reported
	// stopping returns a channel closed when the informer's run ends
	// (nil: not running): it cuts a pause after a panic short.
	stopping func() <-chan struct{}

	// crashed: the last call panicked and the panic was recovered; the
	// next call pauses first (crashPause). Only the registration's
	// goroutine, which makes the calls one at a time, touches it.
	crashed bool

	mu       sync.Mutex    // guards inCall and removed
	inCall   bool          // the handler is running
	removed  bool          // RemoveEventHandler was called: no call begins any more
	removing chan struct{} // closed when removed is set: ends a pause
	once     sync.Once     // of unregister
	shutdown chan struct{}
}

// call runs fn, a call of the handler, unless the handler was removed.
// A panic goes to client-go's crash handlers (utilruntime.PanicHandlers,
// which log "Observed a panic"); then, as client-go's informers do, it
// crashes the process if utilruntime.ReallyCrash (the default), and
// otherwise skips the event and goes on with the next, a second later as
// client-go's listener does (crashPause; the pause ends early if the
// handler is removed or the informer stops).
func (h *handle[T]) call(fn func()) {
	if h.crashed {
		h.crashed = false
		h.pause()
	}
	h.mu.Lock()
	if h.removed {
		h.mu.Unlock()
		return
	}
	h.inCall = true
	h.mu.Unlock()
	panicked := true // until fn returns
	defer func() {
		h.crashed = panicked
		h.mu.Lock()
		h.inCall = false
		removed := h.removed
		h.mu.Unlock()
		if removed {
			// Removed during this call: the removal left the rest to it.
			h.unregister()
		}
	}()
	defer func() {
		if r := recover(); r != nil {
			// HandleCrash panicked again (ReallyCrash). kinformer would
			// recover that panic and go on: crash where nothing recovers.
			go func() { panic(r) }()
			select {}
		}
	}()
	defer utilruntime.HandleCrashWithLogger(h.logger)
	fn()
	panicked = false
}

// pause waits crashPause, or until the handler is removed or the
// informer's run ends. It runs before the call's inCall is set: a removal
// meanwhile unregisters at once, and kinformer's removal, which waits for
// the registration's callback, waits only for the pause to see it.
func (h *handle[T]) pause() {
	t := time.NewTimer(crashPause)
	defer t.Stop()
	select {
	case <-t.C:
	case <-h.removing:
	case <-h.stopping():
	}
}

// remove stops the handler's calls without waiting for one in progress,
// as client-go's RemoveEventHandler: the kinformer registration is removed
// now if the handler is not running, else when its call returns, on its
// own goroutine (where kinformer's removal does not wait). Either way
// ShutdownChan is closed then.
func (h *handle[T]) remove() {
	h.mu.Lock()
	if h.removed {
		h.mu.Unlock()
		return
	}
	h.removed = true
	close(h.removing)
	running := h.inCall
	h.mu.Unlock()
	if !running {
		// A call that begins meanwhile sees removed and returns at once:
		// kinformer's removal waits for that alone.
		h.unregister()
	}
}

func (h *handle[T]) unregister() {
	h.once.Do(func() {
		h.inf.RemoveEventHandler(h.reg)
		close(h.shutdown)
	})
}

// ShutdownChan is closed once the handler has been removed
// (RemoveEventHandler) and is not running: what client-go's
// cache.ShutDownEventHandler waits for. Unlike client-go's, it is not
// closed when the informer stops: its handlers stay registered with the
// kinformer informer, which may run again.
func (h *handle[T]) ShutdownChan() <-chan struct{} { return h.shutdown }

func (h *handle[T]) HasSynced() bool { return h.reg.HasSynced() }

func (h *handle[T]) HasSyncedChecker() cache.DoneChecker {
	return doneChecker{name: h.name, done: h.reg.Synced()}
}

// doneChecker is a cache.DoneChecker over a channel.
type doneChecker struct {
	name string
	done <-chan struct{}
}

func (d doneChecker) Name() string          { return d.name }
func (d doneChecker) Done() <-chan struct{} { return d.done }

func (s *informer[T]) AddEventHandler(handler cache.ResourceEventHandler) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{})
}

func (s *informer[T]) AddEventHandlerWithResyncPeriod(handler cache.ResourceEventHandler, resyncPeriod time.Duration) (cache.ResourceEventHandlerRegistration, error) {
	return s.AddEventHandlerWithOptions(handler, cache.HandlerOptions{ResyncPeriod: &resyncPeriod})
}

// AddEventHandlerWithOptions registers handler as one ordered kinformer
// registration. Its resync period, as client-go's, is at least a second;
// a period shorter than the informer's shortest one so far lowers that
// before the start and is raised to it after; after a start without any,
// the handler gets no resync.
func (s *informer[T]) AddEventHandlerWithOptions(handler cache.ResourceEventHandler, options cache.HandlerOptions) (cache.ResourceEventHandlerRegistration, error) {
	if handler == nil {
		return nil, errors.New("clientgo: nil handler")
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.stopped {
		return nil, fmt.Errorf("handler %v was not added to shared informer because it has stopped already", handler)
	}
	logger := klog.Background()
	if options.Logger != nil {
		logger = *options.Logger
	}
	resync := s.defaultResync
	if options.ResyncPeriod != nil {
		resync = *options.ResyncPeriod
	}
	if resync > 0 {
		if resync < minimumResyncPeriod {
			logger.Info("Warning: resync period is too small. Changing it to the minimum allowed value", "resyncPeriod", resync, "minimumResyncPeriod", minimumResyncPeriod)
			resync = minimumResyncPeriod
		}
		switch {
		case s.started && s.resyncCheck == 0:
			logger.Info("Warning: the specified resyncPeriod is invalid because this shared informer doesn't support resyncing", "desired", resync)
			resync = 0
		case s.started && resync < s.resyncCheck:
			logger.Info("Warning: resync period is smaller than resync check period and the informer has already started. Changing it to the resync check period", "resyncPeriod", resync, "resyncCheckPeriod", s.resyncCheck)
			resync = s.resyncCheck
		case !s.started && (s.resyncCheck == 0 || resync < s.resyncCheck):
			s.resyncCheck = resync
		}
	}
	h := &handle[T]{inf: s.inf, name: fmt.Sprintf("%T", handler), resync: resync, logger: logger,
		stopping: s.stopping, removing: make(chan struct{}), shutdown: make(chan struct{})}
	h.reg = s.inf.AddHandlerFuncs(kinformer.HandlerFuncs[T]{
		Added: func(e kinformer.Event[T]) {
			h.call(func() {
				handler.OnAdd(e.Object, e.Cause == kinformer.CauseList || e.Cause == kinformer.CauseReplay || e.Cause == kinformer.CauseRestore || e.Cause == kinformer.CauseJoin)
			})
		},
		Modified: func(e kinformer.Event[T]) { h.call(func() { handler.OnUpdate(e.Old, e.Object) }) },
		Deleted: func(e kinformer.Event[T]) {
			h.call(func() {
				if e.Cause == kinformer.CauseRelist || e.Cause == kinformer.CauseLeave {
					handler.OnDelete(cache.DeletedFinalStateUnknown{Key: e.Key, Obj: e.Object})
					return
				}
				handler.OnDelete(e.Object)
			})
		},
	})
	s.handlers[h] = struct{}{}
	// The informer's run resends, whoever runs it (this Run, or a
	// Factory for a shared informer).
	s.inf.ResendEvery(h.reg, h.resync)
	return h, nil
}

// RemoveEventHandler removes a handler and returns at once, as client-go's:
// no call of the handler begins after it, but one in progress may still be
// running. cache.ShutDownEventHandler waits for that call too (see the
// handle's ShutdownChan). kinformer's own Informer.RemoveEventHandler is
// the waiting form.
func (s *informer[T]) RemoveEventHandler(reg cache.ResourceEventHandlerRegistration) error {
	h, ok := reg.(*handle[T])
	if !ok {
		return fmt.Errorf("clientgo: %T is not a registration of this informer", reg)
	}
	s.mu.Lock()
	_, registered := s.handlers[h]
	delete(s.handlers, h)
	s.mu.Unlock()
	if registered {
		h.remove()
	}
	return nil
}

// leave is Leave for one of s's registrations.
func (s *informer[T]) leave(reg cache.ResourceEventHandlerRegistration) (<-chan struct{}, error) {
	h, ok := reg.(*handle[T])
	if !ok {
		return nil, fmt.Errorf("clientgo: %T is not a registration of this informer", reg)
	}
	s.mu.Lock()
	_, registered := s.handlers[h]
	s.mu.Unlock()
	if !registered {
		done := make(chan struct{})
		close(done)
		return done, nil
	}
	// Still registered here: a RemoveEventHandler ends the leave.
	return s.inf.Leave(h.reg), nil
}

// Leave removes a handler of an informer of this package the way a
// namespace leaves a multi-namespace cache: after the events already
// queued for it, the handler gets OnDelete, with a
// cache.DeletedFinalStateUnknown, for every object the informer holds
// (kinformer's Informer.Leave), and nothing after. The returned channel
// is closed once it has handled them; the informer must run meanwhile. A
// RemoveEventHandler of reg ends the leave at once (and forgets reg; do
// so once the channel is closed).
func Leave(inf cache.SharedIndexInformer, reg cache.ResourceEventHandlerRegistration) (<-chan struct{}, error) {
	l, ok := inf.(interface {
		leave(cache.ResourceEventHandlerRegistration) (<-chan struct{}, error)
	})
	if !ok {
		return nil, fmt.Errorf("clientgo: Leave: %T is not an informer of this package", inf)
	}
	return l.leave(reg)
}
