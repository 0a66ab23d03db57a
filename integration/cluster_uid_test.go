package integration

import (
	"fmt"
	"net/http"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Every informer asks which cluster its server is (the kube-system uid)
// before it lists and after its watch goes out on a new connection, state
// file or not; a Factory's informers share the question: a few GETs for
// all of them, at the start and after every connection was cut, not one
// each.
func TestFactoryAsksWhichClusterOnce(t *testing.T) {
	srv := testenv.Shared(t)
	proxy, cfg := testenv.NewCutProxy(t, srv.Config())
	cfg = rest.CopyConfig(cfg)
	var gets atomic.Int64
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			if r.Method == http.MethodGet && r.URL.Path == "/api/v1/namespaces/kube-system" {
				gets.Add(1)
			}
			return rt.RoundTrip(r)
		})
	})
	const informers = 8
	admin := clientset(t, srv.Config())
	f := kinformer.NewFactory(cfg, nil)
	t.Cleanup(f.Stop)
	var nss []string
	var infs []*kinformer.Informer[*corev1.ConfigMap]
	for i := range informers {
		ns := uniqueName(fmt.Sprintf("which-cluster-%d", i))
		createNamespace(t, srv, ns)
		inf, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil)
		if err != nil {
			t.Fatal(err)
		}
		nss, infs = append(nss, ns), append(infs, inf)
	}
	f.Start()
	if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	started := gets.Load()
	t.Logf("%d informers started: %d GETs of kube-system", informers, started)
	if started < 1 || started > 3 {
		t.Fatalf("%d informers started with %d GETs of kube-system, want 1-3 (one question, shared)", informers, started)
	}

	// Every connection cut: the watches go out again on a new one, and
	// each informer asks about it.
	proxy.Down()
	proxy.Up()
	for i, ns := range nss {
		mustCreate(t, admin, configMap(ns, "after-cut", nil, "x"))
		eventually(t, callTimeout, "the informer to watch again", func() bool {
			_, ok := infs[i].Cache().GetByKey(ns + "/after-cut")
			return ok
		})
	}
	again := gets.Load() - started
	t.Logf("after the cut: %d more GETs", again)
	if again < 1 || again > 3 {
		t.Fatalf("after every connection was cut, %d more GETs of kube-system, want 1-3", again)
	}
}
