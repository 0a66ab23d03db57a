package kinformer

import (
	"context"
	"encoding/pem"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/internal/apiclient"
	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/liveness"
)

type withProbeClient struct {
	cache.ListerWatcher
	rc rest.Interface
}

func (w withProbeClient) ProbeClient() rest.Interface { return w.rc }

// The probe reaches the HTTP client of every source that lets it.
func TestProberFor(t *testing.T) {
	cfg := &rest.Config{Host: "https://example.invalid:6443"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiclient.Connect(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	plain := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", "", nil)
	for _, c := range []struct {
		name string
		lw   any
		want bool
	}{
		{"typed", cs.CoreV1().ConfigMaps("ns"), true},
		{"dynamic", dyn.Resource(cms).Namespace("ns"), true},
		{"factory metadata", api.Metadata(cms, "ns"), true},
		{"ProbeClient", withProbeClient{plain, cs.CoreV1().RESTClient()}, true},
		{"ProbeClient nil", withProbeClient{plain, nil}, false},
		{"cache.ListWatch", plain, false},
	} {
		if got := describe.Of(c.lw).Prober() != nil; got != c.want {
			t.Errorf("%s: a prober %v, want %v", c.name, got, c.want)
		}
	}
}

// The prober returns the connection its request went out on, answered or
// not: the watchdog closes a connection only when a probe that went out
// on it was left unanswered, so a prober that loses its connection never
// finds a dead one. Over HTTP/2 that connection is the one the source's
// watches share.
func TestProberReportsItsConnection(t *testing.T) {
	var hang atomic.Bool
	arrived := make(chan struct{}, 1) // a probe the server holds
	release := make(chan struct{})
	var mu sync.Mutex
	var probedFrom []string // the client ends of the probes (GET /livez?exclude=etcd)
	hs := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/livez" && r.URL.Query().Get("exclude") == "etcd" {
			mu.Lock()
			probedFrom = append(probedFrom, r.RemoteAddr)
			mu.Unlock()
			if hang.Load() {
				arrived <- struct{}{}
				select {
				case <-r.Context().Done():
				case <-release:
				}
				return
			}
		}
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{}`))
	}))
	hs.EnableHTTP2 = true
	hs.StartTLS()
	t.Cleanup(hs.Close)
	t.Cleanup(func() { close(release) }) // before hs.Close, which waits for the handlers
	cfg := &rest.Config{Host: hs.URL, TLSClientConfig: rest.TLSClientConfig{
		CAData: pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: hs.Certificate().Raw}),
	}}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiclient.Connect(cfg, nil, nil)
	if err != nil {
		t.Fatal(err)
	}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	plain := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", "", nil)

	// A request of the typed client, as a watch would make it: the
	// connection it went out on.
	var watchConn atomic.Pointer[net.Conn]
	ctx := httptrace.WithClientTrace(bounded(t), &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) { watchConn.Store(&i.Conn) },
	})
	if _, err := cs.CoreV1().RESTClient().Get().AbsPath("/api/v1/namespaces/ns/configmaps").DoRaw(ctx); err != nil {
		t.Fatal(err)
	}
	if watchConn.Load() == nil {
		t.Fatal("no connection for the typed client's request")
	}

	for _, c := range []struct {
		name string
		lw   any
	}{
		{"typed", cs.CoreV1().ConfigMaps("ns")},
		{"dynamic", dyn.Resource(cms).Namespace("ns")},
		{"factory metadata", api.Metadata(cms, "ns")},
		{"ProbeClient", withProbeClient{plain, cs.CoreV1().RESTClient()}},
	} {
		t.Run(c.name, func(t *testing.T) {
			probe := describe.Of(c.lw).Prober()
			if probe == nil {
				t.Fatal("no prober")
			}
			hang.Store(false)
			conn, err := probe(bounded(t))
			if err != nil {
				t.Fatalf("an answered probe: %v", err)
			}
			if conn == nil {
				t.Fatal("an answered probe returned no connection")
			}
			if !liveness.HTTP2(conn) {
				t.Fatalf("the probe's connection %T is not HTTP/2", conn)
			}
			mu.Lock()
			from := probedFrom[len(probedFrom)-1]
			mu.Unlock()
			if got := conn.LocalAddr().String(); got != from {
				t.Fatalf("the probe returned the connection from %s; it went out on the one from %s", got, from)
			}
			if c.name == "typed" && conn != *watchConn.Load() {
				t.Fatalf("the probe went out on the connection from %s, the typed client's requests on the one from %s",
					conn.LocalAddr(), (*watchConn.Load()).LocalAddr())
			}

			// Unanswered: the same connection, with the error. The
			// probe's context ends once the server holds it (the
			// watchdog's would time out).
			hang.Store(true)
			ctx, cancel := context.WithCancel(bounded(t))
			defer cancel()
			go func() {
				select {
				case <-arrived:
					cancel()
				case <-ctx.Done():
				}
			}()
			hung, err := probe(ctx)
			if err == nil {
				t.Fatal("a probe the server never answered: no error")
			}
			if hung != conn {
				t.Fatalf("a probe left unanswered (%v) returned the connection %v, want the one it went out on, from %s", err, addrOf(hung), conn.LocalAddr())
			}
		})
	}
}

func addrOf(c net.Conn) any {
	if c == nil {
		return nil
	}
	return c.LocalAddr()
}
