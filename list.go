package kinformer

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/direct"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/store"
)

// list fills the cache afresh: by a watch-list where the server offers
// it, else page by page (or in one request after an expired continue
// token).
func (l *loop[T]) list(ctx context.Context) outcome {
	if g := l.opts.ListGate; g != nil && !l.w.status.Synced.Load() {
		// An initial list: in turn with the gate's other informers.
		if !g.enter(ctx) {
			return outcome{kind: listFailed, err: ctx.Err()}
		}
		defer g.leave()
	}
	l.w.pipe(l.pipes())
	defer func() {
		l.w.pipe(false)
		l.w.pipeEnd()
	}()
	switch {
	case l.st.phase == phaseListUnpaged:
		return l.pagedList(ctx, 0)
	case l.st.watchList && !l.st.pageOnce:
		return l.watchList(ctx)
	}
	return l.pagedList(ctx, l.opts.PageSize)
}

// pagedList reads the whole collection page by page (limit 0: in one
// request) into a new map, then swaps it into the cache and queues the
// differences.
func (l *loop[T]) pagedList(ctx context.Context, limit int64) outcome {
	items := l.w.cache.s.NewItems(0)
	opts := l.listOptions()
	opts.Limit = limit
	rv, continued, err := l.listPages(ctx, opts, items)
	switch {
	case isNoDirect(err):
		return outcome{kind: directRefused, err: err}
	case continued && errors.Is(err, ErrExpired):
		return outcome{kind: continueExpired, err: err}
	case err != nil:
		return outcome{kind: listFailed, err: fmt.Errorf("list: %w", err)}
	case rv == "":
		return outcome{kind: listFailed, err: fmt.Errorf("list: %w: the list has no resourceVersion", ErrUnexpectedObject)}
	}
	l.w.replace(items, rv, l.joining())
	return outcome{kind: listed}
}

// listPages reads what opts select, page by page, into items, and
// returns the list's resourceVersion; continued says whether an error came
// on a page after the first. The pages after the first carry only the
// continue token, which holds the resourceVersion (the server refuses
// both). This is the one paging loop.
func (l *loop[T]) listPages(ctx context.Context, opts metav1.ListOptions, items *store.Items[T]) (rv string, continued bool, err error) {
	page, decoding := l.clientPage, "client"
	if l.st.direct && l.direct.JSON() {
		page, decoding = l.directPage, "direct"
	}
	l.log.Debug("kinformer: paged list", "decoding", decoding, "limit", opts.Limit)
	for {
		next, cont, err := page(ctx, opts, items)
		if isNoDirect(err) {
			return "", opts.Continue != "", err
		}
		err = classify(err)
		l.obs.request("list", err)
		if err != nil {
			return "", opts.Continue != "", err
		}
		rv = next
		if opts.Continue = cont; cont == "" {
			return rv, false, nil
		}
		opts.ResourceVersion, opts.ResourceVersionMatch = "", ""
	}
}

// clientPage reads one page through the client's List into items.
func (l *loop[T]) clientPage(ctx context.Context, opts metav1.ListOptions, items *store.Items[T]) (rv, cont string, err error) {
	list, err := l.listFn(ctx, opts)
	if err == nil && isNil(list) {
		err = fmt.Errorf("%w: the client returned no list and no error", ErrUnexpectedObject)
	}
	if err != nil {
		return "", "", err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrUnexpectedObject, err)
	}
	// WithAlloc: each item its own allocation, so that a cached object
	// does not keep its whole page alive.
	err = meta.EachListItemWithAlloc(list, func(o runtime.Object) error {
		l.collectItem(items, o, l.w.prepare)
		return nil
	})
	if err != nil {
		return "", "", fmt.Errorf("%w: %v", ErrUnexpectedObject, err)
	}
	l.expect(opts, items.Len(), lm.GetRemainingItemCount())
	return lm.GetResourceVersion(), lm.GetContinue(), nil
}

// expect notes, from the first page of the first list, how many objects
// it will hold in all (run.go): those of the page and the server's
// count of the rest, where it gives one.
func (l *loop[T]) expect(opts metav1.ListOptions, got int, rest *int64) {
	if opts.Continue == "" && rest != nil && !l.w.status.Synced.Load() {
		l.w.status.Expected.Store(int64(got) + *rest)
	}
}

// directPage reads one page in JSON, decoded as it arrives
// (internal/jsonwatch), into items.
func (l *loop[T]) directPage(ctx context.Context, opts metav1.ListOptions, items *store.Items[T]) (rv, cont string, err error) {
	prepare := l.w.prepareDecoded
	if l.direct.SharesObjects() {
		prepare = prepared[T]
	}
	lm, err := l.direct.List(ctx, opts, func(o runtime.Object, err error) {
		if err != nil {
			l.w.report(fmt.Errorf("list: %w: %w", ErrUnexpectedObject, err))
			return
		}
		l.collectItem(items, o, prepare)
	})
	if g := (*direct.GarbledError)(nil); errors.As(err, &g) {
		err = fmt.Errorf("%w: %v", ErrUnexpectedObject, g)
	}
	if err == nil {
		l.expect(opts, items.Len(), lm.RemainingItemCount)
	}
	return lm.ResourceVersion, lm.Continue, err
}

// collectItem checks a listed object and prepares it into items.
func (l *loop[T]) collectItem(items *store.Items[T], o runtime.Object, prepare prepareFunc[T]) {
	obj, ok := o.(T)
	if !ok {
		l.w.report(fmt.Errorf("list: %w: item of type %T, want %T", ErrUnexpectedObject, o, *new(T)))
		return
	}
	if err := checkNamed(obj); err != nil {
		l.w.report(fmt.Errorf("list: %w: item %w", ErrUnexpectedObject, err))
		return
	}
	l.w.collect(items, store.Arrival[T]{Obj: obj}, prepare)
}

// watchListStartTimeout: a server that does watch-lists sends the first
// object, or the end marker of an empty list, at once (after at most a few
// seconds of catching up with etcd). A client that sends nothing for this
// long took the request for a plain watch — a fake, or a wrapper around one
// — and the informer pages instead.
const watchListStartTimeout = 10 * time.Second

// watchList lists with a watch that first sends every object as ADDED,
// then a bookmark marking the end (KEP-3157, "watch-list"). A watch-list
// answered with an error (the request itself, or an ERROR event before any
// object) is followed at once by a paged list, as in client-go's
// reflector, unless the server or the way to it is unavailable; one cut
// off mid-list is tried again after a backoff. Objects are
// prepared into a new map as they are decoded, so the whole list is never
// held in its wire or decoded form.
//
// The stream could go on as the watch, but it is closed at the end marker
// and the watch phase opens a plain watch from the list's resourceVersion
// instead: since 1.37 kube-apiserver gzips watch-lists
// (WatchListCompression) but not plain watches, and on a stream that goes on
// every later event is its own gzip member with its own Huffman tables,
// costing client and server CPU for each event while saving little. One
// more request, on the same HTTP/2 connection, costs far less.
func (l *loop[T]) watchList(ctx context.Context) outcome {
	s, err := l.openWatch(ctx, "watchlist", func(o *metav1.ListOptions) {
		yes := true
		o.SendInitialEvents = &yes
		// "" with NotOlderThan: a consistent snapshot, as fresh as a quorum read.
		o.ResourceVersion = ""
		o.ResourceVersionMatch = metav1.ResourceVersionMatchNotOlderThan
	})
	switch {
	case err == nil:
	case isNoDirect(err):
		return outcome{kind: directRefused, err: err}
	case watchListRefusedBy(err):
		return outcome{kind: watchListRefused, err: err}
	case !pageAfter(err):
		return outcome{kind: listFailed, err: fmt.Errorf("list (watch-list): %w", err)}
	default:
		// Answered with an error (a proxy, a partial server, a fake): a
		// paged list follows at once (step).
		return outcome{kind: watchListFailed, err: fmt.Errorf("list (watch-list): %w", err)}
	}
	defer s.stop()

	items := l.w.cache.s.NewItems(0)
	first := time.Now().Add(watchListStartTimeout)
	received := false
	for {
		c, err := l.read(ctx, s, deadlines{first: first}, "list (watch-list)", &received)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return outcome{kind: stopped}
		case errors.Is(err, errFirst):
			return outcome{kind: watchListRefused, err: fmt.Errorf("nothing received in %s", watchListStartTimeout)}
		case errors.Is(err, ErrIdle):
			return outcome{kind: listFailed, err: l.idle("list (watch-list)", s)}
		case isNoDirect(err):
			return outcome{kind: directRefused, err: err}
		case errors.Is(err, errEnded):
			// Cut off mid-list, or before anything came (a restart, a
			// network blip, a server shutting down): try again after a
			// backoff. A server that ignores sendInitialEvents (before
			// 1.27) does not close the stream: it sends no end marker,
			// which errFirst or a MODIFIED/DELETED event tells.
			return outcome{kind: listFailed, err: errors.New("list (watch-list): the stream ended before its initial events did")}
		case c.typ == Error && watchListRefusedBy(err):
			return outcome{kind: watchListRefused, err: err}
		case c.typ == Error && items.Len() == 0 && pageAfter(err):
			// An ERROR event for an answer, before any object.
			return outcome{kind: watchListFailed, err: fmt.Errorf("list (watch-list): %w", err)}
		case c.endOfList:
			return outcome{kind: listFailed, err: fmt.Errorf("list (watch-list): end marker: %w", err)}
		default: // an ERROR event, or a stream that broke
			return outcome{kind: listFailed, err: fmt.Errorf("list (watch-list): %w", err)}
		}
		switch {
		case c.typ == Added:
			l.w.collect(items, c.arrival(), s.prepare)
		case c.typ == Bookmark:
			if c.endOfList {
				l.w.replace(items, c.rv, l.joining())
				return outcome{kind: listed}
			}
			// an ordinary bookmark: the end marker carries the version
		default:
			// MODIFIED or DELETED before the end marker: the server is
			// watching, not listing.
			return outcome{kind: watchListRefused, err: fmt.Errorf("%s event before the initial events ended", c.typ)}
		}
	}
}

// pageAfter tells a failed watch-list that a paged list at once may get
// past: an answer from something between here and the data (a proxy, a
// partial server, a fake). Not a server or connection that is unavailable,
// nor a persistent refusal (forbidden, unauthorized, not found,
// kinformer.IsPersistent), which the LIST would meet alike: those wait out
// the backoff, and a forbidden informer makes one request per attempt, not
// two.
func pageAfter(err error) bool { return !unavailable(err) && !IsPersistent(err) }

// unavailable tells a failure of the way to the server, or of a server in
// trouble: a connection closed, refused, reset or timed out, 429, 503,
// 504. A LIST at once would meet the same (and add to a busy server's
// load): the watch-list is tried again after a backoff.
func unavailable(err error) bool {
	f, _ := failureOf(err)
	return f == FailureDown || f == FailureBusy
}

// watchListRefusedBy recognises a server that does not take
// sendInitialEvents: one that rejects the parameter (422/400, "forbidden
// unless the WatchList feature gate is enabled") or the request.
func watchListRefusedBy(err error) bool {
	return apierrors.IsInvalid(err) || apierrors.IsBadRequest(err) ||
		apierrors.IsNotAcceptable(err) || apierrors.IsMethodNotSupported(err) ||
		(apierrors.IsForbidden(err) && strings.Contains(err.Error(), "sendInitialEvents"))
}

// Pipelined initial delivery (SPEC section 14): the first list of an
// empty cache is not gathered whole before anyone sees it. Each listed
// object is put in the cache and its Added (CauseList) queued as it
// arrives, so that the handlers work, each on its own goroutine, while
// the list streams: the list's transfer and the handlers' work overlap
// instead of adding up. The stream never waits for a handler (queues hold
// what is cached, not copies). At the list's end the informer is synced
// and the state file gets the whole list in one batch; a registration's
// HasSynced still means the list is complete and it has handled all of
// it. A list cut off midway leaves what arrived in the cache, unsynced:
// the next list diffs against it (a re-list's semantics, cause still
// List). Re-lists, restores, sharded informers and a View's joins swap
// the whole list in as before.

// pipes says whether the list about to start delivers as it arrives:
// the cache is empty and has never synced, and no share or join says
// which objects are new.
func (l *loop[T]) pipes() bool {
	return l.sh == nil && l.joining() == nil && !l.w.status.Synced.Load() && l.w.cache.s.Size() == 0
}

// pipeOne takes r, listed under key at resourceVersion rv (the object's:
// the list's is known only at its end): it puts the object before it in
// the cache and queues its Added (Modified if the list named it twice),
// and holds r until the next object, or the list's end (pipeDone). So
// the last object is cached and handed out with the sync: a handler that
// has been given every object knows the list is complete, and the state
// file has it. The cache and the events stay in step (a handler added
// meanwhile gets each object once, by replay or by its event).
func (w *writer[T]) pipeOne(key string, r store.Ref[T], rv string) {
	w.disp.update(w.putHeld)
	w.held = &heldObject[T]{key: key, r: r, rv: rv}
}

// heldObject is the last object of a pipelined list, not yet cached
// (pipeOne).
type heldObject[T Object] struct {
	key, rv string
	r       store.Ref[T]
}

// putHeld puts the held object in the cache and queues its event, if
// there is one; inside an update.
func (w *writer[T]) putHeld(p publisher[T]) {
	h := w.held
	if h == nil {
		return
	}
	w.held = nil
	e := Event[T]{Type: Added, Key: h.key, ResourceVersion: h.rv, Cause: CauseList}
	old, existed := w.put(p, h.key, h.r)
	if existed {
		e.Type = Modified
	}
	w.emit(p, e, h.r, old)
}

// pipeEnd caches the held object of a pipelined list that did not
// complete, as what arrived before it is.
func (w *writer[T]) pipeEnd() {
	if w.held != nil {
		w.disp.update(w.putHeld)
	}
}

// pipeDone ends a pipelined list at rv: the cache holds items already
// (pipeOne); the state file gets them all (and only them, widened: it held
// a narrower projection's), and the informer is synced.
func (w *writer[T]) pipeDone(items *store.Items[T], rv string, widened bool) {
	w.cache.s.Refit(items) // the file gets all of them anyway
	if h := w.held; h != nil {
		h.r, _ = items.Get(h.key) // as refit left it
	}
	w.disp.update(func(p publisher[T]) {
		if w.state != nil {
			var b *persist.Batch[T] = w.state.Batch()
			if widened {
				b.Reset() // the file held the narrower objects, or none
			}
			for key, r := range items.All() {
				w.cache.s.PutState(b, key, r)
			}
			b.End(rv)
		}
		w.setRV(rv)
		w.putHeld(p)
		w.takeConfig()
		w.syncedLocked(p, true)
	})
	w.recovered()
}
