package kinformer

import (
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// The sharing rules, without an API server: share is given the fake
// server's informer as the one to make.
type cmShare struct {
	f    *Factory
	srv  *fakeServer
	made int // informers made
}

func newCMShare() *cmShare {
	return &cmShare{f: NewFactory(nil, nil), srv: newFakeServer()}
}

var cmKey = factoryKey{typ: reflect.TypeFor[*corev1.ConfigMap](), gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), namespace: "ns"}

func (s *cmShare) get(k factoryKey, o Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
	if o.Backoff == (Backoff{}) {
		o.Backoff = fastBackoff
	}
	o.Name = "configmaps"
	return share(s.f, k, o, func(o *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
		s.made++
		return New[*corev1.ConfigMap](s.srv, o), nil
	})
}

func byName(c *corev1.ConfigMap) []string  { return []string{c.Name} }
func byLabel(c *corev1.ConfigMap) []string { return []string{c.Labels["k"]} }
func upper(c *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	c.Name = strings.ToUpper(c.Name)
	return c, nil
}

func TestShareMergesOrRefuses(t *testing.T) {
	s := newCMShare()
	// Two memberships of one group: two distinct Shardings.
	shardA, shardB := NewSharding(&rest.Config{}, ShardingOptions{Group: "g", Namespace: "ns", Identity: "a"}),
		NewSharding(&rest.Config{}, ShardingOptions{Group: "g", Namespace: "ns", Identity: "b"})
	first, err := s.get(cmKey, Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName}})
	if err != nil {
		t.Fatal(err)
	}
	// PageSize left zero and given as the default are the same.
	same, err := s.get(cmKey, Options[*corev1.ConfigMap]{PageSize: defaultPageSize,
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName, "label": byLabel}})
	if err != nil || same != first {
		t.Fatalf("second consumer: %p, %v; want the first informer %p", same, err, first)
	}
	if _, err := first.Cache().ByIndex("label", "x"); err != nil {
		t.Fatalf("the second consumer's index was not added: %v", err)
	}

	for _, tc := range []struct {
		name string
		o    Options[*corev1.ConfigMap]
		want string
	}{
		{"transform", Options[*corev1.ConfigMap]{Transform: upper}, "Transform"},
		{"key", Options[*corev1.ConfigMap]{KeyFunc: func(c *corev1.ConfigMap) string { return c.Name }}, "KeyFunc"},
		{"page and managed fields", Options[*corev1.ConfigMap]{PageSize: 10, KeepManagedFields: true}, "KeepManagedFields, PageSize"},
		{"backoff", Options[*corev1.ConfigMap]{Backoff: DefaultBackoff()}, "Backoff"},
		{"streaming", Options[*corev1.ConfigMap]{DisableStreamingList: true}, "DisableStreamingList"},
		{"direct", Options[*corev1.ConfigMap]{DisableDirectDecoding: true}, "DisableDirectDecoding"},
		{"timeouts", Options[*corev1.ConfigMap]{WatchTimeout: time.Minute, IdleMargin: time.Second}, "WatchTimeout, IdleMargin"},
		{"index clash", Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byLabel}}, `index "name"`},
		{"state dir", Options[*corev1.ConfigMap]{StateDir: t.TempDir()}, "StateDir"},
		{"state no sync", Options[*corev1.ConfigMap]{StateNoSync: true}, "StateNoSync"},
		{"sharding", Options[*corev1.ConfigMap]{Sharding: shardA}, "Sharding"},
	} {
		inf, err := s.get(cmKey, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "configmaps in namespace ns") {
			t.Errorf("%s: %p, %v; want an error naming %s and the informer", tc.name, inf, err, tc.want)
		}
	}
	if s.made != 1 {
		t.Fatalf("%d informers made, want 1", s.made)
	}
	// Sharded by one Sharding, an informer is not shared with a consumer
	// that gives another.
	sharded := cmKey
	sharded.label = "sharded=yes"
	a, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardA})
	if err != nil {
		t.Fatal(err)
	}
	if same, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardA}); err != nil || same != a {
		t.Fatalf("the same Sharding again: %p, %v; want the first informer %p", same, err, a)
	}
	if inf, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardB}); err == nil || !strings.Contains(err.Error(), "Sharding") {
		t.Fatalf("another Sharding: %p, %v; want an error naming Sharding", inf, err)
	}

	// Another selector or namespace is another informer.
	other := cmKey
	other.label = "app=web"
	if inf, err := s.get(other, Options[*corev1.ConfigMap]{Transform: upper}); err != nil || inf == first {
		t.Fatalf("other selector: %p, %v; want a new informer", inf, err)
	}
	s.f.Stop()
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{}); !errors.Is(err, ErrFactoryStopped) {
		t.Fatalf("after Stop: %v, want ErrFactoryStopped", err)
	}
}

func TestShareResyncTakesTheShortestBeforeStart(t *testing.T) {
	s := newCMShare()
	inf, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []time.Duration{0, 2 * time.Hour, 10 * time.Minute, 20 * time.Minute} {
		if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: p}); err != nil {
			t.Fatalf("resync %s: %v", p, err)
		}
	}
	if got := inf.loop.opts.ResyncPeriod; got != 10*time.Minute {
		t.Fatalf("resync period %s, want the shortest asked for, 10m", got)
	}

	s.f.Start()
	defer s.f.Stop()
	if err := s.f.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	// Once running: longer or none is served by the running period,
	// shorter is an error, and so is a new index.
	for _, p := range []time.Duration{0, 10 * time.Minute, time.Hour} {
		if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: p}); err != nil {
			t.Fatalf("resync %s after start: %v", p, err)
		}
	}
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: time.Minute}); !errors.Is(err, ErrRunning) {
		t.Fatalf("shorter resync after start: %v, want ErrRunning", err)
	}
	_, err = s.get(cmKey, Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName}})
	if !errors.Is(err, ErrRunning) || !strings.Contains(err.Error(), "configmaps") {
		t.Fatalf("index after start: %v, want ErrRunning naming the resource", err)
	}
}

// Shared after Start starts the informer at once; StopShared stops it
// alone and forgets it.
func TestShareAfterStartAndStopShared(t *testing.T) {
	s := newCMShare()
	s.srv.put(cm("ns", "a"))
	s.f.Start()
	defer s.f.Stop()
	a, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	otherKey := cmKey
	otherKey.label = "k=v"
	b, err := s.get(otherKey, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.f.WaitForSync(bounded(t)); err != nil || !a.HasSynced() || !b.HasSynced() {
		t.Fatalf("WaitForSync = %v; synced %v %v", err, a.HasSynced(), b.HasSynced())
	}
	if !StopShared(s.f, a) || StopShared(s.f, a) {
		t.Fatal("StopShared: want true once, then false")
	}
	if a.isRunning() || !b.isRunning() {
		t.Fatalf("after StopShared(a): a running %v, b running %v", a.isRunning(), b.isRunning())
	}
	again, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil || again == a {
		t.Fatalf("after StopShared: %p, %v; want a new informer", again, err)
	}
	if err := s.f.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	s.f.Stop()
	if b.isRunning() || again.isRunning() {
		t.Fatal("running after Stop")
	}
}

func (inf *Informer[T]) isRunning() bool {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.done != nil
}

// WaitForSync returns the first persistent error, naming the resource,
// and the error keeps its kind.
func TestFactoryWaitForSyncNamesTheResource(t *testing.T) {
	s := newCMShare()
	s.srv.listErrs = []error{apierrors.NewForbidden(cmResource, "", errors.New("no"))}
	s.srv.streaming = false
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{DisableStreamingList: true}); err != nil {
		t.Fatal(err)
	}
	s.f.Start()
	defer s.f.Stop()
	err := s.f.WaitForSync(bounded(t))
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "configmaps in namespace ns: ") {
		t.Fatalf("WaitForSync = %v, want a 403 prefixed with the resource", err)
	}
	// The informer retries (fast backoff) and syncs.
	eventually(t, "sync after the 403", func() bool { return s.f.WaitForSync(bounded(t)) == nil })
}

func TestKeyOf(t *testing.T) {
	f := NewFactory(nil, nil)
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	namespaced := &meta.RESTMapping{Resource: gvr, Scope: meta.RESTScopeNamespace}
	k, o := keyOf(f, reflect.TypeFor[*corev1.ConfigMap](), namespaced, "ns",
		&Options[*corev1.ConfigMap]{LabelSelector: "b=2, a=1", FieldSelector: "metadata.name=x", Name: "mine"})
	k2, _ := keyOf(f, reflect.TypeFor[*corev1.ConfigMap](), namespaced, "ns", &Options[*corev1.ConfigMap]{LabelSelector: "a=1,b=2", FieldSelector: "metadata.name=x"})
	if k != k2 || o.Name != "deployments.apps" || o.LabelSelector != "b=2, a=1" {
		t.Fatalf("keys %+v and %+v, name %q, selector %q", k, k2, o.Name, o.LabelSelector)
	}
	cluster := &meta.RESTMapping{Resource: corev1.SchemeGroupVersion.WithResource("nodes"), Scope: meta.RESTScopeRoot}
	k, no := keyOf[*corev1.Node](f, reflect.TypeFor[*corev1.Node](), cluster, "ns", nil)
	if k.namespace != "" || no.Name != "nodes" {
		t.Fatalf("cluster-scoped: namespace %q, name %q", k.namespace, no.Name)
	}
}

// discoveryOnly serves the discovery of the core group with configmaps,
// and nothing else: enough for Shared and Dynamic to make (not start)
// informers.
func discoveryOnly(t *testing.T) *rest.Config {
	t.Helper()
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		switch r.URL.Path {
		case "/api":
			json.NewEncoder(w).Encode(metav1.APIVersions{Versions: []string{"v1"}})
		case "/apis":
			json.NewEncoder(w).Encode(metav1.APIGroupList{})
		case "/api/v1":
			json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: watchableConfigMaps()})
		default:
			http.NotFound(w, r)
		}
	}))
	t.Cleanup(hs.Close)
	return &rest.Config{Host: hs.URL}
}

// Through the public API, Shared and Dynamic share an informer between
// requests with the same label selector and the same field selector,
// however they are spelled, and never otherwise: not between different
// label selectors with the same field selector, nor the other way round,
// nor between a label selector and the same text as a field selector.
func TestSharedKeyIsBothSelectors(t *testing.T) {
	requests := []struct {
		label, field string
		class        string // the same class, the same informer
	}{
		{"app=web", "metadata.name=x", "web,x"},
		{"app=db", "metadata.name=x", "db,x"},
		{"app=web", "metadata.name=y", "web,y"},
		{"tier=front,app=web", "metadata.name=x", "web+front,x"},
		{"app=web,tier=front", "metadata.name=x", "web+front,x"},
		{"app=web", "metadata.namespace=ns,metadata.name=x", "web,x+ns"},
		{"app=web", "metadata.name=x,metadata.namespace=ns", "web,x+ns"},
		{"a=1", "", "label a=1"},
		{"", "a=1", "field a=1"},
		{"", "", "all"},
	}
	f := NewFactory(discoveryOnly(t), nil)
	defer f.Stop()
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	for _, api := range []string{"Shared", "Dynamic"} {
		got := make([]any, len(requests))
		for i, r := range requests {
			var err error
			if api == "Shared" {
				got[i], err = Shared(f, "ns", &Options[*corev1.ConfigMap]{LabelSelector: r.label, FieldSelector: r.field})
			} else {
				got[i], err = f.Dynamic(gvr, "ns", &Options[*unstructured.Unstructured]{LabelSelector: r.label, FieldSelector: r.field})
			}
			if err != nil {
				t.Fatalf("%s(labels %q, fields %q): %v", api, r.label, r.field, err)
			}
		}
		for i, a := range requests {
			for j, b := range requests[:i] {
				if same := got[i] == got[j]; same != (a.class == b.class) {
					t.Errorf("%s: labels %q fields %q and labels %q fields %q: same informer %v, want %v",
						api, a.label, a.field, b.label, b.field, same, !same)
				}
			}
		}
	}
}
