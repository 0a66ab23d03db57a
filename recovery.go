package kinformer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	utilnet "k8s.io/apimachinery/pkg/util/net"

	"github.com/kinformer/kinformer/internal/backoff"
	"github.com/kinformer/kinformer/internal/upprobe"
)

// Recovery: how long the loop waits after a failure depends on what
// failed (failureOf). The grown backoff (backoff.State) is kept for what
// loads the server; but while the server or the way to it is down, a
// connection refused costs it nothing, and the informer finds out that
// it is back by a probe that the server's priority and fairness does not
// queue (internal/upprobe), resuming within about a second of its
// return; while it refuses this client (401, 403), the wait is capped at
// refusedCap, so that a permission restored is noticed within seconds;
// and a server that says when to come back (Retry-After on 429 or 503)
// is not asked sooner.

// Failure is what kind of failure an Error event's list or watch met
// (Event.Failure, FailureOf): the one classification the informer's
// backoff, its watch-list fallback and its logs go by.
type Failure uint8

const (
	// FailureOther: anything else (a 500, a 404, an object that does not
	// decode): retried with the grown backoff.
	FailureOther Failure = iota
	// FailureDown: the server or the way to it is down, no answer
	// (connection refused or reset, EOF, a dial or I/O timeout): the
	// informer probes the server cheaply and resumes within about a
	// second of its return.
	FailureDown
	// FailureRefused: the server answered no (401, 403): retried every
	// few seconds, so that a restored permission is noticed soon.
	FailureRefused
	// FailureBusy: the server is overloaded or in trouble (429, 503,
	// 504): retried with the grown backoff, never sooner than its
	// Retry-After.
	FailureBusy
)

func (f Failure) String() string {
	switch f {
	case FailureDown:
		return "down"
	case FailureRefused:
		return "refused"
	case FailureBusy:
		return "busy"
	}
	return "other"
}

// FailureOf classifies err, an error of a list or watch (an Error
// event's Err) as the informer does.
func FailureOf(err error) Failure {
	f, _ := failureOf(err)
	return f
}

// failureOf classifies err, and returns the delay the server asked for
// (Retry-After), if any.
func failureOf(err error) (f Failure, retryAfter time.Duration) {
	var ne net.Error
	switch {
	case err == nil:
		return FailureOther, 0
	case apierrors.IsTooManyRequests(err), apierrors.IsServiceUnavailable(err),
		apierrors.IsServerTimeout(err), apierrors.IsTimeout(err):
		if s, ok := apierrors.SuggestsClientDelay(err); ok && s > 0 {
			retryAfter = time.Duration(s) * time.Second
		}
		return FailureBusy, retryAfter
	case apierrors.IsUnauthorized(err), apierrors.IsForbidden(err):
		return FailureRefused, 0
	case errors.Is(err, io.EOF), errors.Is(err, io.ErrUnexpectedEOF),
		utilnet.IsProbableEOF(err), utilnet.IsConnectionRefused(err),
		utilnet.IsConnectionReset(err), utilnet.IsHTTP2ConnectionLost(err),
		errors.As(err, &ne) && ne.Timeout(), isDialError(err):
		return FailureDown, 0
	}
	return FailureOther, 0
}

// isDialError reports a failure to connect at all (no route, no such
// host, refused): a net.OpError of the dial.
func isDialError(err error) bool {
	var op *net.OpError
	if errors.As(err, &op) && op.Op == "dial" {
		return true
	}
	var dns *net.DNSError
	return errors.As(err, &dns)
}

const (
	// refusedCap bounds the wait after a 401 or 403: one authorization
	// check per informer every few seconds, and a restored permission is
	// noticed within about refusedCap.
	refusedCap = 4 * time.Second
	// maxRetryAfter bounds what a Retry-After may make the loop wait.
	maxRetryAfter = 2 * time.Minute
)

// waitFor returns how long to wait after a failure with err, given d, the
// grown backoff's wait, and rnd, a random number in [0, 1).
func waitFor(err error, d time.Duration, rnd float64) time.Duration {
	switch f, after := failureOf(err); f {
	case FailureRefused:
		if d > refusedCap {
			d = refusedCap - time.Duration(float64(refusedCap)*0.25*rnd)
		}
	case FailureBusy:
		d = max(d, min(after, maxRetryAfter))
	}
	return d
}

// wait waits out the backoff after o, a failed attempt: from the first
// wait after a live watch's connection was lost (faults seconds apart,
// each recovered, do not add up), else the grown one as waitFor adjusts
// it, cut short when a server that was down serves again (upprobe.Await). A
// share to give up or take ends it at once. false if ctx ended.
func (l *loop[T]) wait(ctx context.Context, bo *backoff.State, o outcome) bool {
	var d time.Duration
	down := false
	if o.connLost && !l.flaps {
		d = bo.Resume(time.Now())
		l.log.Debug("kinformer: the connection of a live watch was lost: resuming without the grown backoff", "wait", d)
	} else {
		d = waitFor(o.err, bo.Fail(time.Now()), bo.Rand())
		if l.flaps && o.cutYoung {
			d = max(d, flapWait-time.Duration(float64(flapWait)*0.2*bo.Rand()))
		}
		f, _ := failureOf(o.err)
		down = f == FailureDown && l.up != nil && !l.flaps
	}
	l.obs.backoff(d)
	l.log.Debug("kinformer: backing off", "phase", l.st.phase.String(), "wait", d, "probing", down)
	if down {
		if upprobe.Await(ctx, l.up, l.upKey, d, bo.Rand(), l.shareChanged()) {
			l.log.Debug("kinformer: the server serves again: resuming before the backoff's end")
		}
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
	case <-l.shareChanged():
	}
	return true
}

// A flapping way to the server: a proxy or a load balancer that resets
// every connection seconds after it opens. Each cut watch would resume
// at once (a live watch's lost connection does not grow the backoff, and
// a reset reads as the watch's end), a watch every few seconds forever.
// The signal: watches cut (or ended) young, within healthyWatch of
// opening, flapCuts or more in a row and for flapAfter or more, with
// nothing else between them. Separate faults, however close (a server
// killed, connections cut, a compaction, a revoked permission), come
// with a refused reconnect, a 403, a 410 or a watch that lasts, which
// start the count again: they recover as before.
const (
	flapCuts  = 5
	flapAfter = 30 * time.Second
	// flapWait is the least a cut watch waits while the way flaps
	// (jittered down by a fifth): at most about six watches a minute.
	flapWait = 10 * time.Second
)

// noteCut counts the watches cut young in a row (o.cutYoung), at now,
// and says when the way to the server starts and stops flapping.
func (l *loop[T]) noteCut(o outcome, now time.Time) {
	was := l.flaps
	if o.cutYoung {
		if l.youngCuts == 0 {
			l.cutsSince = now
		}
		l.youngCuts++
	} else {
		l.youngCuts = 0
	}
	l.flaps = l.youngCuts >= flapCuts && now.Sub(l.cutsSince) >= flapAfter
	switch {
	case l.flaps && !was:
		l.log.Warn("kinformer: the connection to the server keeps breaking soon after it opens; waiting longer before each watch until one lasts",
			"watchesCut", l.youngCuts, "for", now.Sub(l.cutsSince).Round(time.Second), "within", healthyWatch)
	case was && !l.flaps:
		l.log.Info("kinformer: the connection to the server holds again")
	}
}

// Reporting a failure: an ERROR event for the handlers, a log line as
// loud as the failure deserves, and the status WaitForSync reads.

// report logs err, queues an Error event, and records it for WaitForSync
// if it is persistent and the cache has not synced yet.
//
// A persistent error (forbidden, not found, …) is logged once: the same
// error again, attempt after attempt, is logged at Debug, until the
// informer is allowed again (recovered) or the error changes.
func (w *writer[T]) report(err error) { w.reportQuietly(err, false) }

// reportQuietly is report, logging err at Debug if routine: a reconnect
// (the server down or busy) before the backoff has grown, which the
// informer will most likely get over at its next attempt.
func (w *writer[T]) reportQuietly(err error, routine bool) {
	rv := w.status.ResourceVersion()
	f := FailureOf(err)
	routine = routine && (f == FailureDown || f == FailureBusy)
	switch prev, _ := w.status.LastError(); {
	case IsPersistent(err) && prev != nil && prev.Error() == err.Error():
		w.log.Debug("kinformer: "+err.Error(), "resourceVersion", rv, "repeated", true)
	case IsPersistent(err):
		w.log.Warn("kinformer: "+err.Error()+" (retrying with backoff; logged again only if it changes)", "resourceVersion", rv, "failure", f.String())
	case routine:
		w.log.Debug("kinformer: "+err.Error()+" (reconnecting)", "resourceVersion", rv, "failure", f.String())
	default:
		w.log.Warn("kinformer: "+err.Error(), "resourceVersion", rv, "failure", f.String())
	}
	w.disp.emit(Event[T]{Type: Error, Err: err, ResourceVersion: rv, Failure: f, Routine: routine})
	if !w.status.Synced.Load() {
		// Only the latest failure counts: a 403 followed by a connection
		// error is no longer known to be a 403.
		var persistent error
		if IsPersistent(err) {
			persistent = err
		}
		w.status.SetSync(false, persistent)
	}
}

// reportAsync logs err and queues an Error event; for any goroutine.
func (w *writer[T]) reportAsync(err error) {
	w.log.Warn("kinformer: "+err.Error(), "resourceVersion", w.status.ResourceVersion())
	w.disp.emit(Event[T]{Type: Error, Err: err, ResourceVersion: w.status.ResourceVersion(), Failure: FailureOf(err)})
}

// failed records the error that ended a list or watch attempt: reported,
// and kept for LastError if persistent.
func (w *writer[T]) failed(err error, routine bool) {
	w.reportQuietly(err, routine)
	if IsPersistent(err) {
		w.status.Fail(err)
	}
}

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
