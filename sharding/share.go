package sharding

import (
	"slices"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/slots"
)

// The share: what the replica serves, moved one step at each renewal
// (reconcile), published to its informers (Subscribe), and given up only
// once they have all acknowledged.

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
	if set.Equal(s.serving) && s.ver != 0 {
		return s.ver
	}
	if !set.Equal(s.serving) {
		s.log.Info("kinformer: sharding: serving", "slots", set.Len(), "of", s.opts.Slots, "ranges", set.String())
	}
	s.serving = set
	s.obs.share(set.Len())
	s.ver++
	s.share = kinformer.Share{Version: s.ver, Total: s.opts.Slots, Slots: set.Slots()}
	close(s.changed)
	s.changed = make(chan struct{})
	return s.ver
}

// Subscribe registers an informer: until it closes the subscription, the
// replica gives no slot up before the informer has acknowledged a share
// without it. Informers call it (kinformer.Options.Sharding); a program
// does not need to.
func (s *Sharding) Subscribe() kinformer.ShareSubscription {
	sub := &subscription{sh: s}
	s.mu.Lock()
	s.subs[sub] = struct{}{}
	s.mu.Unlock()
	return sub
}

// subscription is one informer's view of a Sharding.
type subscription struct {
	sh     *Sharding
	acked  atomic.Uint64 // the last version the informer has applied
	synced atomic.Uint64 // the last version whose every object it holds
}

func (sub *subscription) Share() (kinformer.Share, <-chan struct{}) {
	s := sub.sh
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.share, s.changed
}

func (sub *subscription) Ack(v uint64) {
	for {
		old := sub.acked.Load()
		if old >= v || sub.acked.CompareAndSwap(old, v) {
			break
		}
	}
	sub.sh.signal()
}

// Synced records that the informer holds every object of share version v
// (kinformer.ShareSyncer); the Lease says so at its next renewal
// (ServedAnnotation).
func (sub *subscription) Synced(v uint64) {
	for {
		old := sub.synced.Load()
		if old >= v || sub.synced.CompareAndSwap(old, v) {
			return
		}
	}
}

// syncedLocked reports whether every informer has synced version ver.
func (s *Sharding) syncedLocked(ver uint64) bool {
	for sub := range s.subs {
		if sub.synced.Load() < ver {
			return false
		}
	}
	return true
}

func (sub *subscription) Valid() bool { return sub.sh.valid() }

func (sub *subscription) Close() {
	s := sub.sh
	s.mu.Lock()
	delete(s.subs, sub)
	s.mu.Unlock()
	s.signal()
}

// signal wakes Run's goroutine: an informer acknowledged a share or
// unsubscribed.
func (s *Sharding) signal() {
	select {
	case s.wake <- struct{}{}:
	default:
	}
}
