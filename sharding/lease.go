package sharding

import (
	"context"
	"fmt"
	"hash/fnv"
	"slices"
	"strings"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/slots"
)

// The Lease side of a Sharding: renewing its own Lease with its claims,
// reading the group's, deleting long-dead ones.

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
		served := s.servedLocked()
		s.mu.Unlock()
		if err := s.renew(ctx, claims, served); err != nil {
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

// peer is another live member, what it claims and what it has synced.
type peer struct {
	identity string
	lease    string // its Lease's name
	claims   *slots.Set
	served   *slots.Set
}

// servedLocked returns what the Lease says this replica has synced
// (ServedAnnotation): the share, once every informer has synced its
// version; until then the last such share, less what left it since.
func (s *Sharding) servedLocked() *slots.Set {
	if s.syncedLocked(s.ver) {
		s.served = s.serving.Clone()
	} else {
		s.served = s.served.Minus(s.served.Minus(s.serving))
	}
	return s.served.Clone()
}

// renew writes this replica's Lease: renewed now, with claims and what it
// has synced. A Lease changed behind its back (a conflict: a response
// lost, a restart) is read again and written once more at once.
func (s *Sharding) renew(ctx context.Context, claims, served *slots.Set) error {
	sent := time.Now()
	err := s.renewOnce(ctx, claims, served, sent)
	if apierrors.IsConflict(err) || apierrors.IsAlreadyExists(err) {
		err = s.renewOnce(ctx, claims, served, sent)
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

func (s *Sharding) renewOnce(ctx context.Context, claims, served *slots.Set, sent time.Time) error {
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
	l.Labels[GroupLabel] = s.opts.Group
	l.Annotations[ClaimsAnnotation] = claims.Encode()
	l.Annotations[ServedAnnotation] = served.Encode()
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
// live members other than this replica, with their claims. Leases that
// Options.Members refuses are left out; live members that claim slots
// they have not synced for longer than NotServingGrace are noted.
func (s *Sharding) readGroup(ctx context.Context) ([]peer, error) {
	list, err := s.leases.List(ctx, metav1.ListOptions{LabelSelector: GroupLabel + "=" + s.opts.Group})
	if err != nil {
		return nil, err
	}
	now := time.Now()
	s.mu.Lock()
	defer s.mu.Unlock()
	seen := map[string]bool{}
	var out []peer
	var stale []*coordinationv1.Lease
	var ignored, notServing []string
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
			o.rv, o.at = l.ResourceVersion, now
		}
		o.duration = d
		s.observed[l.Name] = o
		if now.Sub(o.at) >= staleLeases*d {
			// Long dead (a replica that never came back, under another
			// identity): delete it, unless it has changed since.
			stale = append(stale, l.DeepCopy())
		}
		if now.Sub(o.at) >= d || l.Spec.HolderIdentity == nil || *l.Spec.HolderIdentity == "" {
			o.unserved = time.Time{}
			s.observed[l.Name] = o
			continue // expired by this replica's clock, or released
		}
		id := *l.Spec.HolderIdentity
		if s.opts.Members != nil && (!s.opts.Members(id) || l.Name != leaseName(s.opts.Group, id)) {
			ignored = append(ignored, l.Name)
			if !s.warned[l.Name] {
				s.warned[l.Name] = true
				s.log.Warn("kinformer: sharding: ignoring a Lease of the group whose holder is not an allowed member (Options.Members), or not named as its holder's",
					"lease", l.Name, "holder", id)
			}
			continue
		}
		p := peer{identity: id, claims: slots.New(s.opts.Slots)}
		if v, ok := l.Annotations[ClaimsAnnotation]; ok {
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
		// What it has synced (an unreadable ServedAnnotation: nothing).
		if served, err := slots.Decode(l.Annotations[ServedAnnotation], s.opts.Slots); err == nil {
			p.served = served
		} else {
			p.served = slots.New(s.opts.Slots)
		}
		p.lease = l.Name
		out = append(out, p)
	}
	for name := range s.observed {
		if !seen[name] {
			delete(s.observed, name)
		}
	}
	// A live member whose share (as assigned, and as it claims) is not
	// all synced, for longer than the grace: those slots are cached by no
	// one. A Lease written by someone who is not a replica is assigned a
	// share like any member, and never says it has synced it.
	members := []string{s.opts.Identity}
	for _, p := range out {
		members = append(members, p.identity)
	}
	assigned := assignSlots(members, s.opts.Slots)
	for _, p := range out {
		o := s.observed[p.lease]
		if assigned[p.identity].Union(p.claims).Minus(p.served).Empty() {
			o.unserved = time.Time{}
		} else if o.unserved.IsZero() {
			o.unserved = now
		}
		s.observed[p.lease] = o
		if !o.unserved.IsZero() && now.Sub(o.unserved) >= s.opts.NotServingGrace {
			notServing = append(notServing, p.identity)
		}
	}
	for name := range s.warned {
		if !seen[name] {
			delete(s.warned, name) // said again if it comes back
		}
	}
	slices.Sort(ignored)
	slices.Sort(notServing)
	notServing = slices.Compact(notServing)
	if !slices.Equal(notServing, s.notServing) && len(notServing) > 0 {
		s.log.Warn("kinformer: sharding: members claim slots they have not synced: no replica caches their objects",
			"members", notServing, "grace", s.opts.NotServingGrace)
	}
	s.ignored, s.notServing = ignored, notServing
	s.obs.leasesRead(len(notServing), len(ignored))
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
