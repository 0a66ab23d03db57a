package kinformer

import (
	"time"
)

// Registration identifies a handler added with AddEventHandler, AddHandler
// or AddHandlerFuncs; pass it to RemoveEventHandler.
type Registration struct {
	l registered
}

// registered is what a Registration needs of its (generic) listener.
type registered interface {
	pending() int
	synced() bool
	oldest() time.Duration
	syncedChan() <-chan struct{}
	startup() HandlerStartup
}

// Pending returns how many events wait in the handler's queue: a measure of
// how far behind it is.
func (r *Registration) Pending() int {
	if r == nil || r.l == nil {
		return 0
	}
	return r.l.pending()
}

// OldestPending returns how long the oldest event not yet handled (queued,
// or being handled) has waited, 0 when there is none: the handler's lag in
// time. A handler stuck on one event shows that event's age.
func (r *Registration) OldestPending() time.Duration {
	if r == nil || r.l == nil {
		return 0
	}
	return r.l.oldest()
}

// HasSynced reports whether the handler has received every object of the
// cache as it was when the handler was added: the replay (Added with
// CauseReplay) for a handler added to a synced informer, else the events of
// the informer's first list. A controller waits for it before acting on
// "everything I know about", as it would on client-go's handler
// registrations.
func (r *Registration) HasSynced() bool {
	if r == nil || r.l == nil {
		return false
	}
	return r.l.synced()
}

// Synced returns a channel that is closed once HasSynced is true, to wait
// for it in a select (client-go's DoneChecker). A nil Registration's is
// nil: it never closes.
func (r *Registration) Synced() <-chan struct{} {
	if r == nil || r.l == nil {
		return nil
	}
	return r.l.syncedChan()
}

// HandlerFuncs is one ordered registration with a callback per event type:
// the callbacks of one registration are called one at a time, in the order
// of the events, so Added, Modified and Deleted of one object always arrive
// in the server's order. A nil callback means the type is not wanted.
type HandlerFuncs[T Object] struct {
	Added, Modified, Deleted, Bookmark, Error func(Event[T])
}

func (h HandlerFuncs[T]) mask() uint8 {
	var m uint8
	for i, fn := range [...]func(Event[T]){h.Added, h.Modified, h.Deleted, h.Bookmark, h.Error} {
		if fn != nil {
			m |= 1 << i
		}
	}
	return m
}

func (h HandlerFuncs[T]) call(e Event[T]) {
	var fn func(Event[T])
	switch e.Type {
	case Added:
		fn = h.Added
	case Modified:
		fn = h.Modified
	case Deleted:
		fn = h.Deleted
	case Bookmark:
		fn = h.Bookmark
	case Error:
		fn = h.Error
	}
	if fn != nil {
		fn(e)
	}
}
