package kinformer

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/direct"
	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/protowatch"
	"github.com/kinformer/kinformer/internal/wiretest"
)

// These tests feed the direct decoder what a real server never sends:
// corrupt frames, foreign kinds, broken objects. That it decodes what a real
// server does send, equal to client-go's decoding, is shown against
// kube-apiserver in integration/direct_test.go.

var (
	managedCM    = wiretest.ManagedCM
	wireEvent    = wiretest.Event
	frame        = wiretest.Frame
	unknownFrame = wiretest.UnknownFrame
)

// protoServer serves discovery and scripted protobuf watches.
type protoServer struct {
	t         *testing.T
	resources []metav1.APIResource
	mu        sync.Mutex
	scripts   [][]byte // one per watch, in order; the last repeats
	requests  []*http.Request
}

func (s *protoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch r.URL.Path {
	case "/api/v1":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: s.resources})
	case "/api/v1/namespaces/ns/configmaps":
		s.mu.Lock()
		s.requests = append(s.requests, r)
		script := s.scripts[0]
		if len(s.scripts) > 1 {
			s.scripts = s.scripts[1:]
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", protowatch.MediaType)
		w.WriteHeader(http.StatusOK)
		w.Write(script)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	default:
		http.NotFound(w, r)
	}
}

func (s *protoServer) seen() []*http.Request {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]*http.Request(nil), s.requests...)
}

func watchableConfigMaps() []metav1.APIResource {
	return []metav1.APIResource{
		{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}},
		{Name: "configmaps/status", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"get"}},
	}
}

func endMarker(rv string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
		Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
}

func clientFor(t *testing.T, h http.Handler) kubernetes.Interface {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: srv.URL})
	if err != nil {
		t.Fatal(err)
	}
	return cs
}

func TestDirectDecodingReportsGarbageAndGoesOn(t *testing.T) {
	a := managedCM("a")
	a2 := managedCM("a")
	a2.ResourceVersion, a2.Data["k2"] = "11", "changed"
	a3 := a2.DeepCopy()
	a3.ResourceVersion = "12"

	var first bytes.Buffer
	first.Write(wireEvent(t, "ADDED", a))
	first.Write(unknownFrame(t, "ADDED", "ConfigMap", []byte{0x0a, 0xff, 0xff})) // truncated metadata
	first.Write(unknownFrame(t, "ADDED", "Secret", []byte{}))                    // a foreign kind
	first.Write(frame(t, "ADDED", []byte("{\"kind\":\"ConfigMap\"}")))           // JSON in a protobuf stream
	first.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	var second bytes.Buffer
	second.Write(wireEvent(t, "MODIFIED", a2))
	second.Write(binary.BigEndian.AppendUint32(nil, 64<<20+1)) // a frame no server sends
	srv := &protoServer{t: t, resources: watchableConfigMaps(),
		scripts: [][]byte{first.Bytes(), second.Bytes(), wireEvent(t, "MODIFIED", a3)}}

	cs := clientFor(t, srv)
	inf, rec := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	eventually(t, "the event after the broken frame", func() bool {
		o, ok := inf.Cache().GetByKey("ns/a")
		return ok && o.ResourceVersion == "12"
	})
	got, _ := inf.Cache().GetByKey("ns/a")
	if got.ManagedFields != nil || got.Data["k2"] != "changed" || !bytes.Equal(got.BinaryData["b"], []byte{0, 1, 2}) {
		t.Fatalf("cached object: %+v", got)
	}
	if n := inf.Cache().Len(); n != 1 {
		t.Fatalf("cache holds %d objects, want 1", n)
	}

	var errs []string
	for _, e := range rec.all() {
		if e.Type == Error {
			errs = append(errs, e.Err.Error())
			if !strings.Contains(e.Err.Error(), "unreadable watch stream") && !errors.Is(e.Err, ErrUnexpectedObject) {
				t.Errorf("garbage reported without ErrUnexpectedObject: %v", e.Err)
			}
		}
	}
	for _, want := range []string{"ADDED event: ConfigMap:", `kind "Secret", want "ConfigMap"`, "not a protobuf-encoded", "unreadable watch stream"} {
		found := false
		for _, e := range errs {
			found = found || strings.Contains(e, want)
		}
		if !found {
			t.Errorf("no error event says %q; got %q", want, errs)
		}
	}

	reqs := srv.seen()
	if len(reqs) < 3 {
		t.Fatalf("%d watch requests, want a streaming list, a watch, and another after the broken stream", len(reqs))
	}
	q := reqs[0].URL.Query()
	if q.Get("sendInitialEvents") != "true" || q.Get("watch") != "true" || reqs[0].Header.Get("Accept") != protowatch.MediaType {
		t.Errorf("first watch: %s, Accept %q", reqs[0].URL.RawQuery, reqs[0].Header.Get("Accept"))
	}
	for i, want := range []string{"10", "11"} {
		if rv := reqs[i+1].URL.Query().Get("resourceVersion"); rv != want || reqs[i+1].URL.Query().Has("sendInitialEvents") {
			t.Errorf("watch %d: %s, want a plain watch from %s", i+2, reqs[i+1].URL.RawQuery, want)
		}
	}
}

func TestDirectDecodingFallsBackWithoutDiscovery(t *testing.T) {
	a := managedCM("a")
	var script bytes.Buffer
	script.Write(wireEvent(t, "ADDED", a))
	script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	// Discovery lists no watchable configmaps: kinformer cannot name the
	// resource itself and uses the client's Watch.
	srv := &protoServer{t: t, resources: watchableConfigMaps()[1:], scripts: [][]byte{script.Bytes()}}
	cs := clientFor(t, srv)
	inf, _ := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	if _, ok := inf.Cache().GetByKey("ns/a"); !ok {
		t.Fatal("not synced through the client's Watch")
	}
	if accept := srv.seen()[0].Header.Get("Accept"); accept == protowatch.MediaType {
		t.Fatalf("the watch was opened by kinformer (Accept %q), not by the client", accept)
	}
}

func TestDirectDecodingOnlyForTypedClients(t *testing.T) {
	if d := direct.New[*corev1.ConfigMap](describe.Of(&fakeServer{}), reflect.TypeFor[*corev1.ConfigMap](), direct.Decoding{Share: &intern.Sharer{}}, IsPersistent); d != nil {
		t.Fatal("direct decoding for a client without a REST client")
	}
	cs := clientFor(t, http.NotFoundHandler())
	if d := direct.New[*corev1.ConfigMap](describe.Of(cs.CoreV1().ConfigMaps("ns")), reflect.TypeFor[*corev1.ConfigMap](), direct.Decoding{KeepManagedFields: true}, IsPersistent); d == nil || d.Proto.StripManagedFields || d.SharesObjects() {
		t.Fatalf("typed client: %+v", d)
	}
	if d := direct.New[*corev1.ConfigMap](describe.Of(cs.CoreV1().ConfigMaps("ns")), reflect.TypeFor[*corev1.ConfigMap](), direct.Decoding{Share: &intern.Sharer{}}, IsPersistent); d == nil || !d.Proto.StripManagedFields || !d.SharesObjects() || d.Proto.Kind != "ConfigMap" {
		t.Fatalf("typed client: %+v", d)
	}
}

// A direct stream is read on the loop's goroutine; its deadlines (idle,
// resync) close the body under the blocked read, and Stop ends it.
func TestDirectStreamDeadlines(t *testing.T) {
	list := func() []byte {
		var b bytes.Buffer
		b.Write(wireEvent(t, "ADDED", managedCM("a")))
		b.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
		return b.Bytes()
	}
	countStreams := func(reqs []*http.Request) (streams, watches int) {
		for _, r := range reqs {
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				streams++
			} else {
				watches++
			}
		}
		return streams, watches
	}

	t.Run("idle", func(t *testing.T) {
		// After the list, watches that never send anything.
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list(), {}}}
		inf, rec := startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"),
			&Options[*corev1.ConfigMap]{WatchTimeout: time.Second, IdleMargin: 50 * time.Millisecond})
		eventually(t, "an idle watch dropped and reopened", func() bool {
			_, w := countStreams(srv.seen())
			return w >= 2
		})
		idle := false
		for _, e := range rec.all() {
			idle = idle || (e.Type == Error && errors.Is(e.Err, ErrIdle))
		}
		if !idle {
			t.Fatal("no ErrIdle event")
		}
		if _, w := countStreams(srv.seen()); w > 3 {
			t.Fatalf("%d watches: reopened faster than the idle deadline", w)
		}
		if inf.ResourceVersion() != "10" {
			t.Fatalf("resourceVersion %s", inf.ResourceVersion())
		}
	})

	t.Run("resync", func(t *testing.T) {
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list()}}
		startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"), &Options[*corev1.ConfigMap]{ResyncPeriod: 200 * time.Millisecond})
		// Every script is the list; the plain watch gets it too and takes
		// the ADDED as a change. What counts here is that a blocked read is
		// cut by the resync and a new streaming list starts.
		eventually(t, "two resyncs", func() bool { s, _ := countStreams(srv.seen()); return s >= 3 })
	})

	t.Run("stop", func(t *testing.T) {
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{list(), {}}}
		inf, _ := startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"), nil)
		eventually(t, "the plain watch", func() bool { _, w := countStreams(srv.seen()); return w == 1 })
		done := make(chan struct{})
		go func() { inf.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(5 * time.Second):
			t.Fatal("Stop blocked on a direct stream's read")
		}
	})
}

// DisableDirectDecoding makes watches go through the client's own Watch
// even where kinformer could decode them itself; without it, it does.
func TestDisableDirectDecodingUsesTheClient(t *testing.T) {
	for _, disable := range []bool{true, false} {
		var script bytes.Buffer
		script.Write(wireEvent(t, "ADDED", managedCM("a")))
		script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{script.Bytes()}}
		inf, _ := startInformer(t, clientFor(t, srv).CoreV1().ConfigMaps("ns"), &Options[*corev1.ConfigMap]{DisableDirectDecoding: disable})
		if _, ok := inf.Cache().GetByKey("ns/a"); !ok {
			t.Fatal("not synced")
		}
		if direct := srv.seen()[0].Header.Get("Accept") == protowatch.MediaType; direct == disable {
			t.Errorf("DisableDirectDecoding %v: the watch was opened by kinformer: %v", disable, direct)
		}
		inf.Stop()
	}
}

// A 503 from discovery (a server starting) does not turn direct decoding
// off for good: the next watch tries again.
func TestTransientDiscoveryFailureIsRetried(t *testing.T) {
	var script bytes.Buffer
	script.Write(wireEvent(t, "ADDED", managedCM("a")))
	script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{script.Bytes()}}
	var n atomic.Int32
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/api/v1" && n.Add(1) == 1 {
			http.Error(w, "apiserver is starting", http.StatusServiceUnavailable)
			return
		}
		srv.ServeHTTP(w, r)
	})
	cs := clientFor(t, h)
	inf, _ := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	if _, ok := inf.Cache().GetByKey("ns/a"); !ok {
		t.Fatal("not synced")
	}
	for _, r := range srv.seen() {
		if r.Header.Get("Accept") == protowatch.MediaType {
			return
		}
	}
	t.Fatalf("after one 503 from discovery, no watch is ever decoded directly (%d discovery calls)", n.Load())
}

type countingLimiter struct{ waits atomic.Int32 }

func (c *countingLimiter) TryAccept() bool                { c.waits.Add(1); return true }
func (c *countingLimiter) Accept()                        { c.waits.Add(1) }
func (c *countingLimiter) Stop()                          {}
func (c *countingLimiter) QPS() float32                   { return 5 }
func (c *countingLimiter) Wait(ctx context.Context) error { c.waits.Add(1); return nil }

// client-go never rate-limits watches; neither does the direct path.
func TestDirectWatchIsNotRateLimited(t *testing.T) {
	srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{wireEvent(t, "ADDED", managedCM("a"))}}
	hs := httptest.NewServer(srv)
	defer hs.Close()
	lim := &countingLimiter{}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL, RateLimiter: lim})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	w.Stop()
	viaClient := lim.waits.Load()
	d := direct.New[*corev1.ConfigMap](describe.Of(cs.CoreV1().ConfigMaps("ns")), reflect.TypeFor[*corev1.ConfigMap](), direct.Decoding{Share: &intern.Sharer{}}, IsPersistent)
	if _, err := d.Open(ctx, metav1.ListOptions{}); err != nil { // discovery, then a first watch
		t.Fatal(err)
	}
	before := lim.waits.Load()
	dw, err := d.Open(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	dw.Close()
	t.Logf("client Watch: %d limiter calls; direct watch: %d", viaClient, lim.waits.Load()-before)
	if lim.waits.Load() != before {
		t.Fatalf("direct watch open went through the client rate limiter (client-go's Watch does not: %d calls)", viaClient)
	}
}

// A 200 answer that is not a protobuf stream (a proxy that ignores Accept)
// costs one error event; then watches go through the client, which decodes
// what it gets.
func TestNonProtobufAnswerFallsBackToClient(t *testing.T) {
	h := http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/api/v1":
			w.Header().Set("Content-Type", "application/json")
			json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: watchableConfigMaps()})
		case "/api/v1/namespaces/ns/configmaps":
			w.Header().Set("Content-Type", "application/json")
			if r.URL.Query().Get("watch") != "true" {
				json.NewEncoder(w).Encode(corev1.ConfigMapList{ListMeta: metav1.ListMeta{ResourceVersion: "10"}, Items: []corev1.ConfigMap{*managedCM("a")}})
				return
			}
			if r.URL.Query().Get("sendInitialEvents") == "true" {
				http.Error(w, `{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Invalid","code":422,"message":"sendInitialEvents forbidden"}`, 422)
				return
			}
			enc := json.NewEncoder(w)
			enc.Encode(metav1.WatchEvent{Type: string(watch.Bookmark), Object: runtimeRaw(`{"kind":"ConfigMap","apiVersion":"v1","metadata":{"resourceVersion":"11"}}`)})
			w.(http.Flusher).Flush()
			<-r.Context().Done()
		default:
			http.NotFound(w, r)
		}
	})
	cs := clientFor(t, h)
	inf := New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	rec := &recorder{}
	inf.AddHandler(rec.handle)
	inf.Start()
	defer inf.Stop()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the bookmark through the client's Watch", func() bool { return inf.ResourceVersion() == "11" })
	time.Sleep(200 * time.Millisecond)
	// Falling back is the informer's business, logged but no error of
	// the cache's: no ERROR event.
	for _, e := range rec.all() {
		if e.Type == Error {
			t.Errorf("error event: %v", e.Err)
		}
	}
}

func runtimeRaw(s string) runtime.RawExtension { return runtime.RawExtension{Raw: []byte(s)} }
