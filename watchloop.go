package kinformer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// The watch loop is a small state machine. Its phase says what the informer
// needs next; each attempt ends with an outcome; step maps (phase, outcome)
// to the next phase and whether to back off first. All the recovery rules
// are in step:
//
//   - a list that worked → watch from its resourceVersion;
//   - a watch the server ended normally → watch again from the last
//     resourceVersion, at once, without re-listing;
//   - 410 Gone or "too large resource version" → re-list, at once if the
//     watch had made progress, else after a backoff;
//   - any other failure → the same phase again, after a backoff;
//   - resync due → re-list at once.
type phase uint8

const (
	phaseList  phase = iota // no usable resourceVersion: list, diff, replace
	phaseWatch              // watch from the remembered resourceVersion
)

func (p phase) String() string {
	if p == phaseList {
		return "list"
	}
	return "watch"
}

type outcomeKind uint8

const (
	stopped     outcomeKind = iota // the context ended; the loop returns
	listDone                       // a list replaced the cache
	listFailed                     // a list failed; err says why
	watchEnded                     // the server closed a healthy watch
	watchFailed                    // a watch could not open, or ended in error; err says why
	resyncDue                      // the resync period has passed
)

type outcome struct {
	kind     outcomeKind
	err      error
	received bool // watchFailed: the watch delivered events before failing
}

// step is the transition function of the watch loop.
func step(p phase, o outcome) (next phase, backoff bool) {
	switch o.kind {
	case stopped:
		return p, false
	case listDone, watchEnded:
		return phaseWatch, false
	case resyncDue:
		return phaseList, false
	case watchFailed:
		if needsRelist(o.err) {
			// At once after a watch that made progress; after a backoff
			// when the very first answer is 410/504, so that a server whose
			// watch cache lags cannot draw a storm of re-lists.
			return phaseList, !o.received
		}
		return phaseWatch, true
	default: // listFailed
		return phaseList, true
	}
}

// minHealthyWatch: a watch the server closes sooner than this without
// sending anything counts as failed, so a server that accepts and drops
// watches gets backoff instead of a hot loop.
const minHealthyWatch = time.Second

// loop runs the state machine until ctx is done.
func (inf *Informer[T]) loop(ctx context.Context) {
	p := phaseList
	if inf.ResourceVersion() != "" {
		p = phaseWatch // restarted: resume from the kept resourceVersion
	}
	bo := newBackoffState(inf.opts.Backoff)
	var resyncAt time.Time // zero: no resync scheduled
	if inf.opts.ResyncPeriod > 0 {
		// Also when resuming a kept cache: the period runs from the start.
		resyncAt = time.Now().Add(inf.opts.ResyncPeriod)
	}
	for ctx.Err() == nil {
		var o outcome
		switch p {
		case phaseList:
			o = inf.list(ctx)
			if o.kind == listDone && inf.opts.ResyncPeriod > 0 {
				resyncAt = time.Now().Add(inf.opts.ResyncPeriod)
			}
		case phaseWatch:
			o = inf.watch(ctx, resyncAt)
		}
		if ctx.Err() != nil {
			return
		}
		if o.err != nil {
			inf.reportError(o.err)
		}
		next, wait := step(p, o)
		if next == phaseList && p == phaseWatch {
			inf.log.Info("kinformer: re-listing", "reason", reasonOf(o), "resourceVersion", inf.ResourceVersion())
		}
		if wait {
			d := bo.fail(time.Now())
			inf.log.Debug("kinformer: backing off", "phase", p.String(), "wait", d)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			}
		}
		p = next
	}
}

func reasonOf(o outcome) string {
	if o.kind == resyncDue {
		return "resync"
	}
	if o.err != nil {
		return o.err.Error()
	}
	return ""
}

// reportError logs err, queues an Error event, and records it for
// WaitForSync if it is persistent and the cache has not synced yet.
func (inf *Informer[T]) reportError(err error) {
	inf.log.Warn("kinformer: "+err.Error(), "resourceVersion", inf.ResourceVersion())
	inf.handlersMu.RLock()
	inf.emit(Event[T]{Type: Error, Err: err, ResourceVersion: inf.ResourceVersion()})
	inf.handlersMu.RUnlock()
	if !inf.synced.Load() {
		// Only the latest failure counts: a 403 followed by a connection
		// error is no longer known to be a 403.
		var persistent error
		if IsPersistent(err) {
			persistent = err
		}
		inf.setSyncState(false, persistent)
	}
}

func (inf *Informer[T]) setRV(rv string) {
	if rv != "" {
		inf.rv.Store(&rv)
	}
}

func (inf *Informer[T]) listOptions() metav1.ListOptions {
	return metav1.ListOptions{LabelSelector: inf.opts.LabelSelector, FieldSelector: inf.opts.FieldSelector}
}

// list fills the cache afresh: by a streaming list where the server offers
// it, else page by page.
func (inf *Informer[T]) list(ctx context.Context) outcome {
	if !inf.noStreaming {
		if o, ok := inf.streamList(ctx); ok {
			return o
		}
	}
	return inf.pagedList(ctx)
}

// pagedList reads the whole collection page by page into a new map, then
// swaps it into the cache and emits the differences.
func (inf *Informer[T]) pagedList(ctx context.Context) outcome {
	items := map[string]T{}
	opts := inf.listOptions()
	opts.Limit = inf.opts.PageSize
	var rv string
	for {
		l, err := inf.listFn(ctx, opts)
		if err == nil && isNil(l) {
			err = fmt.Errorf("%w: the client returned no list and no error", ErrUnexpectedObject)
		}
		if err != nil {
			err = classify(err)
			if opts.Continue != "" && errors.Is(err, ErrExpired) {
				// The continue token outlived etcd's compaction window. A
				// paged list would only expire again on a busy cluster, so
				// take the rest in one unpaged, consistent read.
				inf.log.Info("kinformer: continue token expired, listing without paging")
				clear(items)
				opts.Continue, opts.Limit = "", 0
				continue
			}
			return outcome{kind: listFailed, err: fmt.Errorf("list: %w", err)}
		}
		lm, err := meta.ListAccessor(l)
		if err != nil {
			return outcome{kind: listFailed, err: fmt.Errorf("list: %w: %v", ErrUnexpectedObject, err)}
		}
		// WithAlloc: each item its own allocation, so that a cached object
		// does not keep its whole page alive.
		err = meta.EachListItemWithAlloc(l, func(o runtime.Object) error {
			obj, ok := o.(T)
			if !ok {
				inf.reportError(fmt.Errorf("list: %w: item of type %T, want %T", ErrUnexpectedObject, o, *new(T)))
				return nil
			}
			inf.collect(items, obj, false)
			return nil
		})
		if err != nil {
			return outcome{kind: listFailed, err: fmt.Errorf("list: %w: %v", ErrUnexpectedObject, err)}
		}
		rv = lm.GetResourceVersion()
		if opts.Continue = lm.GetContinue(); opts.Continue == "" {
			break
		}
	}
	if rv == "" {
		return outcome{kind: listFailed, err: fmt.Errorf("list: %w: the list has no resourceVersion", ErrUnexpectedObject)}
	}
	inf.replaceAll(items, rv)
	return outcome{kind: listDone}
}

// replaceAll swaps items in as the cache's whole content at rv, queues an
// event for every difference, and marks the informer synced.
func (inf *Informer[T]) replaceAll(items map[string]T, rv string) {
	inf.handlersMu.RLock()
	inf.cache.replace(items, func(typ EventType, obj, old T) {
		e := Event[T]{Type: typ, Object: obj, ResourceVersion: rv}
		if typ == Modified {
			e.Old = old
		}
		inf.emit(e)
	})
	inf.setRV(rv)
	inf.handlersMu.RUnlock()
	inf.setSyncState(true, nil)
}

// isNil reports whether a client returned a nil list, typed or not.
func isNil(o runtime.Object) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// collect adds a listed object to items. If the cache holds the same
// object at the same resourceVersion, that instance is kept and the new copy
// is dropped at once, untransformed: a re-list of a mostly unchanged
// collection then holds one copy of each object, not two.
func (inf *Informer[T]) collect(items map[string]T, obj T, shared bool) {
	key := inf.cache.keyFunc(obj)
	if old, ok := inf.cache.GetByKey(key); ok && old.GetResourceVersion() == obj.GetResourceVersion() {
		items[key] = old
		return
	}
	if obj, ok := inf.transform(obj, shared); ok {
		items[inf.cache.keyFunc(obj)] = obj
	}
}

// transform strips managedFields (unless kept), applies Options.Transform,
// and makes the result share strings and maps with earlier objects
// (intern.go).
//
// shared says the direct decoder has already interned the object and shared
// its maps (it does so only when there is no Transform).
func (inf *Informer[T]) transform(obj T, shared bool) (T, bool) {
	if !inf.opts.KeepManagedFields {
		obj.SetManagedFields(nil)
	}
	if inf.opts.Transform != nil {
		out, err := inf.opts.Transform(obj)
		if err == nil && isNil(out) {
			err = errors.New("it returned nil")
		}
		if err != nil {
			inf.reportError(fmt.Errorf("%w for %s: %w", ErrTransform, inf.cache.keyFunc(obj), err))
			return out, false
		}
		obj = out
	}
	if !shared {
		inf.sharer.shrink(obj)
	}
	return obj, true
}

// watchTimeout picks the server-side timeout of one watch, at random in
// [WatchTimeout, 2*WatchTimeout), so that informers started together do not
// all reconnect at the same instant.
func (inf *Informer[T]) watchTimeout() time.Duration {
	d := inf.opts.WatchTimeout
	return (d + rand.N(d)).Truncate(time.Second)
}

// openWatch opens a watch with bookmarks and a randomised server-side
// timeout; adjust sets the options that differ between a plain watch and a
// streaming list.
func (inf *Informer[T]) openWatch(ctx context.Context, adjust func(*metav1.ListOptions)) (*stream, error) {
	timeout := inf.watchTimeout()
	secs := int64(max(timeout/time.Second, 1))
	opts := inf.listOptions()
	opts.AllowWatchBookmarks = true
	opts.TimeoutSeconds = &secs
	adjust(&opts)
	wctx, cancel := context.WithCancel(ctx)
	s := &stream{cancel: cancel, idle: timeout + inf.opts.IdleMargin}
	var err error
	s.r, s.w, err = inf.openWatchStream(wctx, opts)
	if err == nil && s.r == nil && s.w == nil {
		err = fmt.Errorf("%w: the client returned no watch and no error", ErrUnexpectedObject)
	}
	if err != nil {
		if s.w != nil {
			s.w.Stop()
		}
		cancel()
		return nil, classify(err)
	}
	// The clocks start once the watch is open: opening may take a while
	// (discovery, a new connection), and must not count as watching.
	s.started = time.Now()
	s.last = s.started
	if s.r != nil {
		// Stop or a cancelled run closes the body, even through a
		// transport that ignores the request's context.
		s.unhook = context.AfterFunc(wctx, s.r.close)
	}
	return s, nil
}

// sharedByDecoder says whether the objects of the current watch were
// interned and their maps shared by the direct decoder. The loop calls it
// only while a watch it opened is running; a direct source is dropped only
// before a watch is opened through the client instead.
func (inf *Informer[T]) sharedByDecoder() bool {
	return inf.direct != nil && inf.direct.share
}

// openWatchStream opens a watch decoded directly where possible, else
// through the client's Watch.
func (inf *Informer[T]) openWatchStream(ctx context.Context, opts metav1.ListOptions) (*directReader, watch.Interface, error) {
	if inf.direct != nil {
		r, err := inf.direct.watch(ctx, opts)
		if !errors.Is(err, errNoDirect) {
			if err == nil {
				inf.log.Debug("kinformer: watch opened", "decoding", "direct", "resource", inf.direct.resource)
			}
			return r, nil, err
		}
		inf.log.Info("kinformer: decoding watches through the client", "reason", err.Error())
		inf.direct = nil
	}
	w, err := inf.watchFn(ctx, opts)
	return nil, w, err
}

// watch applies the events of a new watch from the remembered
// resourceVersion until it ends, fails, goes idle, or the resync is due.
func (inf *Informer[T]) watch(ctx context.Context, resyncAt time.Time) outcome {
	if !resyncAt.IsZero() && !time.Now().Before(resyncAt) {
		return outcome{kind: resyncDue}
	}
	s, err := inf.openWatch(ctx, func(o *metav1.ListOptions) { o.ResourceVersion = inf.ResourceVersion() })
	if err != nil {
		return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err)}
	}
	defer s.stop()

	received := false
	for {
		ev, why := s.next(ctx, deadlines{resync: resyncAt})
		switch why {
		case ctxDone:
			return outcome{kind: stopped}
		case resyncFired:
			return outcome{kind: resyncDue}
		case idleFired:
			return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w: nothing received for %s", ErrIdle, s.idle)}
		case streamClosed:
			if !received && time.Since(s.started) < minHealthyWatch {
				// Not an error worth an event (servers do this when
				// shutting down), but no reason to hammer them either.
				inf.log.Debug("kinformer: watch closed as soon as opened")
				return outcome{kind: watchFailed}
			}
			return outcome{kind: watchEnded}
		}
		if err := inf.apply(ev); err != nil {
			return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err), received: received}
		}
		received = true
	}
}

// apply applies one watch event to the cache and queues it for handlers.
// It returns an error only when the watch must end: the server sent an
// ERROR event. Garbage is reported and skipped.
func (inf *Informer[T]) apply(ev watch.Event) error {
	if df, ok := ev.Object.(*decodeFailure); ok {
		inf.reportError(fmt.Errorf("watch: %w", df.err))
		return nil
	}
	if isNil(ev.Object) {
		inf.reportError(fmt.Errorf("watch: %w: %s event without an object", ErrUnexpectedObject, ev.Type))
		return nil
	}
	switch ev.Type {
	case watch.Error:
		return classify(apierrors.FromObject(ev.Object))
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil || m.GetResourceVersion() == "" {
			inf.reportError(fmt.Errorf("watch: %w: bookmark without resourceVersion (%T)", ErrUnexpectedObject, ev.Object))
			return nil
		}
		obj, _ := ev.Object.(T)
		inf.handlersMu.RLock()
		inf.setRV(m.GetResourceVersion())
		inf.emit(Event[T]{Type: Bookmark, Object: obj, ResourceVersion: m.GetResourceVersion()})
		inf.handlersMu.RUnlock()
		return nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		inf.reportError(fmt.Errorf("watch: %w: event type %q", ErrUnexpectedObject, ev.Type))
		return nil
	}
	obj, ok := ev.Object.(T)
	if !ok {
		inf.reportError(fmt.Errorf("watch: %w: %s event with object of type %T, want %T", ErrUnexpectedObject, ev.Type, ev.Object, *new(T)))
		return nil
	}
	rv := obj.GetResourceVersion()
	key := inf.cache.keyFunc(obj)
	obj, ok = inf.transform(obj, inf.sharedByDecoder())

	inf.handlersMu.RLock()
	defer inf.handlersMu.RUnlock()
	inf.setRV(rv)
	e := Event[T]{Object: obj, ResourceVersion: inf.ResourceVersion()}
	switch {
	case ev.Type == watch.Deleted || !ok:
		// A deletion always removes, whether or not its final state
		// transforms. An object whose new state fails to transform is
		// dropped, as a re-list would drop it: the cache never keeps a state
		// the server has moved past.
		old, existed := inf.cache.remove(key)
		if !existed {
			return nil // never cached: nothing to tell
		}
		e.Type = Deleted
		if !ok {
			e.Object = old
		}
	default:
		if old, existed := inf.cache.put(key, obj); existed {
			e.Type, e.Old = Modified, old
		} else {
			e.Type = Added
		}
	}
	inf.emit(e)
	return nil
}
