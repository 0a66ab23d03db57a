package kinformer

import (
	"errors"

	apierrors "k8s.io/apimachinery/pkg/api/errors"

	"github.com/kinformer/kinformer/internal/store"
)

// What an informer tells its handlers and callers: the events, their
// causes, and the errors (below) that Error events and the API carry.

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

// The sentinels say what went wrong without the package's name: they are
// found inside longer messages ("watch: resource version expired: ...").
// Errors the package makes at its API ("kinformer: WaitForResourceVersion:
// ...") start with "kinformer: ".
var (
	// ErrExpired means the server no longer has the history the informer
	// asked for (410 Gone, or an expired continue token). The informer
	// re-lists and diffs against its cache; ERROR events carry it so that
	// handlers can tell a re-list is under way.
	ErrExpired = errors.New("resource version expired")

	// ErrTooLargeResourceVersion means the server has not yet caught up to
	// the resourceVersion asked for (HTTP 504 "Too large resource version").
	// The informer re-lists, like for ErrExpired.
	ErrTooLargeResourceVersion = errors.New("too large resource version")

	// ErrAnotherHistory means the server's history is not the one the
	// cache came from: a new connection led to another cluster (another
	// certificate authority, or another kube-system namespace uid), or a
	// list came back at a resourceVersion below the cache's (another
	// cluster, or etcd restored from a backup). The informer lists from
	// scratch and diffs against its cache: what the server lacks is
	// Deleted, what differs Modified. An ERROR event and a log line say
	// so.
	ErrAnotherHistory = errors.New("another history")

	// ErrIdle means a watch received nothing, not even a bookmark, for longer
	// than its server-side timeout plus a margin: the connection is taken as
	// dead, dropped, and the watch resumed.
	ErrIdle = errors.New("watch idle for too long")

	// ErrUnexpectedObject means the server sent something the informer
	// cannot use: an event of an unknown type, an object of the wrong type
	// or without a name, a list that is not one. The event or item is
	// skipped and the watch goes on; a list that is not one is retried.
	ErrUnexpectedObject = errors.New("unexpected object from the server")

	// ErrTransform wraps an error returned by Options.Transform. The object
	// it concerns is not cached and the informer goes on.
	ErrTransform = errors.New("transform failed")

	// ErrFields means Options.Fields names something that is not a field
	// of the objects' type: the informer does not start.
	ErrFields = errors.New("Options.Fields")

	// ErrUnknownEventType is returned by AddEventHandler for a type that is
	// not one of Added, Modified, Deleted, Bookmark or Error.
	ErrUnknownEventType = errors.New("unknown event type")

	// ErrUnknownIndex is returned by Cache.ByIndex, ByIndexKept,
	// IndexKeys and IndexValues for an index that was not configured
	// ("unknown index", with the index's name).
	ErrUnknownIndex = store.ErrUnknownIndex

	// ErrSnapshot means the informer's state file (Options.StateDir)
	// could not be used: damaged, truncated, empty, of another watch or
	// format, in use by another informer, or not writable. The informer
	// reports it in an Error event and a log line, sets a damaged file
	// aside (renamed with the suffix ".bad"), and lists from scratch.
	ErrSnapshot = errors.New("state snapshot unusable")

	// ErrMutated means the mutation detector (Options.DetectMutations)
	// found a cached object changed in place: by a handler, a reader of the
	// cache, or a Transform's leftover reference, which must copy
	// (DeepCopy) before changing anything. Cached objects share maps and
	// strings with each other, so one change may show in many objects: each
	// is reported once, in an Error event whose message names its key and
	// what differs, and an error log line. The informer goes on.
	ErrMutated = errors.New("cached object modified in place")

	// ErrRunning is returned by Run when the informer is already running.
	ErrRunning = errors.New("informer already running")

	// ErrStarted is returned for what can be done only before an informer
	// first starts (SetTransform; a factory's consumer asking a started
	// informer for the mutation detector).
	ErrStarted = errors.New("informer already started")

	// ErrFactoryStopped is returned by Shared and Dynamic after
	// Factory.Stop: a stopped factory would never start the informer it
	// returned.
	ErrFactoryStopped = errors.New("factory stopped")
)

// IsPersistent reports whether retrying cannot help without someone changing
// something: permissions (403, 401), the resource (404, 405), or the request
// (a bad selector: 400, 422; a media type the server refuses: 406, 415).
// WaitForSync returns such errors instead of waiting; the informer itself
// still retries with backoff. Programs that map errors to exit codes or
// readiness use it to agree with WaitForSync.
func IsPersistent(err error) bool {
	return apierrors.IsForbidden(err) || apierrors.IsUnauthorized(err) ||
		apierrors.IsNotFound(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsInvalid(err) || apierrors.IsMethodNotSupported(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err)
}
