package sharding

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/slots"
)

// Labels and annotations of the Leases of a shard group.
const (
	// GroupLabel labels every Lease of a group with the group's name.
	GroupLabel = "kinformer.io/shard-group"
	// ClaimsAnnotation holds the slots the Lease's holder claims: it
	// serves them, or is about to (see docs/sharding.md).
	ClaimsAnnotation = "kinformer.io/shard-claims"
	// ServedAnnotation holds the slots the Lease's holder has synced:
	// every informer of its process has applied its share and holds every
	// object of those slots. A member whose claims it does not cover for
	// Options.NotServingGrace is reported as not serving them
	// (Status.NotServing).
	ServedAnnotation = "kinformer.io/shard-served"
)

// DefaultSlots is Options.Slots when it is zero: enough to share evenly
// between up to a few dozen replicas, few enough that a replica's shard
// selector stays short.
const DefaultSlots = slots.DefaultSlots

// ErrRunning is returned by Run when the Sharding is already running.
var ErrRunning = errors.New("kinformer: sharding: already running")

// Options configure a Sharding.
type Options struct {
	// Group names the set of replicas that share the work; its Leases
	// carry it as the label GroupLabel. Required; a valid label value.
	Group string
	// Namespace holds the group's Leases. Required. Whoever may write
	// Leases there decides what the group serves (a Lease labelled with
	// the group is a member, and takes a share): use a namespace where
	// only the replicas' service account may create and update Leases
	// (docs/sharding.md, "Who may write the Leases").
	Namespace string
	// Identity names this replica, unique in the group (a pod name).
	// Required. A replica restarted with the same identity takes its own
	// Lease back; the slots it claimed there are free for it to claim again
	// at once, as no one else has taken them while that Lease lived.
	Identity string
	// LeaseDuration: a replica whose Lease has not been renewed for this
	// long is dead, and its share is taken over. A replica that cannot
	// renew its Lease stops handling before then. Whole seconds (the
	// Lease's field; a fraction is dropped). Default 15s; at least 2s.
	LeaseDuration time.Duration
	// RenewPeriod is how often the Lease is renewed and the group's Leases
	// read. A replica claims nothing in the first RenewPeriod of its Run,
	// so that replicas started together see each other before one claims
	// (and lists) everything. Default LeaseDuration/5; at most
	// LeaseDuration/3.
	RenewPeriod time.Duration
	// Slots is how many equal parts the hash space is cut into: a power
	// of two up to 4096, the same for every replica of the group. Default
	// DefaultSlots (64).
	Slots int
	// Members, if set, says which identities may be members: the Lease
	// of an identity it refuses, or a Lease not named as its holder's
	// (a Lease claiming another member's identity), is ignored by the
	// assignment, logged once at Warn, listed in Status.Ignored and
	// counted in kinformer_sharding_leases_ignored. Nil: any Lease
	// labelled with the group is a member. It is no substitute for
	// keeping others from writing Leases in Namespace: a writer who knows
	// the rule can name a Lease to match.
	Members func(identity string) bool
	// NotServingGrace is how long a live member may claim slots that its
	// Lease does not say it has synced (ServedAnnotation) before this
	// replica reports it in Status.NotServing and
	// kinformer_sharding_members_not_serving: such slots are cached by no
	// one. Long enough for a replica to list its share. Default
	// 4×LeaseDuration (1 minute by default).
	NotServingGrace time.Duration
	// Logger receives membership and ownership changes; nil discards.
	Logger *slog.Logger
	// Metrics, if set, receives the kinformer_sharding_* metrics,
	// labelled with Group (see NewMetrics). Default: none.
	Metrics *Metrics
}

// Sharding is a replica's membership in a shard group: it holds a
// coordination.k8s.io/v1 Lease labelled with the group, reads the others',
// splits the hash space of metadata.uid between the live members, and
// tells the informers that use it (kinformer.Options.Sharding and
// kinformer.FactoryOptions.Sharding: it is a kinformer.Sharder) which part
// is theirs. Create it with New, run it with Run; one Sharding serves any
// number of informers of the process.
//
// A replica never serves a slot that another live replica serves: it
// claims the slot in its Lease first and starts only once a read of the
// group's Leases made after that write shows no other live claim; it gives
// a slot up by first telling its informers (whose handlers receive Deleted,
// CauseReshard, for the objects that leave) and, once their handlers have
// returned, dropping the claim. A replica that cannot renew its Lease stops
// serving everything before the others may count it dead. docs/sharding.md
// has the protocol and its failure cases.
type Sharding struct {
	opts   Options
	err    error // invalid options: Run returns it
	leases coordclient.LeaseInterface
	log    *slog.Logger
	name   string // of this replica's Lease

	running atomic.Bool
	// deadline is when the others may first count this replica dead: the
	// send time of the last successful renewal plus LeaseDuration, in
	// nanoseconds since base (the monotonic clock: a step of the wall
	// clock moves neither). Handlers are not called past it (valid); the
	// replica fences a margin before it (fenceAt). 0: never renewed.
	base     time.Time
	deadline atomic.Int64
	fenceAt  *time.Timer // runs checkDeadline at the soft deadline, whatever Run is doing
	// draining: fenced, and its informers have not all applied the empty
	// share yet; handlers get only its Deleted (valid).
	draining atomic.Bool
	wake     chan struct{} // capacity 1: an informer acknowledged a change or unsubscribed; read by Run's goroutine alone

	mu       sync.Mutex      // guards all below
	ver      uint64          // of serving; bumped at each change, 0 before the first
	serving  *slots.Set      // what the informers may serve
	share    kinformer.Share // serving as published, version ver
	changed  chan struct{}   // closed at the next change
	subs     map[*subscription]struct{}
	members  []string   // live members, as last read
	claimed  *slots.Set // in this replica's Lease, as last written
	fenced   bool       // renewals failed past the soft deadline: serving nothing
	release  *slots.Set // slots given up, waiting for relVer's acknowledgements
	relVer   uint64
	lease    *coordinationv1.Lease // as last written or read; nil before
	lastErr  error                 // of the last renewal or read, nil after a success
	started  time.Time             // when Run began: no claims for a RenewPeriod after
	obs      *observer             // nil without Options.Metrics
	observed map[string]observation
	// served is what this replica's Lease says it has synced
	// (ServedAnnotation): the share as of the last time every informer
	// had synced it, less what it has stopped serving since.
	served     *slots.Set
	notServing []string        // live members claiming slots they have not synced past the grace, sorted
	ignored    []string        // names of the group's Leases Options.Members refused, sorted
	warned     map[string]bool // Leases whose refusal was logged (while they exist)
}

// observation is when a Lease of another replica last changed, by this
// replica's clock: Leases expire by what this replica has seen, never by
// the timestamps other clocks wrote.
type observation struct {
	rv       string
	at       time.Time
	duration time.Duration
	// unserved is when this replica first saw the Lease claim slots its
	// ServedAnnotation does not hold, in a row; zero while it holds them.
	unserved time.Time
}

// New returns the membership of this replica in opts.Group, using cfg to
// reach the API server. It does nothing until Run. Invalid options are
// reported by Run.
func New(cfg *rest.Config, opts Options) *Sharding {
	s := newSharding(nil, opts)
	if s.err == nil {
		c := rest.CopyConfig(cfg)
		c.Timeout = s.opts.RenewPeriod // a renewal hung past this is failed
		cs, err := coordclient.NewForConfig(c)
		if err != nil {
			s.err = fmt.Errorf("kinformer: sharding: %w", err)
		} else {
			s.leases = cs.Leases(opts.Namespace)
		}
	}
	return s
}

// newSharding is New over leases (set later if nil).
func newSharding(leases coordclient.LeaseInterface, opts Options) *Sharding {
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 15 * time.Second
	}
	// The Lease says whole seconds, and the others go by what it says.
	opts.LeaseDuration = opts.LeaseDuration.Truncate(time.Second)
	if opts.RenewPeriod == 0 {
		opts.RenewPeriod = opts.LeaseDuration / 5
	}
	if opts.Slots == 0 {
		opts.Slots = DefaultSlots
	}
	if opts.NotServingGrace == 0 {
		opts.NotServingGrace = 4 * opts.LeaseDuration
	}
	s := &Sharding{opts: opts, leases: leases, log: opts.Logger, base: time.Now(), wake: make(chan struct{}, 1),
		changed: make(chan struct{}), subs: map[*subscription]struct{}{}, observed: map[string]observation{},
		warned: map[string]bool{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("shardGroup", opts.Group, "identity", opts.Identity)
	s.obs = opts.Metrics.observer(opts.Group)
	s.err = opts.validate()
	if s.err == nil {
		s.serving = slots.New(opts.Slots)
		s.share = kinformer.Share{Total: opts.Slots}
		s.claimed = slots.New(opts.Slots)
		s.served = slots.New(opts.Slots)
		s.name = leaseName(opts.Group, opts.Identity)
	}
	return s
}

func (o *Options) validate() error {
	var errs []string
	if o.Group == "" {
		errs = append(errs, "Group is required")
	} else if msgs := validation.IsValidLabelValue(o.Group); len(msgs) > 0 {
		errs = append(errs, fmt.Sprintf("Group %q is not a valid label value: %s", o.Group, strings.Join(msgs, "; ")))
	}
	if o.Namespace == "" {
		errs = append(errs, "Namespace is required")
	}
	if o.Identity == "" {
		errs = append(errs, "Identity is required")
	}
	if o.LeaseDuration < 2*time.Second {
		errs = append(errs, fmt.Sprintf("LeaseDuration %s is under 2s", o.LeaseDuration))
	}
	if o.RenewPeriod <= 0 || o.RenewPeriod > o.LeaseDuration/3 {
		errs = append(errs, fmt.Sprintf("RenewPeriod %s must be positive and at most LeaseDuration/3", o.RenewPeriod))
	}
	if o.NotServingGrace < 0 {
		errs = append(errs, fmt.Sprintf("NotServingGrace %s is negative", o.NotServingGrace))
	}
	if err := slots.Valid(o.Slots); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), "kinformer: "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("kinformer: sharding: %s", strings.Join(errs, "; "))
	}
	return nil
}

// Status is a snapshot of a replica's membership.
type Status struct {
	Group     string
	Namespace string // of the group's Leases
	Identity  string
	Members   []string // live members, this replica included, sorted
	Slots     int      // the slots this replica serves
	Total     int      // Options.Slots
	Ranges    string   // the hash ranges it serves, or "none"
	Fenced    bool     // it could not renew its Lease in time, and serves nothing
	// RenewedAt is when the Lease was last renewed (the request's send
	// time); zero before the first renewal.
	RenewedAt time.Time
	// LastError is why the last renewal or read of the group failed; nil
	// once one succeeds again.
	LastError error
	// NotServing are the live members (identities, sorted) whose Leases
	// have claimed slots they do not say they have synced for longer than
	// Options.NotServingGrace: no replica caches those slots' objects. A
	// replica that cannot list its share, or a Lease written by someone
	// who is not a replica.
	NotServing []string
	// Ignored are the group's Leases (names, sorted) that Options.Members
	// refused, as last read.
	Ignored []string
}

// Status returns the replica's membership as last known.
func (s *Sharding) Status() Status {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := Status{Group: s.opts.Group, Namespace: s.opts.Namespace, Identity: s.opts.Identity,
		Members: slices.Clone(s.members), Total: s.opts.Slots, Fenced: s.fenced, LastError: s.lastErr,
		NotServing: slices.Clone(s.notServing), Ignored: slices.Clone(s.ignored)}
	if d := s.deadline.Load(); d != 0 {
		st.RenewedAt = s.base.Add(time.Duration(d) - s.opts.LeaseDuration)
	}
	if s.serving != nil {
		st.Slots, st.Ranges = s.serving.Len(), s.serving.String()
	}
	return st
}

// Run keeps the replica's Lease and its share until ctx ends, then gives
// the share up (its informers' handlers receive Deleted for it) and deletes
// the Lease, so that the others take over at once. It returns the options'
// error if they are invalid, and ErrRunning if it is already running;
// failures to reach the API server are logged and retried.
func (s *Sharding) Run(ctx context.Context) error {
	if s.err != nil {
		return s.err
	}
	if !s.running.CompareAndSwap(false, true) {
		return ErrRunning
	}
	defer s.running.Store(false)
	s.mu.Lock()
	s.fenceAt = time.AfterFunc(time.Hour, s.checkDeadline)
	s.started = time.Now()
	s.fenceAt.Stop()
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		s.fenceAt.Stop()
		s.mu.Unlock()
	}()
	defer s.leave()
	t := time.NewTimer(0)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
			s.tick(ctx)
			t.Reset(s.opts.RenewPeriod)
		case <-s.wake:
			if s.releaseAcked() {
				s.tick(ctx) // drop the claims at once, not at the next renewal
			}
		}
		s.checkDeadline()
	}
}

// leave gives up the share and deletes the Lease when Run ends.
func (s *Sharding) leave() {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.LeaseDuration/2)
	defer cancel()
	s.mu.Lock()
	ver := s.publishLocked(slots.New(s.opts.Slots))
	s.mu.Unlock()
	if !s.waitAcked(ctx, ver) {
		// Informers still drop the share: its claims stay, as a release
		// in progress (a later Run writes them until it is acknowledged),
		// and handlers get only its Deleted meanwhile.
		s.log.Warn("kinformer: sharding: informers did not give the share up in time; the Lease keeps its claims until it expires", "lease", s.name)
		s.mu.Lock()
		s.draining.Store(true)
		if s.release != nil {
			s.release = s.release.Union(s.claimed)
		} else {
			s.release = s.claimed.Clone()
		}
		s.relVer = ver
		s.lease = nil
		s.mu.Unlock()
		return
	}
	err := s.leases.Delete(ctx, s.name, metav1.DeleteOptions{})
	if err != nil && !apierrors.IsNotFound(err) {
		s.log.Warn("kinformer: sharding: could not delete the Lease on leaving; the others take over once it expires", "lease", s.name, "error", err)
	} else {
		s.log.Info("kinformer: sharding: left the group", "lease", s.name)
	}
	s.mu.Lock()
	s.claimed = slots.New(s.opts.Slots)
	s.lease = nil
	s.release = nil
	s.draining.Store(false)
	s.mu.Unlock()
}

// waitAcked waits until every informer has applied version ver. It runs
// on Run's goroutine after Run's loop, so it is wake's only reader: an
// acknowledgement or an unsubscription after the check below finds wake
// empty and fills it, or finds it full of an earlier signal; either way
// the receive returns and the check runs again.
func (s *Sharding) waitAcked(ctx context.Context, ver uint64) bool {
	for {
		s.mu.Lock()
		ok := s.ackedLocked(ver)
		s.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-ctx.Done():
			return false
		case <-s.wake:
		}
	}
}

func (s *Sharding) ackedLocked(ver uint64) bool {
	for sub := range s.subs {
		if sub.acked.Load() < ver {
			return false
		}
	}
	return true
}

// releaseAcked reports whether a pending release has been applied by
// every informer.
func (s *Sharding) releaseAcked() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.release != nil && s.ackedLocked(s.relVer)
}

// checkDeadline fences the replica if its last successful renewal is too
// old: past the soft deadline, a margin before the others may count it
// dead, it serves nothing.
func (s *Sharding) checkDeadline() {
	d := s.deadline.Load()
	if d == 0 || s.since() < d-int64(s.margin()) {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.fenceLocked()
}

// since is the time since base, in nanoseconds, on the monotonic clock.
func (s *Sharding) since() int64 { return int64(time.Since(s.base)) }

// fenceLocked stops serving: the share is published empty and released.
func (s *Sharding) fenceLocked() {
	if s.fenced {
		return
	}
	s.fenced = true
	s.obs.fence(true)
	s.log.Warn("kinformer: sharding: the Lease could not be renewed in time; serving nothing until it is", "lease", s.name)
	// Handlers get nothing but the Deleted of the share from now until
	// every informer has applied the empty share (valid); the claims stay
	// in the Lease until then, as for any release, so that a renewal that
	// succeeds meanwhile does not hand the share to others while handlers
	// still drain it.
	s.draining.Store(true)
	ver := s.publishLocked(slots.New(s.opts.Slots))
	if s.release != nil {
		s.release = s.release.Union(s.claimed)
	} else {
		s.release = s.claimed.Clone()
	}
	s.relVer = ver
}

// margin is how long before its Lease may be counted dead a replica that
// could not renew stops serving: time for its informers to drop the share.
func (s *Sharding) margin() time.Duration {
	return max(s.opts.RenewPeriod, s.opts.LeaseDuration/4)
}

// valid reports whether the replica may still handle events: its Lease
// cannot yet be counted dead by the others, and it is not dropping its
// share after a fence.
func (s *Sharding) valid() bool {
	d := s.deadline.Load()
	return d != 0 && s.since() < d && !s.draining.Load()
}
