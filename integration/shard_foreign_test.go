package integration

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/sharding"
)

// foreignLease writes, and renews every 500ms until the test ends, a plain
// Lease labelled with group: what anyone who may write Leases in the
// namespace can do (issue 44). It names the Lease as a replica's would be
// named, so that only the identity tells it apart.
func foreignLease(t *testing.T, c kubernetes.Interface, ns, group, identity string) {
	t.Helper()
	secs := int32(4)
	now := metav1.NewMicroTime(time.Now())
	l := &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: group + "-" + identity, Namespace: ns, Labels: map[string]string{sharding.GroupLabel: group}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &identity, LeaseDurationSeconds: &secs, RenewTime: &now},
	}
	leases := c.CoordinationV1().Leases(ns)
	l, err := leases.Create(bounded(t, callTimeout), l, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	t.Cleanup(func() { cancel(); <-done })
	go func() {
		defer close(done)
		tick := time.NewTicker(500 * time.Millisecond)
		defer tick.Stop()
		for {
			select {
			case <-ctx.Done():
				return
			case <-tick.C:
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			rctx, rcancel := context.WithTimeout(ctx, callTimeout)
			out, err := leases.Update(rctx, l, metav1.UpdateOptions{})
			rcancel()
			if err == nil {
				l = out
			} else if ctx.Err() == nil {
				t.Logf("renewing the foreign Lease: %v", err)
			}
		}
	}()
}

// A Lease labelled with the group and renewed by someone who is not a
// replica (issue 44). Without Options.Members it is a member: it is
// assigned a share it never syncs, and the replicas say so (Status,
// kinformer_sharding_members_not_serving) once NotServingGrace has
// passed, while not saying it of each other. With Options.Members it is
// ignored: it gets no share, the replicas split everything between them,
// and they say which Lease they ignore (Status, metric).
func TestShardingForeignLease(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	c := clientset(t, cfg)
	const n = 60
	start := func(t *testing.T, ns string, members func(string) bool) ([]*replica, []*prometheus.Registry) {
		own := newOwnership()
		var rs []*replica
		var ms []*prometheus.Registry
		for _, id := range []string{"replica-a", "replica-b"} {
			reg := prometheus.NewRegistry()
			m, err := sharding.NewMetrics(reg)
			if err != nil {
				t.Fatal(err)
			}
			ms = append(ms, reg)
			rs = append(rs, startReplicaWith(t, cfg, ns, "g", id, own, "", nil, func(o *sharding.Options) {
				o.Members = members
				o.NotServingGrace = 3 * time.Second
				o.Metrics = m
			}))
		}
		t.Cleanup(func() { own.check(t) })
		return rs, ms
	}
	gauge := func(t *testing.T, reg *prometheus.Registry, name string) float64 {
		t.Helper()
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() == name && len(mf.GetMetric()) == 1 {
				return mf.GetMetric()[0].GetGauge().GetValue()
			}
		}
		t.Fatalf("no single series of %s", name)
		return 0
	}

	t.Run("without Members", func(t *testing.T) {
		ns := testenv.NewNamespace(t, cfg)
		for i := range n {
			mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "v"))
		}
		foreignLease(t, c, ns, "g", "intruder")
		rs, ms := start(t, ns, nil)
		eventually(t, 60*time.Second, "both replicas report the intruder as a member serving nothing", func() bool {
			for _, r := range rs {
				if st := r.sh.Status(); !slices.Equal(st.NotServing, []string{"intruder"}) || !slices.Contains(st.Members, "intruder") {
					return false
				}
			}
			return true
		})
		for i, r := range rs {
			st := r.sh.Status()
			if st.Slots == 0 || st.Slots >= st.Total {
				t.Errorf("%s serves %d of %d slots: want a part, the intruder holding the rest", r.id, st.Slots, st.Total)
			}
			if v := gauge(t, ms[i], "kinformer_sharding_members_not_serving"); v != 1 {
				t.Errorf("%s: kinformer_sharding_members_not_serving %v, want 1", r.id, v)
			}
		}
		// The intruder's share is cached by no one: what the report is for.
		cached := 0
		for _, r := range rs {
			cached += r.inf.Cache().Len()
		}
		if cached >= n {
			t.Errorf("the replicas cache %d of %d objects; the intruder's share should be cached by no one", cached, n)
		}
	})

	t.Run("with Members", func(t *testing.T) {
		ns := testenv.NewNamespace(t, cfg)
		for i := range n {
			mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "v"))
		}
		foreignLease(t, c, ns, "g", "intruder")
		rs, ms := start(t, ns, func(id string) bool { return strings.HasPrefix(id, "replica-") })
		counts := checkPartition(t, c, ns, rs, 60*time.Second)
		t.Logf("shares: %v", counts)
		// Past the grace: no one is said not to serve, the intruder is not
		// a member, and its Lease is said to be ignored.
		time.Sleep(4 * time.Second)
		for i, r := range rs {
			st := r.sh.Status()
			if len(st.NotServing) != 0 || slices.Contains(st.Members, "intruder") || !slices.Equal(st.Ignored, []string{"g-intruder"}) {
				t.Errorf("%s: members %v, not serving %v, ignored %v; want the replicas, none, [g-intruder]", r.id, st.Members, st.NotServing, st.Ignored)
			}
			if v := gauge(t, ms[i], "kinformer_sharding_leases_ignored"); v != 1 {
				t.Errorf("%s: kinformer_sharding_leases_ignored %v, want 1", r.id, v)
			}
			if v := gauge(t, ms[i], "kinformer_sharding_members_not_serving"); v != 0 {
				t.Errorf("%s: kinformer_sharding_members_not_serving %v, want 0", r.id, v)
			}
		}
		checkPartition(t, c, ns, rs, 10*time.Second)
	})
}
