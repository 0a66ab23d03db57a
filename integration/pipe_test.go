package integration

import (
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// The first list is delivered while it streams, against the real server:
// a paged list whose later pages are held back until the handler has
// been given an object (so that, were the handler's events queued only
// at the list's end, they would come after the 10 s hold): the handler
// works on the first page while the rest is still to come, and is given
// every object once, cause List, before its registration is synced.
func TestFirstListDeliveredWhileItStreams(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	const n = 60
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%02d", i), nil, "x"))
	}
	firstSeen := make(chan struct{})
	var once sync.Once
	cfg := rest.CopyConfig(srv.Config())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.URL.Query().Get("continue") != "" && strings.HasSuffix(r.URL.Path, "/configmaps") {
				select { // a later page: after the handler's first object, or 10 s
				case <-firstSeen:
				case <-time.After(10 * time.Second):
				}
			}
			return rt.RoundTrip(r)
		})
	})
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, cfg).CoreV1().ConfigMaps(ns),
		&kinformer.Options[*corev1.ConfigMap]{DisableStreamingList: true, PageSize: 10})
	rec := &recorder[*corev1.ConfigMap]{}
	var mu sync.Mutex
	var beforeSync, beforeFirstPageEnd int
	inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		mu.Lock()
		if !inf.HasSynced() {
			beforeSync++
		}
		if inf.Cache().Len() <= 10 {
			beforeFirstPageEnd++
		}
		mu.Unlock()
		rec.handle(e)
		once.Do(func() { close(firstSeen) })
	})
	began := time.Now()
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	took := time.Since(began)
	eventually(t, 10*time.Second, "every object handled", func() bool { return len(rec.all()) >= n })
	mu.Lock()
	defer mu.Unlock()
	if beforeSync == 0 || beforeFirstPageEnd == 0 || took > 8*time.Second {
		t.Fatalf("%d events handled before the sync, %d while the cache held the first page alone, synced after %v: the list was not delivered as it came",
			beforeSync, beforeFirstPageEnd, took)
	}
	seen := map[string]bool{}
	for _, e := range rec.all() {
		if e.Type != kinformer.Added || e.Cause != kinformer.CauseList || seen[e.Key] {
			t.Fatalf("%s %s cause %s (twice: %v); want each object Added once, cause list", e.Type, e.Key, e.Cause, seen[e.Key])
		}
		seen[e.Key] = true
	}
	if len(seen) != n {
		t.Fatalf("%d objects Added, want %d", len(seen), n)
	}
}

func blockedHandlerOfTheTest(release chan struct{}) func(kinformer.Event[*corev1.ConfigMap]) {
	return func(kinformer.Event[*corev1.ConfigMap]) { <-release }
}

// Bad handlers during the streamed first list, against the real server:
// one panics on every fifth object, one blocks on its first. The panics
// are reported (Error log, naming the key) and that handler still gets
// every object; the blocked one is named, not done, in Startup, the
// slow-start log line and the startup metric; neither holds up the
// list, the sync, a good handler or the watch after it.
func TestBadHandlersDuringTheStreamedList(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	const n = 100
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "x"))
	}
	logs := newLogCapture()
	reg := prometheus.NewRegistry()
	m, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{
		Name: "configmaps", Metrics: m, Logger: slog.New(logs), StartupLogAfter: 2 * time.Second, PageSize: 10, DisableStreamingList: true})
	var mu sync.Mutex
	panicked, good := map[string]int{}, map[string]int{}
	inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		mu.Lock()
		panicked[e.Key]++
		mu.Unlock()
		var i int
		if _, err := fmt.Sscanf(e.Object.Name, "cm-%d", &i); err == nil && i%5 == 0 {
			panic("the handler of the test fails on " + e.Key)
		}
	})
	release := make(chan struct{})
	blocked := inf.AddHandler(blockedHandlerOfTheTest(release))
	inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		mu.Lock()
		good[e.Key]++
		mu.Unlock()
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	t.Cleanup(func() { close(release) }) // before Stop, which waits for the handlers
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	mustCreate(t, c, configMap(ns, "after", nil, "x"))
	eventually(t, 20*time.Second, "every object, and the one created after, at both working handlers", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(good) == n+1 && len(panicked) == n+1
	})
	mu.Lock()
	for key, k := range good {
		if k != 1 || panicked[key] != 1 {
			t.Errorf("%s: %d times at the good handler, %d at the panicking one; want once each", key, k, panicked[key])
		}
	}
	mu.Unlock()
	if got := logs.count("event handler panicked"); got != n/5 {
		t.Errorf("%d panics logged, want %d", got, n/5)
	}
	eventually(t, 20*time.Second, "the slow-start line", func() bool { return logs.has("still on its initial pass") })
	if !logs.has("blockedHandlerOfTheTest") {
		t.Errorf("the slow-start line does not name the blocked handler: %v", *logs.lines)
	}
	if h := blocked.Startup(); h.Done || h.Handled != 0 || h.Pending < n || !strings.Contains(h.Name, "blockedHandlerOfTheTest") {
		t.Errorf("the blocked handler's Startup: %+v; want not done, 0 handled, %d or more pending, named", h, n)
	}
	if st := inf.Startup(); !st.Synced || st.HandlersDone || st.Objects != n+1 {
		t.Errorf("Startup: %+v; want synced, handlers not done", st)
	}
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	done := -1.0
	for _, mf := range mfs {
		if mf.GetName() == "kinformer_startup_done" {
			done = mf.GetMetric()[0].GetGauge().GetValue()
		}
	}
	if done != 0 {
		t.Errorf("kinformer_startup_done = %v, want 0 while a handler is on its initial pass", done)
	}
}
