package kinformer

import (
	"fmt"
	"strings"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// gather returns every metric of reg as "name{label=value,...} value".
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]float64{}
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			var labels []string
			for _, l := range m.GetLabel() {
				labels = append(labels, l.GetName()+"="+l.GetValue())
			}
			out[mf.GetName()+"{"+strings.Join(labels, ",")+"}"] = value(m)
		}
	}
	return out
}

func value(m *dto.Metric) float64 {
	switch {
	case m.Counter != nil:
		return m.Counter.GetValue()
	case m.Gauge != nil:
		return m.Gauge.GetValue()
	}
	return 0
}

// The metrics move as a scripted sequence says: 5 created, 3 modified, 2
// deleted, one re-list forced by a 410; and no label value is an object's
// name.
func TestMetricsAfterAScriptedSequence(t *testing.T) {
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := NewMetrics(reg); err == nil {
		t.Fatal("a second Metrics on one registry was accepted")
	}
	s := newFakeServer()
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Name: "configmaps", Metrics: m, DisableStreamingList: true})
	reg2 := inf.AddHandler(func(cmEvent) {})
	for i := range 5 {
		s.put(cm("ns", fmt.Sprintf("obj-%d", i)))
	}
	for i := range 3 {
		s.put(cm("ns", fmt.Sprintf("obj-%d", i), "v", "2"))
	}
	for i := range 2 {
		s.del("ns", fmt.Sprintf("obj-%d", i))
	}
	eventually(t, "10 events", func() bool { return len(rec.lines(false, Added, Modified, Deleted)) == 10 })
	eventually(t, "the watch open", func() bool { return s.openWatches() == 1 })
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
	eventually(t, "the re-list", func() bool { l, _ := s.counts(); return l == 2 })
	eventually(t, "the second watch", func() bool { _, w := s.counts(); return w == 2 })
	eventually(t, "handlers caught up", func() bool { return reg2.Pending() == 0 })

	got := gather(t, reg)
	for key, want := range map[string]float64{
		`kinformer_events_total{resource=configmaps,type=ADDED}`:             5,
		`kinformer_events_total{resource=configmaps,type=MODIFIED}`:          3,
		`kinformer_events_total{resource=configmaps,type=DELETED}`:           2,
		`kinformer_events_total{resource=configmaps,type=ERROR}`:             1,
		`kinformer_relists_total{cause=expired,resource=configmaps}`:         1,
		`kinformer_requests_total{resource=configmaps,result=ok,verb=list}`:  2,
		`kinformer_requests_total{resource=configmaps,result=ok,verb=watch}`: 2,
		`kinformer_objects{resource=configmaps}`:                             3,
		`kinformer_synced{resource=configmaps}`:                              1,
		`kinformer_handler_queue_depth{resource=configmaps}`:                 0,
		`kinformer_persistent_error{resource=configmaps}`:                    0,
		`kinformer_backoff_waits_total{resource=configmaps}`:                 0,
	} {
		if got[key] != want {
			t.Errorf("%s = %v, want %v", key, got[key], want)
		}
	}
	if _, ok := got[`kinformer_last_event_age_seconds{resource=configmaps}`]; !ok {
		t.Error("no kinformer_last_event_age_seconds")
	}
	for key := range got {
		if strings.Contains(key, "obj-") || strings.Contains(key, "=ns") {
			t.Errorf("an object's name or namespace in a label: %s", key)
		}
	}
	inf.Stop()
	inf.dropMetrics()
	if _, ok := gather(t, reg)[`kinformer_objects{resource=configmaps}`]; ok {
		t.Error("a dropped informer's gauges are still collected")
	}
}
