package kinformer

import (
	"bytes"
	"context"
	"encoding/json"
	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/protowatch"
	"net/http"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"net/http/httptest"
)

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
	d := newDirectWatcher[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"), false, &intern.Sharer{})
	if _, err := d.open(ctx, metav1.ListOptions{}); err != nil { // discovery, then a first watch
		t.Fatal(err)
	}
	before := lim.waits.Load()
	dw, err := d.open(ctx, metav1.ListOptions{})
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
