package kinformer

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net"
	neturl "net/url"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// gather returns every metric of reg as "name{label=value,...} value".
func gather(t *testing.T, reg *prometheus.Registry) map[string]float64 {
	t.Helper()
	out := map[string]float64{}
	for _, s := range samples(t, reg) {
		var labels []string
		for _, l := range s.labels {
			labels = append(labels, l.GetName()+"="+l.GetValue())
		}
		out[s.name+"{"+strings.Join(labels, ",")+"}"] = value(s.metric)
	}
	return out
}

// sample is one metric of a family, with its labels.
type sample struct {
	name   string
	labels []*dto.LabelPair
	metric *dto.Metric
}

func (s sample) label(name string) string {
	for _, l := range s.labels {
		if l.GetName() == name {
			return l.GetValue()
		}
	}
	return ""
}

// samples returns every metric of reg.
func samples(t *testing.T, reg *prometheus.Registry) []sample {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	var out []sample
	for _, mf := range mfs {
		for _, m := range mf.GetMetric() {
			out = append(out, sample{name: mf.GetName(), labels: m.GetLabel(), metric: m})
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

// The result label of kinformer_requests_total takes a small fixed set of
// values, whatever a list or watch fails with: never the error's text,
// which holds object and resource names and URLs.
func TestMetricsRequestResultsAreBounded(t *testing.T) {
	const url = "https://127.0.0.1:6443/api/v1/namespaces/secret-ns/configmaps?labelSelector=app%3Dsecret-app"
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 99, current: 3", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	failures := []struct {
		err    error
		result string
	}{
		{apierrors.NewForbidden(cmResource, "secret-name", errors.New("user secret-user cannot list "+url)), "forbidden"},
		{apierrors.NewUnauthorized("token for secret-user expired at " + url), "unauthorized"},
		{apierrors.NewNotFound(cmResource, "secret-name"), "not_found"},
		{apierrors.NewBadRequest("bad selector app=secret-app"), "invalid"},
		{apierrors.NewInvalid(schema.GroupKind{Kind: "ConfigMap"}, "secret-name", nil), "invalid"},
		{apierrors.NewTooManyRequests("slow down, secret-user", 1), "throttled"},
		{apierrors.NewTimeoutError("timed out listing secret-ns", 1), "timeout"},
		{apierrors.NewServerTimeout(cmResource, "list secret-name", 1), "timeout"},
		{apierrors.NewInternalError(errors.New("etcd at " + url + " failed")), "server_error"},
		{apierrors.NewServiceUnavailable("secret-ns is unavailable"), "server_error"},
		{apierrors.NewResourceExpired("too old resource version for secret-name"), "expired"},
		{tooLarge, "too_large"},
		{&neturl.Error{Op: "Get", URL: url, Err: &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}}, "error"},
		{fmt.Errorf("Get %q: %w", url, context.DeadlineExceeded), "error"},
		{errors.New("the client failed on secret-name at " + url), "error"},
	}
	allowed := []string{"ok", "expired", "too_large", "forbidden", "unauthorized", "not_found", "invalid", "throttled", "timeout", "server_error", "error"}

	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := newFakeServer()
	s.put(cm("secret-ns", "secret-name", "app", "secret-app"))
	want := map[string]float64{} // verb/result -> requests
	for _, f := range failures {
		s.listErrs = append(s.listErrs, f.err)
		s.watchErrs = append(s.watchErrs, f.err)
		want["list/"+f.result]++
		want["watch/"+f.result]++
	}
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Name: "configmaps", Metrics: m, Backoff: fastBackoff, DisableStreamingList: true})
	inf.Start()
	defer inf.Stop()
	eventually(t, "every failure, then a watch that stays open", func() bool {
		s.mu.Lock()
		defer s.mu.Unlock()
		return len(s.listErrs) == 0 && len(s.watchErrs) == 0 && len(s.watchers) == 1
	})

	got := map[string]float64{}
	for _, sm := range samples(t, reg) {
		for _, l := range sm.labels {
			if v := l.GetValue(); strings.Contains(v, "secret") || strings.Contains(v, "127.0.0.1") || strings.Contains(v, "/") {
				t.Errorf("a name or URL in %s's label %s: %q", sm.name, l.GetName(), v)
			}
		}
		if sm.name != "kinformer_requests_total" {
			continue
		}
		if r := sm.label("result"); !slices.Contains(allowed, r) {
			t.Errorf("result %q is not one of %v", r, allowed)
		} else if r != "ok" {
			got[sm.label("verb")+"/"+r] = value(sm.metric)
		}
	}
	if !maps.Equal(got, want) {
		t.Errorf("failed requests by verb/result: %v, want %v", got, want)
	}
}
