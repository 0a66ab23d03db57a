package kinformer

import (
	"context"
	"errors"
	"log/slog"
	"net"
	"reflect"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/backoff"
	"github.com/kinformer/kinformer/internal/crdwait"
	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/direct"
	"github.com/kinformer/kinformer/internal/liveness"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/status"
	"github.com/kinformer/kinformer/internal/upprobe"
)

// loop is an informer's watch loop and its state: only the goroutine of
// the current run touches it, but before the first run (Informer), and
// to offer it a new configuration (offer: an atomic and a channel).
type loop[T Object] struct {
	listFn  func(context.Context, metav1.ListOptions) (runtime.Object, error)
	watchFn func(context.Context, metav1.ListOptions) (watch.Interface, error)
	opts    *config[T]
	w       writer[T]
	direct  *direct.Watcher // nil: watches go through watchFn only
	// cluster is the fingerprint of the cluster the last list, watch or
	// probe reached (clusterOf); nil if none was seen. conn is the
	// connection it went out on; newConn: a request went out on another
	// one since the loop last checked (rebound, listedFrom). moved says
	// why the cluster is no longer the one the cache came from (another
	// certificate authority, another kube-system uid); nil if it is.
	// Written by traceCluster's trace, on the transport's goroutines.
	cluster atomic.Pointer[string]
	conn    atomic.Pointer[net.Conn]
	newConn atomic.Bool
	moved   atomic.Pointer[string]
	// uidOf asks the server for its kube-system uid (kubeSystemUID); nil
	// for a client kinformer cannot reach. uid is
	// the one the cache's objects come from, "" if unknown; uidRefused:
	// the server would not say (403, 404), already logged.
	uidOf      func(context.Context, net.Conn) (string, error)
	uid        string
	uidRefused bool
	// historyNoted: anotherHistory was said for the list that follows.
	historyNoted bool
	// crdRefused: the client may not watch CustomResourceDefinitions
	// (awaitReturn): a resource gone is listed after each backoff.
	crdRefused bool
	liveness   liveness.Prober // checks a silent connection; nil if the client's cannot be reached
	// youngCuts counts the attempts in a row whose watch was cut young,
	// since cutsSince; flaps says the way to the server flaps (noteCut).
	youngCuts int
	cutsSince time.Time
	flaps     bool
	// up and upKey: the probe of whether the server serves again, while it
	// cannot be reached (upprobe.Await); nil if the client's cannot be reached.
	up    upprobe.Probe
	upKey string

	st  state // kept between runs: what was learnt about the server
	log *slog.Logger
	obs *observer // metrics; nil for none

	// target is the server's resourceVersion at the start of a restored
	// informer, which it must reach to be synced; "" when not catching up.
	target string
	// quiet is how long a catch-up watch may be silent before the
	// restored informer counts as caught up: a few of the probe's round
	// trips.
	quiet time.Duration
	// stateOpened: the state file has been opened (and loaded) once.
	stateOpened bool
	// left are the state files of narrower projections this loop wrote
	// and left for a wider one (adopt): an informer that is done with its
	// files (a namespace that left a view) removes them too.
	left []string
	// held is the cache loaded from the state file, not yet restored: it
	// reaches the cache, the handlers and the metrics only after the
	// probe's list, authorized as this client, has succeeded (probe).
	// nil when there is none, or once restored.
	held *heldState
	// sh is the share of a sharded informer; nil if not sharded.
	sh *shardLoop
	// newDirect makes the direct decoder, decoding so; nil with
	// DisableDirectDecoding.
	newDirect func(direct.Decoding) *direct.Watcher
	// newState makes the state file's persister (Options.StateDir).
	newState func() *persist.Persister[T]
	// stateOn: the state file is open and written in this run.
	stateOn bool
	// offered is a configuration given while the informer has started
	// (offer), not yet taken (adopt). offers is closed, and replaced,
	// at each offer: a watch ends for it, an idle sharded loop wakes.
	offered atomic.Pointer[config[T]]
	offerMu sync.Mutex // guards offers
	offers  chan struct{}
}

func newLoop[T Object, L runtime.Object](lw ListerWatcher[L], src describe.Source, o *config[T], c *Cache[T], s *status.Status, d *dispatcher[T], log *slog.Logger, obs *observer) *loop[T] {
	l := &loop[T]{
		listFn:  func(ctx context.Context, lo metav1.ListOptions) (runtime.Object, error) { return lw.List(ctx, lo) },
		watchFn: lw.Watch,
		w:       *newWriter(c, s, d, log, o),
		log:     log,
		obs:     obs,
		offers:  make(chan struct{}),
	}
	l.st.watchList = !o.DisableStreamingList && src.Streams
	if o.ProbeAfter > 0 {
		l.liveness = src.Prober()
	}
	l.up, l.upKey = upprobe.Target(src.REST, src.HTTP)
	if !o.DisableDirectDecoding {
		l.newDirect = func(dc direct.Decoding) *direct.Watcher {
			return direct.New[T](src, l.opts.objectType(), dc, IsPersistent)
		}
	}
	if o.Sharding != nil {
		l.sh = &shardLoop{pub: &sharePublished{}}
	}
	switch {
	case o.StateDir == "":
	case len(o.StateKeys) == 0 && secretsOf(src, o):
		log.Info("kinformer: Secrets are not written to the state directory without StateKeys: this informer lists at every start", "dir", o.StateDir)
	default:
		l.newState = func() *persist.Persister[T] { return newPersister(src, l.opts, l.w.reportAsync, log, obs) }
	}
	l.uidOf = kubeSystemUID(src)
	l.configure(o)
	return l
}

// detectMutations makes hook the writer's mutation hook, before the loop
// first runs; the Sharer forgets the maps it shares once found is raised,
// when the detector has found a mutation (one may be the map changed).
func (l *loop[T]) detectMutations(hook mutationHook[T], found *atomic.Bool) {
	l.w.detectWith(hook, found)
}

// run runs the state machine until ctx is done.
func (l *loop[T]) run(ctx context.Context) {
	if l.sh != nil {
		// The first share is needed before anything: the state file is
		// restored through it. The informer unsubscribes once its
		// handlers have returned (closeShard): until then the Sharder
		// must not give the share away.
		l.sh.sub = l.opts.Sharding.Subscribe()
		l.sh.ver, l.sh.synced = 0, 0
		if _, ok := l.applyShare(ctx); !ok {
			return
		}
	}
	// A share that grew since the last run (or a re-list for a growth
	// that the last run did not finish) needs a list, not a watch from the
	// kept resourceVersion.
	grewBefore := l.joining() != nil && !l.joining().Empty()
	if l.newState != nil && !l.stateOn && l.openState() { // (adopt may have, waiting for a share)
		l.w.state.Start()
		l.stateOn = true
	}
	defer func() {
		if l.stateOn { // after the last write: the loop has returned
			l.w.state.Stop()
			l.stateOn = false
		}
	}()
	l.st.phase = firstPhase(l.held != nil, l.w.status.ResourceVersion() != "", l.w.status.Synced.Load(), grewBefore, l.sh != nil)
	if l.w.widened {
		l.st.phase = phaseList // the list for a wider projection (adopt) did not end in the last run
	}
	bo := backoff.New(backoff.Policy(l.opts.Backoff))
	var resyncAt time.Time // zero: no resync scheduled
	if l.opts.ResyncPeriod > 0 {
		// Also when resuming a kept cache: the period runs from the start.
		resyncAt = time.Now().Add(backoff.Jittered(l.opts.ResyncPeriod))
	}
	for ctx.Err() == nil {
		l.adopt(&resyncAt)
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
			if !grew {
				l.reportSynced()
			}
			if grew {
				// Objects may have joined: step says how to get them.
				l.st.joinable = l.target == "" && l.w.status.Synced.Load() && l.serverFilters()
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
			bo.Reset()
		}
		l.noteCut(o, time.Now())
		o.flapping = l.flaps
		if reported(l.st, o) {
			// Routine while the backoff has not grown: the first
			// failures in a row (a live watch's lost connection starts
			// it again).
			l.w.failed(o.err, !bo.Grown())
		}
		o.gone = (o.kind == listFailed || o.kind == watchFailed) && apierrors.IsNotFound(o.err)
		if o.gone {
			if n := l.w.gone(); n > 0 {
				l.log.Warn("kinformer: the server no longer serves the resource (404: a custom resource whose CustomResourceDefinition was deleted?): dropped the objects it still had (Deleted, cause gone); waiting for it to return (a watch of its CRD where allowed, else lists with backoff)",
					"objects", n)
			}
		}
		next, wait := step(l.st, o)
		if o.gone {
			if wait && l.awaitReturn(ctx, bo) {
				wait = false
			}
			if ctx.Err() != nil {
				return
			}
		}
		l.logTransition(o, next)
		if next.phase == phaseList && (l.st.phase == phaseWatch || l.st.phase == phaseListJoined) {
			l.obs.relist(relistCause(l.st.phase, o))
		}
		if wait {
			l.w.status.Waiting(time.Now())
			if !l.wait(ctx, bo, o) {
				return
			}
		}
		l.st = next
	}
}

// awaitReturn waits, after a 404 on the collection, for the resource's
// CustomResourceDefinition to serve it again (internal/crdwait); false if it
// could not tell, and the loop waits out a backoff instead.
func (l *loop[T]) awaitReturn(ctx context.Context, bo *backoff.State) bool {
	if l.direct == nil || l.crdRefused {
		return false
	}
	name, version, ok := l.direct.CRDTarget()
	if !ok {
		return false
	}
	l.log.Debug("kinformer: waiting for the CustomResourceDefinition to serve the resource again", "crd", name, "version", version)
	r, err := crdwait.Await(ctx, l.direct.Client(), name, version, l.shareChanged(), IsPersistent)
	switch r {
	case crdwait.Back:
		bo.Reset()
		l.log.Info("kinformer: the CustomResourceDefinition serves the resource again: listing", "crd", name, "version", version)
		return true
	case crdwait.Quiet:
		return true
	case crdwait.Refused:
		l.crdRefused = true
		l.log.Debug("kinformer: cannot watch the CustomResourceDefinition: listing again after each backoff", "crd", name, "error", err)
	default:
		if err != nil && ctx.Err() == nil {
			l.log.Debug("kinformer: waiting for the CustomResourceDefinition", "crd", name, "error", err)
		}
	}
	return false
}

// attempt makes one attempt of the current phase: a list, a watch, a
// probe, or a list of the slots that joined the share.
func (l *loop[T]) attempt(ctx context.Context, resyncAt *time.Time) (o outcome) {
	switch began := time.Now(); l.st.phase {
	case phaseList, phaseListUnpaged:
		if err := l.askUID(ctx, nil); err != nil {
			if l.w.state != nil {
				return outcome{kind: listFailed, err: err}
			}
			// Without a state file nothing is restored by the binding:
			// the list goes on, checked by the certificate authority
			// and its resourceVersion.
			l.log.Debug("kinformer: could not tell which cluster the server is", "error", err)
		}
		rv := l.w.status.ResourceVersion()
		l.w.listStarts()
		o = l.list(l.traceCluster(ctx))
		if o.kind == listed {
			if l.listedFrom(rv) {
				o = outcome{kind: otherHistory} // said; listed again, fresh
			}
			l.target = "" // a list is as caught up as it gets
			if l.sh != nil {
				l.sh.gained = nil
			}
			// A list authorized as this client replaced what a state
			// file held (a sharded informer's share changed during its
			// probe): nothing is left to restore.
			l.held = nil
		}
		if o.kind == listed && l.opts.ResyncPeriod > 0 {
			// From the end of the list, and never shorter than twice the
			// list took: a period shorter than a list must not leave the
			// informer listing all the time and never watching.
			*resyncAt = time.Now().Add(max(backoff.Jittered(l.opts.ResyncPeriod), 2*time.Since(began)))
		}
	case phaseListJoined:
		o = l.listJoined(ctx)
	case phaseWatch:
		o = l.watch(ctx, *resyncAt)
	case phaseProbe:
		if err := l.askUID(ctx, nil); err != nil {
			return outcome{kind: listFailed, err: err}
		}
		o = l.probe(l.traceCluster(ctx))
		if o.kind != probed {
			break
		}
		l.newConn.Store(false)
		moved := l.moved.Swap(nil)
		switch {
		case l.held != nil:
			// The file says where it came from: foreign judges.
			if why := l.foreign(); why != "" {
				o = l.dropHeld(why)
			} else {
				o = l.restoreHeld(o)
			}
		case moved != nil:
			// Catching up a cache an earlier run restored.
			l.target = ""
			o = outcome{kind: otherHistory, err: l.anotherHistory(*moved)}
		}
	}
	return o
}

// relistCause names why a watch (or a list of the slots that joined the
// share) gave way to a re-list, for the metrics.
func relistCause(from phase, o outcome) string {
	switch {
	case o.kind == resyncDue:
		return "resync"
	case o.kind == shareGrew, from == phaseListJoined:
		return "reshard"
	case errors.Is(o.err, ErrExpired):
		return "expired"
	case errors.Is(o.err, ErrTooLargeResourceVersion):
		return "too_large"
	case o.kind == otherHistory:
		return "another_history"
	}
	return "error"
}

func (l *loop[T]) logTransition(o outcome, next state) {
	rv := l.w.status.ResourceVersion()
	switch {
	case o.kind == watchListRefused:
		l.log.Info("kinformer: the server does not offer watch-lists; paging instead", "reason", o.err.Error())
	case o.kind == watchListFailed:
		l.log.Warn("kinformer: the watch-list failed; listing by pages this time", "reason", o.err.Error())
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
