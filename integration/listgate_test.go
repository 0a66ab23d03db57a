package integration

import (
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// listsInFlight counts the list requests (lists and watch-lists) of a
// config from their start to their body's close, and the most at once.
type listsInFlight struct {
	now, most atomic.Int32
}

func (l *listsInFlight) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/configmaps") ||
				(q.Get("watch") == "true" && q.Get("sendInitialEvents") != "true") || q.Get("limit") == "1" {
				return rt.RoundTrip(r)
			}
			n := l.now.Add(1)
			for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
			}
			resp, err := rt.RoundTrip(r)
			if err != nil {
				l.now.Add(-1)
				return resp, err
			}
			resp.Body = &closeOnce{ReadCloser: resp.Body, done: func() { l.now.Add(-1) }}
			return resp, nil
		})
	})
	return cfg
}

type closeOnce struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (c *closeOnce) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.done)
	return err
}

// A Factory starting many informers at once makes their initial lists
// at most MaxInitialLists at a time (watch-lists held open to their end
// counted), and every informer syncs.
func TestFactoryBoundsInitialLists(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	const informers, bound = 12, 3
	var nss []string
	for range informers {
		ns := testenv.NewNamespace(t, srv.Config())
		for i := range 20 {
			mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, strings.Repeat("x", 2000)))
		}
		nss = append(nss, ns)
	}
	var lists listsInFlight
	f := kinformer.NewFactory(lists.wrap(srv.Config()), &kinformer.FactoryOptions{MaxInitialLists: bound})
	t.Cleanup(f.Stop)
	var infs []*kinformer.Informer[*corev1.ConfigMap]
	for _, ns := range nss {
		inf, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil)
		if err != nil {
			t.Fatal(err)
		}
		infs = append(infs, inf)
	}
	f.Start()
	if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	for i, inf := range infs {
		if n := inf.Cache().Len(); n != 20 {
			t.Fatalf("informer %d: %d objects, want 20", i, n)
		}
	}
	if m := lists.most.Load(); m > bound || m == 0 {
		t.Fatalf("%d initial lists at once, want at most %d (and some)", m, bound)
	}
	t.Logf("%d informers, at most %d initial lists at once", informers, lists.most.Load())
}
