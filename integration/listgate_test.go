package integration

import (
	"fmt"
	"io"
	"net/http"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
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

// A Factory lists what it caches: each informer's resource, type,
// namespace or cluster-wide, selectors, projection, holding, objects and
// bytes, consumers and handlers, as the real server filled them.
func TestFactoryListsItsCaches(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 30 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), map[string]string{"app": fmt.Sprint(i % 2)}, strings.Repeat("x", 500)))
	}
	f := kinformer.NewFactory(srv.Config(), nil)
	t.Cleanup(f.Stop)
	compact, err := kinformer.Shared[*corev1.ConfigMap](f, ns, &kinformer.Options[*corev1.ConfigMap]{Compact: true, LabelSelector: "app=1"})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := kinformer.Shared[*corev1.ConfigMap](f, ns, &kinformer.Options[*corev1.ConfigMap]{Compact: true, LabelSelector: "app=1"}); err != nil {
		t.Fatal(err) // a second consumer of the same informer
	}
	compact.AddHandler(func(kinformer.Event[*corev1.ConfigMap]) {})
	metas, err := f.Metadata(corev1.SchemeGroupVersion.WithResource("configmaps"), "", &kinformer.Options[*metav1.PartialObjectMetadata]{Fields: []string{"metadata.labels"}})
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	caches := f.Caches()
	if len(caches) != 2 {
		t.Fatalf("Caches: %d, want 2: %+v", len(caches), caches)
	}
	cm, md := caches[0], caches[1]
	if md.Namespace != "" {
		cm, md = md, cm
	}
	if cm.Resource != "configmaps" || cm.Type != "*v1.ConfigMap" || cm.Namespace != ns || cm.ClusterWide || cm.LabelSelector != "app=1" ||
		!cm.Compact || cm.Objects != 15 || cm.Bytes <= 0 || cm.Bytes > 15*2000 || cm.Fields != nil || !cm.Synced || cm.Consumers != 2 || cm.Handlers != 1 ||
		!cm.Startup.Synced || cm.Startup.ListTook <= 0 {
		t.Errorf("the compact informer: %+v", cm)
	}
	if md.Resource != "configmaps" || md.Type != "*v1.PartialObjectMetadata" || !md.ClusterWide || md.Compact || md.Bytes != 0 ||
		md.Objects != metas.Cache().Len() || md.Objects < 30 || !slices.Contains(md.Fields, "metadata.labels") || md.Consumers != 1 || md.Handlers != 0 {
		t.Errorf("the metadata informer: %+v", md)
	}
	kinformer.Release(f, compact) // the second consumer still holds it
	if got := f.Caches(); len(got) != 2 || got[0].Consumers+got[1].Consumers != 2 {
		t.Errorf("after one Release: %+v", got)
	}
	kinformer.Release(f, compact)
	if got := f.Caches(); len(got) != 1 || got[0].Type != "*v1.PartialObjectMetadata" {
		t.Errorf("after the last Release: %+v", got)
	}
}
