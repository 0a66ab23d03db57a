package kinformer

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/util/watchlist"
)

// initialEventsEnd annotates the bookmark that ends a streaming list's
// initial events (KEP-3157); its resourceVersion is the list's.
const initialEventsEnd = metav1.InitialEventsAnnotationKey

// streamStartTimeout: a server that streams lists sends the first object,
// or the end marker of an empty list, at once (after at most a few seconds
// of catching up with etcd). A client that sends nothing for this long
// took the request for a plain watch — a fake, or a wrapper around one —
// and the informer pages instead.
const streamStartTimeout = 10 * time.Second

// streamList lists with a watch that first sends every object as ADDED,
// then a bookmark marking the end. Objects go through the transform into a
// new map as they are decoded, so the whole list is never held in its wire
// or decoded form.
//
// The stream could go on as the watch, but it is closed at the end marker
// and the watch phase opens a plain watch from the list's resourceVersion
// instead: since 1.37 kube-apiserver gzips streaming lists
// (WatchListCompression) but not plain watches, and on a stream that goes on
// every later event is its own gzip member with its own Huffman tables,
// costing client and server CPU for each event while saving little. One
// more request, on the same HTTP/2 connection, costs far less.
//
// ok is false when the server does not offer streaming lists; the informer
// then remembers to page instead.
func (inf *Informer[T]) streamList(ctx context.Context) (o outcome, ok bool) {
	s, err := inf.openWatch(ctx, func(o *metav1.ListOptions) {
		yes := true
		o.SendInitialEvents = &yes
		// "" with NotOlderThan: a consistent snapshot, as fresh as a quorum read.
		o.ResourceVersion = ""
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	})
	if err != nil {
		if streamingRefused(err) {
			return inf.refuseStreaming(err)
		}
		return outcome{kind: listFailed, err: fmt.Errorf("list (streaming): %w", err)}, true
	}
	defer s.stop()

	items := map[string]T{}
	first := time.Now().Add(streamStartTimeout)
	received := false
	for {
		dl := deadlines{}
		if !received {
			dl.first = first
		}
		ev, why := s.next(ctx, dl)
		switch why {
		case ctxDone:
			return outcome{kind: stopped}, true
		case firstFired:
			return inf.refuseStreaming(fmt.Errorf("nothing received in %s", streamStartTimeout))
		case idleFired:
			return outcome{kind: listFailed, err: fmt.Errorf("list (streaming): %w: nothing received for %s", ErrIdle, s.idle)}, true
		case streamClosed:
			if received {
				// Cut off mid-list (a restart, a network blip): the
				// server does stream; try again after a backoff.
				return outcome{kind: listFailed, err: errors.New("list (streaming): the stream ended before its initial events did")}, true
			}
			// Nothing at all, or a server that ignores sendInitialEvents
			// (before 1.27) and never sends the end marker.
			return inf.refuseStreaming(errors.New("the stream ended before its initial events did"))
		}
		received = true
		if df, ok := ev.Object.(*decodeFailure); ok {
			inf.reportError(fmt.Errorf("list (streaming): %w", df.err))
			continue
		}
		if isNil(ev.Object) {
			inf.reportError(fmt.Errorf("list (streaming): %w: %s event without an object", ErrUnexpectedObject, ev.Type))
			continue
		}
		switch ev.Type {
		case watch.Added:
			obj, isT := ev.Object.(T)
			if !isT || isNil(obj) {
				inf.reportError(fmt.Errorf("list (streaming): %w: object of type %T, want %T", ErrUnexpectedObject, ev.Object, *new(T)))
				continue
			}
			inf.collect(items, obj, inf.sharedByDecoder())
		case watch.Bookmark:
			m, err := meta.Accessor(ev.Object)
			if err != nil || m.GetAnnotations()[initialEventsEnd] != "true" {
				continue // an ordinary bookmark: the end marker carries the version
			}
			if m.GetResourceVersion() == "" {
				return outcome{kind: listFailed, err: fmt.Errorf("list (streaming): %w: end marker without resourceVersion", ErrUnexpectedObject)}, true
			}
			inf.replaceAll(items, m.GetResourceVersion())
			return outcome{kind: listDone}, true
		case watch.Error:
			err := classify(apierrors.FromObject(ev.Object))
			if streamingRefused(err) {
				return inf.refuseStreaming(err)
			}
			return outcome{kind: listFailed, err: fmt.Errorf("list (streaming): %w", err)}, true
		default:
			// MODIFIED or DELETED before the end marker: the server is
			// watching, not streaming a list.
			return inf.refuseStreaming(fmt.Errorf("%s event before the initial events ended", ev.Type))
		}
	}
}

// mayStream tells whether a client can do streaming lists: not client-go's
// fake clients, which would take the request for a plain watch and never
// end the initial events. They say so through client-go's marker method,
// where they have it; the per-resource fakes do not, so they are recognised
// by their package.
func mayStream(lw any) bool {
	if watchlist.DoesClientNotSupportWatchListSemantics(lw) {
		return false
	}
	t := reflect.TypeOf(lw)
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return !strings.HasSuffix(t.PkgPath(), "/fake")
}

func (inf *Informer[T]) refuseStreaming(why error) (outcome, bool) {
	inf.log.Info("kinformer: the server does not offer streaming lists; paging instead", "reason", why.Error())
	inf.noStreaming = true
	return outcome{}, false
}

// streamingRefused recognises a server that does not take sendInitialEvents:
// one that rejects the parameter (422/400, "forbidden unless the WatchList
// feature gate is enabled") or the request.
func streamingRefused(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsMethodNotSupported(err) ||
		(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "sendInitialEvents"))
}
