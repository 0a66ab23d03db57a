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
	"weak"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
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
	return share(s.f, k, o, nil, func(o *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
		s.made++
		return New[*corev1.ConfigMap](s.srv, o), nil
	})
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

// Each Shared call acquires its informer; Release gives one reference
// back, and only the last one stops it and makes the factory forget it.
func TestReleaseStopsOnTheLast(t *testing.T) {
	s := newCMShare()
	s.srv.put(cm("ns", "a"))
	s.f.Start()
	defer s.f.Stop()
	a, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	if again, err := s.get(cmKey, Options[*corev1.ConfigMap]{}); err != nil || again != a {
		t.Fatalf("second consumer: %p, %v; want the same informer", again, err)
	}
	if err := s.f.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if !Release(s.f, a) {
		t.Fatal("Release: not the factory's")
	}
	if !a.isRunning() {
		t.Fatal("stopped by the first of two releases")
	}
	if again, err := s.get(cmKey, Options[*corev1.ConfigMap]{}); err != nil || again != a {
		t.Fatalf("after one release of two: %p, %v; want the same informer", again, err)
	}
	if !Release(s.f, a) || !Release(s.f, a) {
		t.Fatal("Release: not the factory's")
	}
	if a.isRunning() {
		t.Fatal("running after its last release")
	}
	if Release(s.f, a) {
		t.Fatal("a released informer is still the factory's")
	}
	again, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil || again == a {
		t.Fatalf("after the last release: %p, %v; want a new informer", again, err)
	}
	if err := s.f.WaitForSync(bounded(t)); err != nil || !again.isRunning() {
		t.Fatalf("the new informer: WaitForSync = %v, running %v", err, again.isRunning())
	}
}

// A handler of a shared informer may stop it (StopShared) and the whole
// factory: neither waits for the handler itself. A Stop from elsewhere
// afterwards waits until the informer has ended.
func TestFactoryStopFromAHandler(t *testing.T) {
	s := newCMShare()
	s.f.Start() // no deferred Stop: after a deadlock it would hang the test
	a, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	returned := make(chan struct{})
	a.AddEventHandler(Added, func(e cmEvent) {
		if e.Object.Name == "stop" {
			StopShared(s.f, a)
			s.f.Stop()
			close(returned)
		}
	})
	s.srv.put(cm("ns", "stop"))
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("StopShared or Stop from a handler of the factory's informer deadlocked")
	}
	s.f.Stop()
	if a.isRunning() {
		t.Fatal("the informer runs after the factory's Stop returned")
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
	// Forbidden until the test has seen it: with a passing 403 the
	// informer's retry could sync before WaitForSync looks.
	s.srv.listErr = apierrors.NewForbidden(cmResource, "", errors.New("no"))
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
	s.srv.mu.Lock()
	s.srv.listErr = nil
	s.srv.mu.Unlock()
	// The informer retries (fast backoff) and syncs.
	eventually(t, "sync after the 403", func() bool { return s.f.WaitForSync(bounded(t)) == nil })
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

// A released (or StopShared) informer is not kept by the factory once it
// has ended: its cache can be collected while the factory runs on.
func TestFactoryForgetsReleasedInformers(t *testing.T) {
	s := newCMShare()
	s.srv.put(cm("ns", "a"))
	s.f.Start()
	defer s.f.Stop()
	var gone []weak.Pointer[Informer[*corev1.ConfigMap]]
	for i := range 4 {
		inf, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
		if err != nil {
			t.Fatal(err)
		}
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if i%2 == 0 {
			Release(s.f, inf)
		} else {
			StopShared(s.f, inf)
		}
		gone = append(gone, weak.Make(inf))
	}
	eventuallyCollected(t, "the released informers to be collected", gone)
	if s.made != 4 {
		t.Fatalf("made %d informers, want 4", s.made)
	}
}
