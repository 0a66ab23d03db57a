package kinformer

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/direct"
)

// watchTimeout picks the server-side timeout of one watch, at random in
// [WatchTimeout, 2*WatchTimeout), so that informers started together do not
// all reconnect at the same instant.
func (l *loop[T]) watchTimeout() time.Duration {
	if l.target != "" && l.st.phase == phaseWatch {
		// The catch-up watch; not a watch-list that re-lists a restored
		// informer (after a 410), which must have time to send every
		// object: with a second it failed again and again at 20,000.
		return catchUpTimeout
	}
	d := l.opts.WatchTimeout
	return (d + rand.N(d)).Truncate(time.Second)
}

// openWatch opens a watch with bookmarks and a randomised server-side
// timeout, decoded directly if the state says so, else through the client;
// adjust sets the options that differ between a plain watch and a
// watch-list. An error wrapping direct.ErrNoDirect means direct decoding is not
// possible.
func (l *loop[T]) openWatch(ctx context.Context, verb string, adjust func(*metav1.ListOptions)) (*stream[T], error) {
	timeout := l.watchTimeout()
	secs := int64(max(timeout/time.Second, 1))
	opts := l.listOptions()
	opts.AllowWatchBookmarks = true
	opts.TimeoutSeconds = &secs
	adjust(&opts)
	wctx, cancel := context.WithCancel(ctx)
	s := &stream[T]{cancel: cancel, idle: timeout + l.opts.IdleMargin, timeout: timeout, prepare: l.w.prepare}
	wctx = s.traced(wctx)
	if l.st.direct {
		r, err := l.direct.Open(wctx, opts)
		if err != nil {
			cancel()
			err = classify(err)
			if !isNoDirect(err) {
				l.obs.request(verb, err)
			}
			return nil, err
		}
		l.obs.request(verb, nil)
		s.src = newDirectSource(wctx, r, l.direct.KeepsRaw())
		l.log.Debug("kinformer: watch opened", "decoding", "direct", "encoding", l.direct.Encoding(), "resource", l.direct.Resource())
		s.prepare = l.w.prepareDecoded
		if l.direct.SharesObjects() {
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
	s.watchConn(l.liveness, l.opts.ProbeAfter, l.opts.ProbeTimeout)
	return s, nil
}

func isNoDirect(err error) bool { return errors.Is(err, direct.ErrNoDirect) }

// clientStreamError tells the ERROR event client-go's watch makes itself
// when it cannot read its stream (a connection reset, lost, or garbage on
// it): a Status with the cause ClientWatchDecoding, not the server's.
func clientStreamError(err error) bool {
	var st apierrors.APIStatus
	if !errors.As(err, &st) || st.Status().Details == nil {
		return false
	}
	for _, c := range st.Status().Details.Causes {
		if c.Type == "ClientWatchDecoding" {
			return true
		}
	}
	return false
}

// cancelWhen returns a context that ends when ctx does, when signal is
// closed, or at once if now; and its release, to call when done with it.
func cancelWhen(ctx context.Context, now bool, signal <-chan struct{}) (context.Context, func()) {
	c, cancel := context.WithCancel(ctx)
	if now {
		cancel()
		return c, cancel
	}
	done := make(chan struct{})
	go func() {
		select {
		case <-signal:
			cancel()
		case <-done:
		}
	}()
	return c, func() { close(done); cancel() }
}

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
	rv := l.w.status.ResourceVersion()
	outer := ctx
	// A new configuration ends the watch (loop.offer), and so does, for a
	// sharded informer, a change of share: it was opened for the old one.
	// (Each outcome is set before the contexts are released.)
	offerCtx, releaseOffer := l.cancelOnOffer(outer)
	defer releaseOffer()
	ctx = offerCtx
	if l.sh != nil {
		shareCtx, releaseShare := l.cancelOnReshard(offerCtx)
		defer releaseShare()
		ctx = shareCtx
	}
	defer func() {
		switch {
		case outer.Err() != nil || ctx.Err() == nil:
		case offerCtx.Err() != nil:
			o = outcome{kind: reconfigured, healthy: o.healthy}
		default:
			o = outcome{kind: resharded}
		}
	}()
	s, err := l.openWatch(l.traceCluster(ctx), "watch", func(o *metav1.ListOptions) { o.ResourceVersion = rv })
	if err != nil {
		if isNoDirect(err) {
			return outcome{kind: directRefused, err: err}
		}
		// A catch-up watch refused with 410: see the ERROR event below.
		return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err), received: l.target != ""}
	}
	defer s.stop()
	if why := l.rebound(ctx); why != "" {
		// A server of another history would accept the watch from a
		// resourceVersion it has not reached, and say nothing until it
		// does: nothing of the cache would ever be corrected.
		l.target = ""
		return outcome{kind: otherHistory, err: l.anotherHistory(why)}
	}
	broke := false // the stream failed by its connection, not by an ERROR event
	// ended: the stream ended without an error, not by a catch-up's
	// quiet: a reset connection reads as an end (utilnet.IsProbableEOF).
	ended := false
	lastEvent := s.started // of the last event or bookmark applied
	defer func() {
		o.healthy = s.last.Sub(s.started) >= healthyWatch
		o.connLost = broke && o.kind == watchFailed && liveWatch(s.started, lastEvent, time.Now())
		o.cutYoung = (broke && o.kind == watchFailed || ended) && time.Since(s.started) < healthyWatch
	}()
	l.w.recovered() // the watch is allowed again

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
			broke = true
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
			ended = true
			if l.target == "" && !received && time.Since(s.started) < minHealthyWatch {
				return outcome{kind: watchClosedEarly}
			}
			return outcome{kind: watchEnded}
		case c.endOfList:
			// A watch-list's end marker without a resourceVersion, on a
			// plain watch: garbage, skipped.
			l.w.report(fmt.Errorf("watch: %w", err))
			continue
		default: // an ERROR event, or a stream that broke
			broke = c.typ != Error || clientStreamError(err)
			// A catch-up watch (a restored informer's) whose first answer
			// is 410 meets a state file older than the server's history,
			// as after any restart longer than a few minutes: it re-lists
			// at once, as after a watch that made progress (step). That
			// happens once per restart; a server whose watch cache lags
			// still gets the backoff on plain watches.
			return outcome{kind: watchFailed, err: fmt.Errorf("watch: %w", err), received: received || l.target != ""}
		}
		lastEvent = time.Now()
		if c.typ == Bookmark {
			l.heard(s)
			l.w.bookmark(c.obj, c.rv)
		} else {
			l.w.apply(c.typ, c.arrival(), s.prepare)
			lastChange = time.Now()
		}
		if l.target != "" && l.w.status.Reached(l.target) {
			l.caughtUp()
		}
	}
}

// heartbeatSilence: how long a watch may be silent, once the server has
// sent it a bookmark on its own (heard), before it is taken for dead and
// its connection closed. The API server's watch cache sends a watch that
// allows bookmarks one about every minute, quiet or not, once its
// resourceVersion has moved past the one the watch started from (and one
// 2 s before the watch's timeout): a watch that has had one gets the next
// within a minute. One that has had none may be on a resource that does
// not move (the cache sends nothing at the watch's own resourceVersion):
// it is given the idle deadline only. Over HTTP/1.1 a watch holds its
// connection alone and no probe can ride it, and this is what finds it
// dead (before, the idle deadline: the watch's 5-10 minute timeout plus
// IdleMargin); over HTTP/2 the probe does (its connection's watchdog,
// stream.live), and a silent watch there must not close a connection that
// other watches and requests share and that answers probes.
const heartbeatSilence = 80 * time.Second

// heard notes a bookmark on the plain watch s: sent by the server on its
// own (a plain watch gets no bookmark at its start), it arms s's
// heartbeat deadline, unless it is the one 2 s before the watch's
// timeout, which a server may send without heartbeats, or s is on a
// connection the probe watches.
func (l *loop[T]) heard(s *stream[T]) {
	if s.heartbeat || l.target != "" || s.live != nil || time.Since(s.started) > s.timeout-heartbeatBeforeTimeout {
		return
	}
	s.heartbeat = true
	s.idle = min(s.idle, heartbeatSilence)
	l.log.Debug("kinformer: the server sends this watch bookmarks on its own: silent for longer than the heartbeat deadline, it is taken for dead", "deadline", heartbeatSilence)
}

// heartbeatBeforeTimeout: a bookmark this close to a watch's timeout may be
// the one the API server sends just before it (2 s), not a heartbeat.
const heartbeatBeforeTimeout = 10 * time.Second

// idle is the error of a stream whose connection did not answer a probe
// (its watchdog closed it), or that was silent past its idle deadline,
// whose connection it drops (stream.dropConn).
func (l *loop[T]) idle(what string, s *stream[T]) error {
	if s.live.Dead() {
		l.obs.deadConn()
		l.log.Info("kinformer: "+what+"'s connection did not answer a probe: closed it", "timeout", s.live.Timeout())
		return fmt.Errorf("%s: %w: its connection was silent and did not answer a probe within %s", what, ErrIdle, s.live.Timeout())
	}
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

// healthyWatch: a watch that still delivers this long after it opened
// shows the server well, and resets the backoff. Without it, faults a
// minute apart (less than Backoff.ResetAfter) would each wait longer than
// the last, up to Backoff.Max, though the server was fine in between.
const healthyWatch = 10 * time.Second

// minHealthyWatch: a watch the server closes sooner than this without
// sending anything counts as failed, so a server that accepts and drops
// watches gets backoff instead of a hot loop.
const minHealthyWatch = time.Second

// liveWatch tells whether a watch opened at started, which last received
// something at last, was live when it ended at now: it delivered an event
// or a bookmark minHealthyWatch or more after it opened, past the
// changes it is sent back to back at once (its catch-up), or it stayed open
// healthyWatch, quiet. A server that accepts watches and breaks them at
// once, or after their catch-up, never makes one live, and keeps the full
// backoff; a connection lost under a live watch does not add to it.
func liveWatch(started, last, now time.Time) bool {
	return last.Sub(started) >= minHealthyWatch || now.Sub(started) >= healthyWatch
}
