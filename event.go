package kinformer

// EventType says what happened to an object. The values are the wire strings
// of the Kubernetes watch protocol.
type EventType string

const (
	Added    EventType = "ADDED"
	Modified EventType = "MODIFIED"
	Deleted  EventType = "DELETED"
	Bookmark EventType = "BOOKMARK"
	Error    EventType = "ERROR"
)

// eventTypes lists the valid types in a stable order; its index is the bit
// used in a registration's mask.
var eventTypes = [...]EventType{Added, Modified, Deleted, Bookmark, Error}

// EventTypes returns every event type, in the order Added, Modified,
// Deleted, Bookmark, Error. The slice is the caller's.
func EventTypes() []EventType { return append([]EventType(nil), eventTypes[:]...) }

func (t EventType) bit() (uint8, bool) {
	for i, et := range eventTypes {
		if et == t {
			return 1 << i, true
		}
	}
	return 0, false
}

// Cause says where an event came from: read off the watch, or made up by
// the informer from what it knows.
type Cause uint8

const (
	// CauseWatch: the server sent this event on the watch.
	CauseWatch Cause = iota
	// CauseList: the first list of the informer's life found the object.
	CauseList
	// CauseRelist: a later list (after 410 Gone, "too large resource
	// version", or a resync) differed from the cache. A Deleted with this
	// cause is inferred: the object is gone, but its final state and the
	// time it went are unknown (client-go's DeletedFinalStateUnknown).
	CauseRelist
	// CauseReplay: a handler added to a running informer receives Added for
	// every object already cached.
	CauseReplay
	// CauseTransform: the object's new state failed Options.Transform, so
	// the informer dropped it from the cache (Deleted, with the last state
	// it had).
	CauseTransform
	// CauseRestore: the object was loaded from the informer's state file
	// (Options.StateDir) as the informer started; the events that follow
	// bring it up to date with the server.
	CauseRestore
	// CauseReshard: the replica's share of a sharded resource changed
	// (Options.Sharding): Added for an object that joined it, Deleted for
	// one that left it. The object itself may not have changed.
	CauseReshard
	// CauseResend: Informer.Resend queued the object again for one
	// registration, unchanged (Modified, Old the same object): client-go's
	// periodic handler resync. No change was seen.
	CauseResend
	// CauseJoin: an informer joined a View (a namespace added to it, or
	// one whose labels came to match its namespace selector): Added for
	// each object the informer had, or listed, as it joined, given to the
	// view's handlers registered before.
	CauseJoin
	// CauseLeave: an informer left a View (a namespace removed from it,
	// deleted, or whose labels no longer match its namespace selector):
	// Deleted for each object the view's handlers were given from it and
	// not yet told gone. The objects themselves may still exist.
	CauseLeave
	// CauseGone: the server no longer serves the resource (its list
	// answered 404 Not Found: a custom resource whose
	// CustomResourceDefinition was deleted), so the informer emptied its
	// cache: Deleted for each object it still held. The informer lists
	// again, with backoff, and fills up again (Added) if the resource
	// returns.
	CauseGone
)

func (c Cause) String() string {
	switch c {
	case CauseWatch:
		return "watch"
	case CauseList:
		return "list"
	case CauseRelist:
		return "relist"
	case CauseReplay:
		return "replay"
	case CauseTransform:
		return "transform"
	case CauseRestore:
		return "restore"
	case CauseReshard:
		return "reshard"
	case CauseResend:
		return "resend"
	case CauseJoin:
		return "join"
	case CauseLeave:
		return "leave"
	case CauseGone:
		return "gone"
	}
	return "unknown"
}

// Event is what a handler receives.
//
//   - [Added]: Object is the new object.
//   - [Modified]: Object is the new state, Old the previously cached state.
//   - [Deleted]: Object is the last known state.
//   - [Bookmark]: Object carries only a resourceVersion (it may be the zero
//     value); the cache is unchanged.
//   - [Error]: Err says what went wrong; classify it with errors.Is
//     ([ErrExpired], [ErrTransform], …) or k8s.io/apimachinery/pkg/api/errors;
//     the message names the object when the error concerns one; Failure
//     says what kind of failure a list or watch met (the server down,
//     refusing, busy, or other), as the informer's backoff takes it;
//     Routine says the informer expects to get over it by itself at its
//     next attempt (a reconnect to a server down or busy, before its
//     backoff has grown), and logged it at Debug: programs that log Error
//     events do the same to stay quiet on routine reconnects. Object is
//     the zero value.
//
// Key is the object's cache key (empty for Bookmark and Error), and Cause
// says whether the server sent the event or the informer inferred it.
// ResourceVersion is the resourceVersion the informer had reached with this
// event. Objects are shared with the cache and other handlers: do not modify
// them.
type Event[T Object] struct {
	Type            EventType
	Object          T
	Old             T
	Key             string
	ResourceVersion string
	Cause           Cause
	Failure         Failure // Error only
	Routine         bool    // Error only
	Err             error
}
