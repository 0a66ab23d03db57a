package sharding

import (
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// value reads a gauge's or a counter's value.
func value(t *testing.T, c prometheus.Metric) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	if m.Counter != nil {
		return m.Counter.GetValue()
	}
	return m.Gauge.GetValue()
}

// groupMetrics are a group's metrics, as "members", "slots", "fenced",
// "renewals ok", "renewals error" and "changes".
func groupMetrics(t *testing.T, m *Metrics, group string) map[string]float64 {
	t.Helper()
	return map[string]float64{
		"members":        value(t, m.members.WithLabelValues(group)),
		"slots":          value(t, m.slots.WithLabelValues(group)),
		"fenced":         value(t, m.fenced.WithLabelValues(group)),
		"renewals ok":    value(t, m.renewals.WithLabelValues(group, "ok")),
		"renewals error": value(t, m.renewals.WithLabelValues(group, "error")),
		"changes":        value(t, m.changes.WithLabelValues(group)),
	}
}

// Options.Metrics: members, slots, fenced, renewals and share changes
// move with a replica cut off and back. A change of share is counted
// once, however many renewals see it: the first share (empty, in the
// first RenewPeriod), all 16 slots, none once fenced, all 16 again.
func TestShardingMetrics(t *testing.T) {
	inBubble(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := NewMetrics(reg); err == nil {
			t.Fatal("the metrics registered twice on one registry")
		}
		a := startMember(t, newLeaseStore(), Options{Group: "g", Namespace: "ns", Identity: "a", LeaseDuration: 2 * time.Second,
			RenewPeriod: 400 * time.Millisecond, Slots: 16, Metrics: m})
		time.Sleep(time.Second)
		g := groupMetrics(t, m, "g")
		if g["members"] != 1 || g["slots"] != 16 || g["fenced"] != 0 || g["renewals ok"] == 0 || g["changes"] != 2 {
			t.Fatalf("alone and serving everything, after the first (empty) share and all 16 slots: %v", g)
		}
		time.Sleep(5 * time.Second) // a dozen renewals, no change
		if g = groupMetrics(t, m, "g"); g["changes"] != 2 || g["renewals ok"] < 12 {
			t.Fatalf("renewals without a change: %v", g)
		}
		a.client.down.Store(true)
		time.Sleep(3 * time.Second)
		g = groupMetrics(t, m, "g")
		if g["fenced"] != 1 || g["slots"] != 0 || g["renewals error"] == 0 || g["changes"] != 3 {
			t.Fatalf("cut off past the LeaseDuration: %v", g)
		}
		a.client.down.Store(false)
		time.Sleep(2 * time.Second)
		g = groupMetrics(t, m, "g")
		if g["fenced"] != 0 || g["slots"] != 16 || g["changes"] != 4 {
			t.Fatalf("back: %v", g)
		}
		a.stop(t)
		if g = groupMetrics(t, m, "g"); g["slots"] != 0 || g["changes"] != 5 {
			t.Fatalf("left: %v", g)
		}
	})
}
