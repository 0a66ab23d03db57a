package kinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"reflect"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/intern"
)

// The watch loop is a small state machine. Its state says what the
// informer needs next and how it gets it; each attempt ends with an outcome;
// step maps (state, outcome) to the next state and whether to back off
// first. All the recovery rules are in step:
//
//   - a list that worked → watch from its resourceVersion;
//   - a watch the server ended normally → watch again from the last
//     resourceVersion, at once, without re-listing;
//   - a watch closed as soon as it opened, with nothing on it → watch again
//     after a backoff (servers do this when shutting down);
//   - 410 Gone or "too large resource version" → re-list, at once if the
//     watch had made progress, else after a backoff;
//   - a paged list whose continue token expired → one unpaged list, at once;
//   - a server without watch-lists → page instead, at once and for good;
//   - a server or resource that refuses direct decoding → the client's
//     Watch, at once and for good;
//   - any other failure → the same phase again, after a backoff;
//   - resync due → re-list at once;
//   - the share of a sharded informer grew → list the slots that joined
//     alone, at the watch's resourceVersion, where the server filters and
//     the informer is synced and caught up; else re-list; a list of the
//     joined slots that fails → re-list at once;
//   - a cache restored from its state file → a one-object list for the
//     server's current resourceVersion (the probe), then watch from the
//     file's; synced once the watch reaches the probe's resourceVersion.
type phase uint8

const (
	phaseList        phase = iota // no usable resourceVersion: list, diff, replace
	phaseListUnpaged              // as phaseList, in one unpaged request
	phaseWatch                    // watch from the remembered resourceVersion
	phaseProbe                    // restored: learn the server's resourceVersion, to catch up to
	phaseListJoined               // sharded: list the slots that joined the share, at the watch's resourceVersion
)

func (p phase) String() string {
	switch p {
	case phaseList:
		return "list"
	case phaseListUnpaged:
		return "list (unpaged)"
	case phaseProbe:
		return "probe"
	case phaseListJoined:
		return "list (joined slots)"
	}
	return "watch"
}

// state is where the loop is, and what it has learnt about the server.
type state struct {
	phase     phase
	watchList bool // list with a watch-list (sendInitialEvents), not pages
	direct    bool // decode watches directly (internal/protowatch, internal/jsonwatch)
	// joinable: when the share grows, the slots that joined can be listed
	// alone (caught up, synced, and the server filters by the share).
	joinable bool
}

type outcomeKind uint8

const (
	stopped          outcomeKind = iota // the context ended; the loop returns
	listed                              // a list replaced the cache
	listFailed                          // a list failed; err says why
	continueExpired                     // a paged list's continue token expired
	watchListRefused                    // the server does not do watch-lists; err says how we know
	watchEnded                          // the server closed a healthy watch
	watchClosedEarly                    // a watch closed as soon as it opened, with nothing on it
	watchFailed                         // a watch could not open, or ended in error; err says why
	directRefused                       // direct decoding is not possible here; err says why
	resyncDue                           // the resync period has passed
	probed                              // the probe learnt the resourceVersion to catch up to
	resharded                           // the share of a sharded informer changed during a watch
	shareGrew                           // the share grew: objects may have joined
)

type outcome struct {
	kind     outcomeKind
	err      error
	received bool // watchFailed: the watch delivered events before failing
	// healthy: a watch still delivered healthyWatch after it opened: the
	// server is well, and the backoff starts again from its first wait.
	healthy bool
}

// step is the transition function of the watch loop.
func step(s state, o outcome) (next state, backoff bool) {
	switch o.kind {
	case stopped, resharded:
		return s, false
	case listed, watchEnded, probed:
		s.phase = phaseWatch
		return s, false
	case resyncDue:
		s.phase = phaseList
		return s, false
	case continueExpired:
		// The token outlived etcd's compaction window. A paged list would
		// only expire again on a busy cluster: take it in one consistent
		// read.
		s.phase = phaseListUnpaged
		return s, false
	case watchListRefused:
		s.watchList = false
		return s, false
	case directRefused:
		s.direct = false
		return s, false
	case watchClosedEarly:
		return s, true
	case watchFailed:
		if needsRelist(o.err) {
			// At once after a watch that made progress; after a backoff
			// when the very first answer is 410/504, so that a server whose
			// watch cache lags cannot draw a storm of re-lists.
			s.phase = phaseList
			return s, !o.received
		}
		return s, true
	case shareGrew:
		switch {
		case s.phase == phaseWatch && s.joinable:
			// List the slots that joined at the watch's resourceVersion;
			// the watch then goes on from it.
			s.phase = phaseListJoined
		case s.phase != phaseListUnpaged:
			s.phase = phaseList
		}
		return s, false
	default: // listFailed
		if s.phase == phaseListJoined {
			// Compacted, or the server cannot list at that version:
			// re-list the whole share, at once.
			s.phase = phaseList
			return s, false
		}
		if s.phase != phaseProbe {
			s.phase = phaseList
		}
		return s, true
	}
}

// firstPhase is where a run starts: with the resourceVersion it keeps
// (haveRV), whether it had synced, whether its share grew since (or a
// re-list for a growth did not finish), and whether it is sharded.
func firstPhase(haveRV, synced, shareGrew, sharded bool) phase {
	switch {
	case !haveRV:
		return phaseList
	case synced && !shareGrew:
		return phaseWatch // restarted: resume from the kept resourceVersion
	case synced:
		return phaseList // restarted with a share that grew
	case sharded:
		// Restored, sharded: the file may lack slots the replica did not
		// serve when it was written. List, diffed against the restored
		// cache.
		return phaseList
	}
	return phaseProbe // restored: catch up before saying synced
}

// healthyWatch: a watch that still delivers this long after it opened
// shows the server well, and resets the backoff. Without it, faults a
// minute apart (less than Backoff.ResetAfter) would each wait longer than
// the last, up to Backoff.Max, though the server was fine in between.
const healthyWatch = 10 * time.Second

// minHealthyWatch: a watch the server closes sooner than this without
// sending anything counts as failed, so a server that accepts and drops
// watches gets backoff instead of a hot loop.
const minHealthyWatch = time.Second

// loop is an informer's watch loop, with all that only its goroutine
// touches.
type loop[T Object] struct {
	listFn  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
	opts    *Options[T]
	w       writer[T]
	direct  *directWatcher // nil: watches go through watchFn only
	st      state          // kept between runs: what was learnt about the server
	log     *slog.Logger
	obs     *observer // metrics; nil for none

	// target is the server's resourceVersion at the start of a restored
	// informer, which it must reach to be synced; "" when not catching up.
	target string
	// quiet is how long a catch-up watch may be silent before the
	// restored informer counts as caught up: a few of the probe's round
	// trips.
	quiet time.Duration
	// stateOpened: the state file has been opened (and loaded) once.
	stateOpened bool
	// sh is the share of a sharded informer; nil if not sharded.
	sh *shardLoop
}

func newLoop[T Object, L runtime.Object](lw ListerWatcher[L], o *Options[T], c *Cache[T], s *status, d *dispatcher[T], log *slog.Logger, obs *observer) *loop[T] {
	l := &loop[T]{
		listFn:  func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) { return lw.List(ctx, lo) },
		watchFn: lw.Watch,
		opts:    o,
		w: writer[T]{cache: c, status: s, disp: d, log: log, transform: o.Transform,
			keepManaged: o.KeepManagedFields, share: &intern.Sharer{}},
		log: log,
		obs: obs,
	}
	l.st.watchList = !o.DisableStreamingList && mayStream(lw)
	if !o.DisableDirectDecoding {
		// The decoder shares only without a Transform, which may modify
		// maps in place: sharing must come after it.
		var share *intern.Sharer
		if o.Transform == nil {
			share = l.w.share
		}
		l.direct = newDirectWatcher[T](lw, o.KeepManagedFields, share, o.maxJSONEvent)
	}
	l.st.direct = l.direct != nil
	if o.Sharding != nil {
		l.sh = &shardLoop{}
	}
	if o.StateDir != "" {
		l.w.state = newPersister(lw, o, l.w.reportAsync, obs)
	}
	return l
}

// openState opens the state file for a run, restoring the cache from it
// on the first; false if the run goes without it.
func (l *loop[T]) openState() bool {
	p := l.w.state
	if p == nil {
		l.w.reportAsync(errNoIdentity)
		return false
	}
	first := !l.stateOpened
	l.stateOpened = true
	items, rv, ok := p.Open(first, l.checkRestored)
	switch {
	case !ok:
		return false
	case first && rv != "":
		l.w.restore(items, rv)
		l.obs.restore(len(items))
		l.log.Info("kinformer: restored from the state file", "objects", len(items), "resourceVersion", rv, "file", p.Path())
	case !first && rv == "":
		l.w.rewriteState()
	}
	return true
}

// checkRestored accepts an object of the state file if it has the key it
// is stored under, and shares its strings and maps with the others.
func (l *loop[T]) checkRestored(key string, obj T) error {
	if got := l.w.cache.keyFunc(obj); got != key {
		return fmt.Errorf("it has key %q", got)
	}
	l.w.share.Object(obj)
	return nil
}

// run runs the state machine until ctx is done.
func (l *loop[T]) run(ctx context.Context) {
	if l.sh != nil {
		// The first share is needed before anything: the state file is
		// restored through it. The informer unsubscribes once its
		// handlers have returned (closeShard): until then the Sharder
		// must not give the share away.
		l.sh.sub = l.opts.Sharding.Subscribe()
		l.sh.ver = 0
		if _, ok := l.applyShare(ctx); !ok {
			return
		}
	}
	// A share that grew since the last run (or a re-list for a growth
	// that the last run did not finish) needs a list, not a watch from the
	// kept resourceVersion.
	grewBefore := l.sh != nil && l.w.gained != nil && !l.w.gained.Empty()
	if l.opts.StateDir != "" && l.openState() {
		l.w.state.Start()
		defer l.w.state.Stop() // after the last write: the loop has returned
	}
	l.st.phase = firstPhase(l.w.status.resourceVersion() != "", l.w.status.synced.Load(), grewBefore, l.sh != nil)
	bo := newBackoffState(l.opts.Backoff)
	var resyncAt time.Time // zero: no resync scheduled
	if l.opts.ResyncPeriod > 0 {
		// Also when resuming a kept cache: the period runs from the start.
		resyncAt = time.Now().Add(l.opts.ResyncPeriod)
	}
	for ctx.Err() == nil {
		var o outcome
		attempt := true
		if l.sh != nil {
			grew, ok := l.applyShare(ctx)
			if !ok {
				return
			}
			if l.sh.probe {
				l.probeShardMode(ctx)
			}
			if grew {
				// Objects may have joined: step says how to get them.
				l.st.joinable = l.target == "" && l.w.status.synced.Load() && l.serverFilters()
				o, attempt = outcome{kind: shareGrew}, false
			}
		}
		if attempt {
			o = l.attempt(ctx, &resyncAt)
		}
		if ctx.Err() != nil {
			return
		}
		if o.healthy {
			// Not after a list alone: a server whose every watch fails
			// at once (504 from a lagging watch cache) would draw a
			// re-list at each first wait.
			bo.reset()
		}
		if o.err != nil && (o.kind == listFailed || o.kind == watchFailed) && l.st.phase != phaseListJoined {
			l.w.failed(o.err)
		}
		next, wait := step(l.st, o)
		l.logTransition(o, next)
		if next.phase == phaseList && (l.st.phase == phaseWatch || l.st.phase == phaseListJoined) {
			l.obs.relist(relistCause(o))
		}
		if wait {
			d := bo.fail(time.Now())
			l.obs.backoff(d)
			l.log.Debug("kinformer: backing off", "phase", l.st.phase.String(), "wait", d)
			t := time.NewTimer(d)
			select {
			case <-ctx.Done():
				t.Stop()
				return
			case <-t.C:
			case <-l.shareChanged():
				t.Stop() // a share to give up or take must not wait out a backoff
			}
		}
		l.st = next
	}
}

// attempt makes one attempt of the current phase: a list, a watch, a
// probe, or a list of the slots that joined the share.
func (l *loop[T]) attempt(ctx context.Context, resyncAt *time.Time) (o outcome) {
	switch began := time.Now(); l.st.phase {
	case phaseList, phaseListUnpaged:
		o = l.list(ctx)
		if o.kind == listed {
			l.target = "" // a list is as caught up as it gets
			l.w.gained = nil
		}
		if o.kind == listed && l.opts.ResyncPeriod > 0 {
			// From the end of the list, and never shorter than twice the
			// list took: a period shorter than a list must not leave the
			// informer listing all the time and never watching.
			*resyncAt = time.Now().Add(max(l.opts.ResyncPeriod, 2*time.Since(began)))
		}
	case phaseListJoined:
		o = l.listJoined(ctx)
	case phaseWatch:
		o = l.watch(ctx, *resyncAt)
	case phaseProbe:
		o = l.probe(ctx)
	}
	return o
}

// relistCause names why a watch gave way to a re-list, for the metrics.
func relistCause(o outcome) string {
	switch {
	case o.kind == resyncDue:
		return "resync"
	case o.kind == shareGrew, o.kind == listFailed:
		return "reshard" // listFailed: of the slots that joined
	case errors.Is(o.err, ErrExpired):
		return "expired"
	case errors.Is(o.err, ErrTooLargeResourceVersion):
		return "too_large"
	}
	return "error"
}

func (l *loop[T]) logTransition(o outcome, next state) {
	rv := l.w.status.resourceVersion()
	switch {
	case o.kind == watchListRefused:
		l.log.Info("kinformer: the server does not offer watch-lists; paging instead", "reason", o.err.Error())
	case o.kind == directRefused:
		l.log.Info("kinformer: decoding watches through the client", "reason", o.err.Error())
	case o.kind == continueExpired:
		l.log.Info("kinformer: continue token expired, listing without paging")
	case l.st.phase == phaseListJoined && o.kind == listFailed:
		l.log.Info("kinformer: listing the slots that joined the share failed; re-listing the whole share", "reason", o.err.Error())
	case o.kind == watchClosedEarly:
		l.log.Debug("kinformer: watch closed as soon as opened")
	case o.kind == resyncDue:
		l.log.Info("kinformer: re-listing", "reason", "resync", "resourceVersion", rv)
	case next.phase == phaseList && l.st.phase == phaseWatch && o.err != nil:
		l.log.Info("kinformer: re-listing", "reason", o.err.Error(), "resourceVersion", rv)
	}
}

func (l *loop[T]) listOptions() metav1.ListOptions {
	o := metav1.ListOptions{LabelSelector: l.opts.LabelSelector, FieldSelector: l.opts.FieldSelector}
	if l.w.shard != nil {
		o.ShardSelector = l.w.shard.Selector()
	}
	return o
}

// isNil reports whether a client returned a nil object, typed or not.
func isNil(o runtime.Object) bool {
	if o == nil {
		return true
	}
	v := reflect.ValueOf(o)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// watchTimeout picks the server-side timeout of one watch, at random in
// [WatchTimeout, 2*WatchTimeout), so that informers started together do not
// all reconnect at the same instant.
func (l *loop[T]) watchTimeout() time.Duration {
	if l.target != "" {
		return catchUpTimeout
	}
	d := l.opts.WatchTimeout
	return (d + rand.N(d)).Truncate(time.Second)
}

// openWatch opens a watch with bookmarks and a randomised server-side
// timeout, decoded directly if the state says so, else through the client;
// adjust sets the options that differ between a plain watch and a
// watch-list. An error wrapping errNoDirect means direct decoding is not
// possible.
func (l *loop[T]) openWatch(ctx context.Context, verb string, adjust func(*metav1.ListOptions)) (*stream[T], error) {
	timeout := l.watchTimeout()
	secs := int64(max(timeout/time.Second, 1))
	opts := l.listOptions()
	opts.AllowWatchBookmarks = true
	opts.TimeoutSeconds = &secs
	adjust(&opts)
	wctx, cancel := context.WithCancel(ctx)
	s := &stream[T]{cancel: cancel, idle: timeout + l.opts.IdleMargin, prepare: l.w.prepare}
	wctx = s.traced(wctx)
	if l.st.direct {
		r, err := l.direct.open(wctx, opts)
		if err != nil {
			cancel()
			err = classify(err)
			if !isNoDirect(err) {
				l.obs.request(verb, err)
			}
			return nil, err
		}
		l.obs.request(verb, nil)
		s.src = newDirectSource(wctx, r)
		l.log.Debug("kinformer: watch opened", "decoding", "direct", "encoding", l.direct.encoding(), "resource", l.direct.resource)
		if l.direct.sharesObjects() {
			s.prepare = prepared[T]
		}
	} else {
		w, err := l.watchFn(wctx, opts)
		if err == nil && (w == nil || isNilWatch(w)) {
			err = fmt.Errorf("%w: the client returned no watch and no error", ErrUnexpectedObject)
		}
		l.obs.request(verb, classify(err))
		if err != nil {
			if w != nil && !isNilWatch(w) {
				w.Stop()
			}
			cancel()
			return nil, classify(err)
		}
		s.src = &clientSource{w: w}
		l.log.Debug("kinformer: watch opened", "decoding", "client")
	}
	// The clocks start once the watch is open: opening may take a while
	// (discovery, a new connection), and must not count as watching.
	s.started = time.Now()
	s.last = s.started
	return s, nil
}

func isNoDirect(err error) bool { return errors.Is(err, errNoDirect) }

func isNilWatch(w watch.Interface) bool {
	v := reflect.ValueOf(w)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// watch applies the events of a new watch from the remembered
// resourceVersion until it ends, fails, goes idle, or the resync is due.
func (l *loop[T]) watch(ctx context.Context, resyncAt time.Time) (o outcome) {
	if !resyncAt.IsZero() && !time.Now().Before(resyncAt) {
		return outcome{kind: resyncDue}
	}
	rv := l.w.status.resourceVersion()
	outer := ctx
	if l.sh != nil {
		// A change of share ends the watch: it was opened for the old one.
		var release func()
		ctx, release = l.cancelOnReshard(ctx)
		defer release()
		defer func() {
			if outer.Err() == nil && ctx.Err() != nil {
				o = outcome{kind: resharded}
			}
		}()
	}
	s, err := l.openWatch(ctx, "watch", func(o *metav1.ListOptions) { o.ResourceVersion = rv })
	if err != nil {
		if isNoDirect(err) {
			return outcome{kind: directRefused, err: err}
		}
		return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err)}
	}
	defer s.stop()
	defer func() { o.healthy = s.last.Sub(s.started) >= healthyWatch }()
	l.w.status.ok() // the watch is allowed again

	received := false        // anything on this watch
	var lastChange time.Time // of the last object event on this watch
	for {
		d := deadlines{resync: resyncAt}
		if l.target != "" {
			// Before anything came, the first bytes may be late (a busy
			// server starting the watch): three times as long, at least
			// minFirstQuiet.
			d.quiet = s.started.Add(min(max(3*l.quiet, minFirstQuiet), catchUpTimeout*9/10))
			if !lastChange.IsZero() {
				d.quiet = lastChange.Add(l.quiet)
			}
		}
		c, err := l.read(ctx, s, d, "watch", &received)
		switch {
		case err == nil:
		case ctx.Err() != nil:
			return outcome{kind: stopped}
		case errors.Is(err, errResync):
			return outcome{kind: resyncDue}
		case errors.Is(err, errQuiet):
			// The server sends the changes since the watch's
			// resourceVersion back to back as soon as the watch opens:
			// silence after them means it has sent them all. (It sends
			// no bookmark to a watch that is already at its
			// resourceVersion, so silence is all there is to go by.)
			l.caughtUp()
			return outcome{kind: watchEnded}
		case errors.Is(err, ErrIdle):
			return outcome{kind: watchFailed, err: l.idle("watch", s)}
		case isNoDirect(err):
			return outcome{kind: directRefused, err: err}
		case errors.Is(err, errEnded):
			if l.target != "" && time.Since(s.started) >= catchUpTimeout-catchUpTimeout/10 &&
				(lastChange.IsZero() || time.Since(lastChange) >= catchUpTimeout/2) {
				// A catch-up watch that ran its course, quiet for its
				// second half (see errQuiet).
				l.caughtUp()
				return outcome{kind: watchEnded}
			}
			if l.target == "" && !received && time.Since(s.started) < minHealthyWatch {
				return outcome{kind: watchClosedEarly}
			}
			return outcome{kind: watchEnded}
		default: // an ERROR event, or a stream that broke
			return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err), received: received}
		}
		if c.typ == Bookmark {
			l.w.bookmark(c.obj, c.rv)
		} else {
			l.w.apply(c.typ, c.obj, s.prepare)
			lastChange = time.Now()
		}
		if l.target != "" && l.w.status.reached(l.target) {
			l.caughtUp()
		}
	}
}

// idle is the error of a stream silent past its idle deadline, whose
// connection it drops (stream.dropConn).
func (l *loop[T]) idle(what string, s *stream[T]) error {
	if s.dropConn() {
		l.log.Info("kinformer: "+what+" silent past its deadline: closing its connection", "silent", s.idle)
	}
	return fmt.Errorf("%s: %w: nothing received for %s", what, ErrIdle, s.idle)
}

// catchUpTimeout is the server-side timeout of the watches of a restored
// informer that has not caught up yet. Such a watch is synced by an event
// or bookmark at or past the probe's resourceVersion, or by silence: none
// for loop.quiet after an event (three times the probe's round trip, at
// least minQuiet) or three times that before any (at least minFirstQuiet),
// or none in the second half of a watch that ran its course.
const (
	catchUpTimeout = time.Second
	minQuiet       = 100 * time.Millisecond
	minFirstQuiet  = 300 * time.Millisecond
)

// probe lists one object to learn the server's current resourceVersion:
// the restored informer is synced once its watch reaches it.
func (l *loop[T]) probe(ctx context.Context) outcome {
	opts := l.listOptions()
	opts.Limit = 1
	began := time.Now()
	list, err := l.listFn(ctx, opts)
	l.quiet = min(max(3*time.Since(began), minQuiet), catchUpTimeout/2)
	if err == nil && isNil(list) {
		err = fmt.Errorf("%w: the client returned no list and no error", ErrUnexpectedObject)
	}
	l.obs.request("list", classify(err))
	if err != nil {
		return outcome{kind: listFailed, err: fmt.Errorf("list (limit 1, for the current resourceVersion): %w", classify(err))}
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return outcome{kind: listFailed, err: fmt.Errorf("list: %w: %v", ErrUnexpectedObject, err)}
	}
	l.target = lm.GetResourceVersion()
	if l.target == "" || l.w.status.reached(l.target) {
		l.caughtUp()
	}
	return outcome{kind: probed}
}

// caughtUp ends the catch-up of a restored informer.
func (l *loop[T]) caughtUp() {
	l.log.Info("kinformer: caught up with the server", "resourceVersion", l.w.status.resourceVersion(), "target", l.target)
	l.target = ""
	l.w.caughtUp()
}
