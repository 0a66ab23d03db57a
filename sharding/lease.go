package sharding

import (
	"context"
	"fmt"
	"hash/fnv"
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
	l.Labels[GroupLabel] = s.opts.Group
	l.Annotations[ClaimsAnnotation] = claims.Encode()
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
