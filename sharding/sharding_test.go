package sharding

import (
	"context"
	"errors"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kinformer/kinformer/internal/slots"
)

// A replica that cannot renew its Lease stops serving a margin before the
// others may count it dead: at the send time of its last renewal plus
// LeaseDuration minus max(RenewPeriod, LeaseDuration/4), time for its
// informers to drop the share; its handlers may not be called at all
// from the LeaseDuration on.
func TestShardingFencesAMarginBeforeTheLeaseExpires(t *testing.T) {
	for _, c := range []struct {
		name           string
		ld, rp, margin time.Duration
	}{
		{"LeaseDuration/4", 4 * time.Second, 400 * time.Millisecond, time.Second},
		{"RenewPeriod", 6 * time.Second, 2 * time.Second, 2 * time.Second},
	} {
		t.Run(c.name, func(t *testing.T) {
			inBubble(t, func(t *testing.T) {
				m, err := NewMetrics(prometheus.NewRegistry())
				if err != nil {
					t.Fatal(err)
				}
				a := startMember(t, newLeaseStore(), Options{Group: "g", Namespace: "ns", Identity: "a",
					LeaseDuration: c.ld, RenewPeriod: c.rp, Slots: 16, Metrics: m})
				time.Sleep(3 * c.rp)
				if got := len(a.share().Slots); got != 16 {
					t.Fatalf("alone, serving %d slots, want 16", got)
				}
				a.client.down.Store(true)
				synctest.Wait() // a renewal under way has recorded its success, or will fail
				renewed := a.sh.Status().RenewedAt
				fence := renewed.Add(c.ld - c.margin)
				time.Sleep(time.Until(fence.Add(-10 * time.Millisecond)))
				if st := a.sh.Status(); st.Fenced || len(a.share().Slots) != 16 || !a.sub.Valid() {
					t.Fatalf("10ms before the soft deadline (%v after the last renewal): fenced %v, serving %d, valid %v",
						c.ld-c.margin, st.Fenced, len(a.share().Slots), a.sub.Valid())
				}
				time.Sleep(20 * time.Millisecond)
				if st := a.sh.Status(); !st.Fenced || len(a.share().Slots) != 0 || st.Slots != 0 {
					t.Fatalf("10ms past the soft deadline (%v after the last renewal): fenced %v, serving %d slots; want fenced, serving none",
						c.ld-c.margin, st.Fenced, len(a.share().Slots))
				}
				if v := value(t, m.fenced.WithLabelValues("g")); v != 1 {
					t.Fatalf("fenced, the metric says %v", v)
				}
				time.Sleep(time.Until(renewed.Add(c.ld)))
				if a.sub.Valid() {
					t.Fatal("at the LeaseDuration, handlers may still be called")
				}
			})
		})
	}
}

// When two replicas claim the same slot, the one whose identity sorts
// first keeps its claim and the other drops it (docs/sharding.md): both
// waiting for the other would leave the slot unserved for ever.
func TestShardingLowerIdentityKeepsAContestedClaim(t *testing.T) {
	const total = 16
	members := []string{"a", "b"}
	assign := assignSlots(members, total)
	// contest makes self claim what it wants while other claims the same
	// slots, and reconciles once; it returns self.
	contest := func(self, other string) *Sharding {
		s := newSharding(nil, Options{Group: "g", Namespace: "ns", Identity: self, Slots: total})
		s.started = time.Now().Add(-time.Hour)
		want := assign[self]
		s.claimed = want.Clone()
		s.reconcile([]peer{{identity: other, claims: want.Clone()}}, want.Clone())
		return s
	}

	a := contest("a", "b")
	if !a.claimed.Equal(assign["a"]) {
		t.Errorf("a, the lower identity, claims %s after the contest; want its claim kept, %s", a.claimed, assign["a"])
	}
	if !a.serving.Empty() {
		t.Errorf("a serves %s while b still claims it", a.serving)
	}
	// b has dropped its claim: a serves.
	a.reconcile([]peer{{identity: "b", claims: slots.New(total)}}, a.claimed.Clone())
	if !a.serving.Equal(assign["a"]) {
		t.Errorf("a serves %s once b's claim is gone; want %s", a.serving, assign["a"])
	}

	b := contest("b", "a")
	if b.claimed.Intersects(assign["b"]) || !b.serving.Empty() {
		t.Errorf("b, the higher identity, claims %s and serves %s after the contest; want its claim dropped", b.claimed, b.serving)
	}
}

// Run runs once at a time, and reports invalid options.
func TestShardingRunErrors(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		a := startMember(t, newLeaseStore(), Options{Group: "g", Namespace: "ns", Identity: "a", LeaseDuration: 2 * time.Second})
		time.Sleep(time.Second)
		if err := a.sh.Run(context.Background()); !errors.Is(err, ErrRunning) {
			t.Errorf("a second Run: %v, want ErrRunning", err)
		}
	})
	for _, o := range []Options{
		{Namespace: "ns", Identity: "a"},
		{Group: "not a label value!", Namespace: "ns", Identity: "a"},
		{Group: "g", Identity: "a"},
		{Group: "g", Namespace: "ns"},
		{Group: "g", Namespace: "ns", Identity: "a", LeaseDuration: time.Second},
		{Group: "g", Namespace: "ns", Identity: "a", RenewPeriod: 10 * time.Second},
		{Group: "g", Namespace: "ns", Identity: "a", Slots: 100},
	} {
		err := newSharding(nil, o).Run(context.Background())
		if err == nil || !strings.HasPrefix(err.Error(), "kinformer: sharding: ") {
			t.Errorf("%+v: Run returned %v, want an error of the options", o, err)
		}
	}
	if !strings.HasPrefix(ErrRunning.Error(), "kinformer: sharding: ") {
		t.Errorf("ErrRunning is %q, not prefixed like the package's other errors", ErrRunning)
	}
}
