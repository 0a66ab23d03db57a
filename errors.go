package kinformer

import (
	"errors"
	"fmt"
	"strings"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/store"
)

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

// classify adds the informer's sentinel to a server error, keeping the
// original in the chain so apierrors.IsXxx still works.
func classify(err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, ErrExpired), errors.Is(err, ErrTooLargeResourceVersion):
		return err
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return fmt.Errorf("%w: %w", ErrExpired, err)
	case isTooLargeResourceVersion(err):
		return fmt.Errorf("%w: %w", ErrTooLargeResourceVersion, err)
	}
	return err
}

// needsRelist reports whether an error means the remembered resourceVersion
// is unusable and only a fresh list can continue.
func needsRelist(err error) bool {
	return errors.Is(err, ErrExpired) || errors.Is(err, ErrTooLargeResourceVersion)
}

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

// isTooLargeResourceVersion recognises the server's 504 "Too large resource
// version": by its status cause, or by its message on servers that predate
// the cause.
func isTooLargeResourceVersion(err error) bool {
	if apierrors.HasStatusCause(err, metav1.CauseTypeResourceVersionTooLarge) {
		return true
	}
	var st apierrors.APIStatus
	return apierrors.IsTimeout(err) && errors.As(err, &st) &&
		strings.Contains(st.Status().Message, "Too large resource version")
}
