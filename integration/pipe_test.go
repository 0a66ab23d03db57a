package integration

import (
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

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
