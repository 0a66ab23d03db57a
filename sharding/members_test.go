package sharding

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// renewForeign keeps a plain Lease of group g named name, held by
// identity, renewed every 500ms in st until ctx ends: what anyone who may
// write Leases in the namespace can do (issue 44).
func renewForeign(ctx context.Context, st *leaseStore, name, identity string) <-chan struct{} {
	done := make(chan struct{})
	go func() {
		defer close(done)
		secs := int32(4)
		for {
			now := metav1.NewMicroTime(time.Now())
			st.mu.Lock()
			st.putLocked(&coordinationv1.Lease{
				ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns", Labels: map[string]string{GroupLabel: "g"}},
				Spec:       coordinationv1.LeaseSpec{HolderIdentity: &identity, LeaseDurationSeconds: &secs, RenewTime: &now},
			})
			st.mu.Unlock()
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
	}()
	return done
}

// A foreign Lease is a member that is assigned a share and never says it
// has synced it: once NotServingGrace has passed, and not before, the
// replicas name it (Status.NotServing, the metric), and never each other.
func TestShardingReportsAMemberNotServing(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		st := newLeaseStore()
		ctx, cancel := context.WithCancel(context.Background())
		foreign := renewForeign(ctx, st, "g-intruder", "intruder")
		defer func() { cancel(); <-foreign }()
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Group: "g", Namespace: "ns", LeaseDuration: 4 * time.Second, RenewPeriod: 500 * time.Millisecond,
			Slots: 16, NotServingGrace: 5 * time.Second}
		a := startMember(t, st, with(opts, "a", m))
		b := startMember(t, st, with(opts, "b", nil))
		time.Sleep(4 * time.Second) // under the grace
		for _, x := range []*member{a, b} {
			if s := x.sh.Status(); len(s.NotServing) != 0 || !slices.Contains(s.Members, "intruder") {
				t.Fatalf("%s, before the grace: members %v, not serving %v; want the intruder a member, no one reported", s.Identity, s.Members, s.NotServing)
			}
		}
		time.Sleep(3 * time.Second)
		for _, x := range []*member{a, b} {
			s := x.sh.Status()
			if !slices.Equal(s.NotServing, []string{"intruder"}) {
				t.Errorf("%s, past the grace: not serving %v, want [intruder]", s.Identity, s.NotServing)
			}
			if s.Slots == 0 || s.Slots == s.Total {
				t.Errorf("%s serves %d of %d slots: want a part, the intruder holding the rest", s.Identity, s.Slots, s.Total)
			}
		}
		if v := value(t, m.notServing.WithLabelValues("g")); v != 1 {
			t.Errorf("kinformer_sharding_members_not_serving %v, want 1", v)
		}
	})
}

// With Options.Members, a Lease of an identity not allowed, or one named
// otherwise than its holder's, is ignored: the replicas split every slot
// between them, say which Leases they ignore, and report no one.
func TestShardingMembersIgnoresOthersLeases(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		st := newLeaseStore()
		ctx, cancel := context.WithCancel(context.Background())
		foreign := renewForeign(ctx, st, "g-intruder", "intruder")
		impostor := renewForeign(ctx, st, "g-x", "replica-a") // an allowed identity, not in its Lease
		defer func() { cancel(); <-foreign; <-impostor }()
		m, err := NewMetrics(prometheus.NewRegistry())
		if err != nil {
			t.Fatal(err)
		}
		opts := Options{Group: "g", Namespace: "ns", LeaseDuration: 4 * time.Second, RenewPeriod: 500 * time.Millisecond,
			Slots: 16, NotServingGrace: 2 * time.Second, Members: func(id string) bool { return strings.HasPrefix(id, "replica-") }}
		a := startMember(t, st, with(opts, "replica-a", m))
		b := startMember(t, st, with(opts, "replica-b", nil))
		time.Sleep(6 * time.Second)
		total := 0
		for _, x := range []*member{a, b} {
			s := x.sh.Status()
			total += s.Slots
			if !slices.Equal(s.Members, []string{"replica-a", "replica-b"}) || len(s.NotServing) != 0 {
				t.Errorf("%s: members %v, not serving %v", s.Identity, s.Members, s.NotServing)
			}
			if !slices.Equal(s.Ignored, []string{"g-intruder", "g-x"}) {
				t.Errorf("%s: ignored %v, want [g-intruder g-x]", s.Identity, s.Ignored)
			}
		}
		if total != 16 {
			t.Errorf("the replicas serve %d of 16 slots together", total)
		}
		if v := value(t, m.ignored.WithLabelValues("g")); v != 2 {
			t.Errorf("kinformer_sharding_leases_ignored %v, want 2", v)
		}
	})
}

func with(o Options, id string, m *Metrics) Options {
	o.Identity, o.Metrics = id, m
	return o
}
