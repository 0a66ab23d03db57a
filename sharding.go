package kinformer

import (
	"context"
	"fmt"
	"hash/fnv"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/validation"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/slots"
)

// Labels and annotations of the Leases of a shard group.
const (
	// ShardGroupLabel labels every Lease of a group with the group's name.
	ShardGroupLabel = "kinformer.io/shard-group"
	// ShardClaimsAnnotation holds the slots the Lease's holder claims: it
	// serves them, or is about to (see docs/sharding.md).
	ShardClaimsAnnotation = "kinformer.io/shard-claims"
)

// ShardingOptions configure a Sharding.
type ShardingOptions struct {
	// Group names the set of replicas that share the work; its Leases
	// carry it as the label ShardGroupLabel. Required; a valid label value.
	Group string
	// Namespace holds the group's Leases. Required.
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
	// DefaultShardSlots (64).
	Slots int
	// Logger receives membership and ownership changes; nil discards.
	Logger *slog.Logger
	// Metrics, if set, receives the kinformer_sharding_* metrics,
	// labelled with Group (see NewMetrics). Default: none.
	Metrics *Metrics
}

// Sharding is a replica's membership in a shard group: it holds a
// coordination.k8s.io/v1 Lease labelled with the group, reads the others',
// splits the hash space of metadata.uid between the live members, and
// tells the informers that use it (Options.Sharding) which part is theirs.
// Create it with NewSharding, run it with Run; one Sharding serves any
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
	opts   ShardingOptions
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

	mu       sync.Mutex    // guards all below
	ready    bool          // the first assignment is published
	ver      uint64        // of serving; bumped at each change
	serving  *slots.Set    // what the informers may serve
	changed  chan struct{} // closed at the next change
	subs     map[*shardSub]struct{}
	members  []string   // live members, as last read
	claimed  *slots.Set // in this replica's Lease, as last written
	fenced   bool       // renewals failed past the soft deadline: serving nothing
	release  *slots.Set // slots given up, waiting for relVer's acknowledgements
	relVer   uint64
	lease    *coordinationv1.Lease // as last written or read; nil before
	lastErr  error                 // of the last renewal or read, nil after a success
	started  time.Time             // when Run began: no claims for a RenewPeriod after
	obs      *shardingObserver     // nil without ShardingOptions.Metrics
	observed map[string]observation
}

// observation is when a Lease of another replica last changed, by this
// replica's clock: Leases expire by what this replica has seen, never by
// the timestamps other clocks wrote.
type observation struct {
	rv       string
	at       time.Time
	duration time.Duration
}

// NewSharding returns the membership of this replica in opts.Group, using
// cfg to reach the API server. It does nothing until Run. Invalid options
// are reported by Run.
func NewSharding(cfg *rest.Config, opts ShardingOptions) *Sharding {
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

// newSharding is NewSharding over leases (set later if nil).
func newSharding(leases coordclient.LeaseInterface, opts ShardingOptions) *Sharding {
	if opts.LeaseDuration == 0 {
		opts.LeaseDuration = 15 * time.Second
	}
	// The Lease says whole seconds, and the others go by what it says.
	opts.LeaseDuration = opts.LeaseDuration.Truncate(time.Second)
	if opts.RenewPeriod == 0 {
		opts.RenewPeriod = opts.LeaseDuration / 5
	}
	if opts.Slots == 0 {
		opts.Slots = DefaultShardSlots
	}
	s := &Sharding{opts: opts, leases: leases, log: opts.Logger, base: time.Now(), wake: make(chan struct{}, 1),
		changed: make(chan struct{}), subs: map[*shardSub]struct{}{}, observed: map[string]observation{}}
	if s.log == nil {
		s.log = slog.New(slog.DiscardHandler)
	}
	s.log = s.log.With("shardGroup", opts.Group, "identity", opts.Identity)
	if m := opts.Metrics; m != nil {
		s.obs = &shardingObserver{
			members: m.groupMembers.WithLabelValues(opts.Group), slots: m.groupSlots.WithLabelValues(opts.Group),
			fenced: m.groupFenced.WithLabelValues(opts.Group), changes: m.groupChanges.WithLabelValues(opts.Group),
			renewOK: m.groupRenewals.WithLabelValues(opts.Group, "ok"), renewErr: m.groupRenewals.WithLabelValues(opts.Group, "error"),
		}
	}
	s.err = opts.validate()
	if s.err == nil {
		s.serving = slots.New(opts.Slots)
		s.claimed = slots.New(opts.Slots)
		s.name = leaseName(opts.Group, opts.Identity)
	}
	return s
}

func (o *ShardingOptions) validate() error {
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
	if err := slots.Valid(o.Slots); err != nil {
		errs = append(errs, strings.TrimPrefix(err.Error(), "kinformer: "))
	}
	if len(errs) > 0 {
		return fmt.Errorf("kinformer: sharding: %s", strings.Join(errs, "; "))
	}
	return nil
}

// leaseName is the name of a replica's Lease: group and identity, made a
// valid object name, with a hash of both when they had to be changed.
func leaseName(group, identity string) string {
	raw := group + "-" + identity
	var b strings.Builder
	for _, r := range strings.ToLower(raw) {
		switch {
		case r >= 'a' && r <= 'z', r >= '0' && r <= '9', r == '-', r == '.':
			b.WriteRune(r)
		default:
			b.WriteByte('-')
		}
	}
	name := strings.Trim(b.String(), "-.")
	if name != raw || len(name) > 200 {
		h := fnv.New32a()
		h.Write([]byte(group + "\x00" + identity))
		name = fmt.Sprintf("%s-%08x", strings.Trim(name[:min(len(name), 200)], "-."), h.Sum32())
	}
	return name
}

// ShardingStatus is a snapshot of a replica's membership.
type ShardingStatus struct {
	Group     string
	Namespace string // of the group's Leases
	Identity  string
	Members   []string // live members, this replica included, sorted
	Slots     int      // the slots this replica serves
	Total     int      // ShardingOptions.Slots
	Ranges    string   // the hash ranges it serves, or "none"
	Fenced    bool     // it could not renew its Lease in time, and serves nothing
	// RenewedAt is when the Lease was last renewed (the request's send
	// time); zero before the first renewal.
	RenewedAt time.Time
	// LastError is why the last renewal or read of the group failed; nil
	// once one succeeds again.
	LastError error
}

// Status returns the replica's membership as last known.
func (s *Sharding) Status() ShardingStatus {
	s.mu.Lock()
	defer s.mu.Unlock()
	st := ShardingStatus{Group: s.opts.Group, Namespace: s.opts.Namespace, Identity: s.opts.Identity,
		Members: slices.Clone(s.members), Total: s.opts.Slots, Fenced: s.fenced, LastError: s.lastErr}
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

// tick renews the Lease, reads the group, and moves the share one step
// towards the assignment: confirms claimed slots no one else claims,
// releases slots no longer assigned, claims newly assigned free ones (and
// confirms them after a second write and read).
func (s *Sharding) tick(ctx context.Context) {
	for pass := 0; pass < 2; pass++ {
		s.checkDeadline() // never renew past the soft deadline without fencing first
		s.mu.Lock()
		if s.release != nil && s.ackedLocked(s.relVer) {
			s.claimed = s.claimed.Minus(s.release)
			s.release = nil
			s.draining.Store(false)
		}
		claims := s.claimed.Clone()
		s.mu.Unlock()
		if err := s.renew(ctx, claims); err != nil {
			s.setErr(fmt.Errorf("renewing the Lease %s: %w", s.name, err))
			if ctx.Err() == nil {
				s.log.Warn("kinformer: sharding: renewing the Lease failed", "lease", s.name, "error", err)
			}
			return
		}
		others, err := s.readGroup(ctx)
		if err != nil {
			s.setErr(fmt.Errorf("reading the group's Leases: %w", err))
		} else {
			s.setErr(nil)
		}
		if err != nil {
			if ctx.Err() == nil {
				s.log.Warn("kinformer: sharding: reading the group's Leases failed", "error", err)
			}
			return
		}
		if !s.reconcile(others, claims) {
			return
		}
	}
}

func (s *Sharding) setErr(err error) {
	s.mu.Lock()
	s.lastErr = err
	s.mu.Unlock()
}

// peer is another live member and what it claims.
type peer struct {
	identity string
	claims   *slots.Set
}

// renew writes this replica's Lease: renewed now, with claims. A Lease
// changed behind its back (a conflict: a response lost, a restart) is read
// again and written once more at once.
func (s *Sharding) renew(ctx context.Context, claims *slots.Set) error {
	sent := time.Now()
	err := s.renewOnce(ctx, claims, sent)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		err = s.renewOnce(ctx, claims, sent)
	}
	s.obs.renewed(err)
	if err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if prev := s.deadline.Load(); prev != 0 && s.since() >= prev-int64(s.margin()) {
		// The renewal came back past the soft deadline of the one before:
		// the others may have counted this replica dead meanwhile. Fence
		// before the new deadline makes handlers valid again.
		s.fenceLocked()
	}
	d := int64(sent.Sub(s.base) + s.opts.LeaseDuration)
	s.deadline.Store(d)
	if s.fenceAt != nil {
		s.fenceAt.Reset(time.Duration(d - int64(s.margin()) - s.since()))
	}
	return nil
}

func (s *Sharding) renewOnce(ctx context.Context, claims *slots.Set, sent time.Time) error {
	now := metav1.NewMicroTime(sent)
	secs := int32(max(s.opts.LeaseDuration/time.Second, 1))
	s.mu.Lock()
	cur := s.lease
	s.mu.Unlock()
	var l *coordinationv1.Lease
	var err error
	if cur == nil {
		cur, err = s.leases.Get(ctx, s.name, metav1.GetOptions{})
		if apierrors.IsNotFound(err) {
			cur, err = nil, nil
		}
		if err != nil {
			return err
		}
	}
	if cur == nil {
		l = &coordinationv1.Lease{ObjectMeta: metav1.ObjectMeta{Name: s.name, Namespace: s.opts.Namespace}}
	} else {
		l = cur.DeepCopy()
	}
	if l.Labels == nil {
		l.Labels = map[string]string{}
	}
	if l.Annotations == nil {
		l.Annotations = map[string]string{}
	}
	l.Labels[ShardGroupLabel] = s.opts.Group
	l.Annotations[ShardClaimsAnnotation] = claims.Encode()
	id := s.opts.Identity
	l.Spec.HolderIdentity = &id
	l.Spec.LeaseDurationSeconds = &secs
	l.Spec.RenewTime = &now
	if l.Spec.AcquireTime == nil || cur == nil {
		l.Spec.AcquireTime = &now
	}
	var out *coordinationv1.Lease
	if cur == nil {
		out, err = s.leases.Create(ctx, l, metav1.CreateOptions{})
	} else {
		out, err = s.leases.Update(ctx, l, metav1.UpdateOptions{})
	}
	if err != nil {
		if apierrors.IsConflict(err) || apierrors.IsNotFound(err) || apierrors.IsAlreadyExists(err) {
			s.mu.Lock()
			s.lease = nil // read it afresh next time
			s.mu.Unlock()
		}
		return err
	}
	s.mu.Lock()
	s.lease = out
	s.mu.Unlock()
	return nil
}

// readGroup lists the group's Leases (a consistent read) and returns the
// live members other than this replica, with their claims.
func (s *Sharding) readGroup(ctx context.Context) ([]peer, error) {
	list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: ShardGroupLabel + "=" + s.opts.Group})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []peer
	var stale []*coordinationv1.Lease
	defer func() {
		for _, l := range stale {
			go s.deleteStale(l)
		}
	}()
	for i := range list.Items {
		l := &list.Items[i]
		if l.Name == s.name {
			continue
		}
		seen[l.Name] = true
		d := s.opts.LeaseDuration
		if l.Spec.LeaseDurationSeconds != nil && *l.Spec.LeaseDurationSeconds > 0 {
			d = time.Duration(*l.Spec.LeaseDurationSeconds) * time.Second
		}
		o, ok := s.observed[l.Name]
		if !ok || o.rv != l.ResourceVersion {
			o = observation{rv: l.ResourceVersion, at: now}
		}
		o.duration = d
		s.observed[l.Name] = o
		if now.Sub(o.at) >= staleLeases*d {
			// Long dead (a replica that never came back, under another
			// identity): delete it, unless it has changed since.
			stale = append(stale, l.DeepCopy())
		}
		if now.Sub(o.at) >= d || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			continue // expired by this replica's clock, or released
		}
		p := peer{identity: *l.Spec.HolderIdentity, claims: slots.New(s.opts.Slots)}
		if v, ok := l.Annotations[ShardClaimsAnnotation]; ok {
			c, err := slots.Decode(v, s.opts.Slots)
			if err != nil {
				// A member that claims in a form this replica cannot read
				// (another slot count) might serve anything: claim nothing
				// new while it lives.
				s.log.Warn("kinformer: sharding: cannot read a member's claims; claiming nothing it might hold", "lease", l.Name, "error", err)
				c = slots.New(s.opts.Slots)
				for i := range s.opts.Slots {
					c.Add(i)
				}
			}
			p.claims = c
		}
		out = append(out, p)
	}
	for name := range s.observed {
		if !seen[name] {
			delete(s.observed, name)
		}
	}
	return out, nil
}

// staleLeases: a Lease unchanged for this many of its durations is
// deleted by whichever member sees it so.
const staleLeases = 10

// deleteStale deletes a long-expired Lease of another replica, if it is
// still the version seen.
func (s *Sharding) deleteStale(l *coordinationv1.Lease) {
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.RenewPeriod)
	defer cancel()
	rv := l.ResourceVersion
	err := s.leases.Delete(ctx, l.Name, metav1.DeleteOptions{Preconditions: &metav1.Preconditions{ResourceVersion: &rv}})
	if err == nil {
		s.log.Info("kinformer: sharding: deleted a long-expired Lease", "lease", l.Name)
	}
}

// reconcile moves the share one step, given the live others read after
// the write of claims; it reports whether it claimed new slots (which a
// second write and read must confirm).
func (s *Sharding) reconcile(others []peer, claims *slots.Set) (claimedMore bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.fenced {
		s.fenced = false
		s.obs.fence(false)
		s.log.Info("kinformer: sharding: the Lease is renewed again", "lease", s.name)
	}
	members := []string{s.opts.Identity}
	taken := slots.New(s.opts.Slots) // claimed by a live other
	lower := slots.New(s.opts.Slots) // ... by one whose identity sorts first
	for _, p := range others {
		members = append(members, p.identity)
		taken = taken.Union(p.claims)
		if p.identity < s.opts.Identity {
			lower = lower.Union(p.claims)
		}
	}
	slices.Sort(members)
	members = slices.Compact(members)
	if !slices.Equal(members, s.members) {
		s.log.Info("kinformer: sharding: members", "members", members)
	}
	s.members = members
	s.obs.setMembers(len(members))
	want := assignSlots(members, s.opts.Slots)[s.opts.Identity]

	// Claimed (in the Lease just written) but not served yet: serve those
	// no live other claims; drop those no longer wanted, and those a
	// member sorting first also claims (it keeps its claim; two that claim
	// the same slot at once would otherwise both wait for ever).
	serving := s.serving.Clone()
	pending := claims.Minus(s.serving)
	if s.release != nil {
		pending = pending.Minus(s.release) // being given up: claimed until acknowledged
	}
	for i := range s.opts.Slots {
		if !pending.Contains(i) {
			continue
		}
		switch {
		case !want.Contains(i) || lower.Contains(i):
			s.claimed.Remove(i)
		case !taken.Contains(i):
			serving.Add(i)
		}
	}
	// Served but no longer wanted: stop serving (the informers drop the
	// objects, their handlers return), then drop the claim (tick, once
	// every informer has acknowledged). One release at a time.
	var gone *slots.Set
	if s.release == nil {
		if gone = serving.Minus(want); !gone.Empty() {
			serving = serving.Minus(gone)
		}
	}
	ver := s.publishLocked(serving)
	if gone != nil && !gone.Empty() {
		s.release, s.relVer = gone, ver
	}
	// Wanted, and claimed by no live other: claim now, serve once a read
	// after the write confirms.
	// Not in the first RenewPeriod of a run: replicas started together
	// (a new group, a rollout) see each other first, instead of the first
	// one claiming, and listing, everything.
	if time.Since(s.started) < s.opts.RenewPeriod {
		return false
	}
	if free := want.Minus(s.claimed).Minus(taken); !free.Empty() {
		s.claimed = s.claimed.Union(free)
		return true
	}
	return false
}

// publishLocked makes set what the informers serve, and returns its
// version.
func (s *Sharding) publishLocked(set *slots.Set) uint64 {
	if set.Equal(s.serving) && s.ready {
		return s.ver
	}
	if !set.Equal(s.serving) {
		s.log.Info("kinformer: sharding: serving", "slots", set.Len(), "of", s.opts.Slots, "ranges", set.String())
	}
	s.serving = set
	s.obs.share(set.Len())
	s.ver++
	close(s.changed)
	s.changed = make(chan struct{})
	s.ready = true
	return s.ver
}

// shardSub is one informer's view of a Sharding.
type shardSub struct {
	sh    *Sharding
	acked atomic.Uint64 // the last version the informer has applied
}

// subscribe registers an informer; it must ack each version it applies
// and close when it stops.
func (s *Sharding) subscribe() *shardSub {
	sub := &shardSub{sh: s}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub
}

// current returns the published share, its version, and a channel closed
// at the next change; ready is false until the first share is published.
func (sub *shardSub) current() (set *slots.Set, ver uint64, changed <-chan struct{}, ready bool) {
	s := sub.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.serving, s.ver, s.changed, s.ready
}

// ack records that the informer has applied version ver: its handlers
// have returned for every object it dropped.
func (sub *shardSub) ack(ver uint64) {
	if sub.acked.Load() < ver {
		sub.acked.Store(ver)
	}
	select {
	case sub.sh.wake <- struct{}{}:
	default:
	}
}

func (sub *shardSub) close() {
	s := sub.sh
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
	select {
	case s.wake <- struct{}{}:
	default:
	}
}

// shardingObserver holds a Sharding's metrics; its methods do nothing on
// nil.
type shardingObserver struct {
	members, slots, fenced prometheus.Gauge
	changes                prometheus.Counter
	renewOK, renewErr      prometheus.Counter
}

func (o *shardingObserver) setMembers(n int) {
	if o != nil {
		o.members.Set(float64(n))
	}
}

func (o *shardingObserver) share(slots int) {
	if o != nil {
		o.slots.Set(float64(slots))
		o.changes.Inc()
	}
}

func (o *shardingObserver) fence(on bool) {
	if o != nil {
		v := 0.0
		if on {
			v = 1
		}
		o.fenced.Set(v)
	}
}

func (o *shardingObserver) renewed(err error) {
	if o == nil {
		return
	}
	if err != nil {
		o.renewErr.Inc()
	} else {
		o.renewOK.Inc()
	}
}
