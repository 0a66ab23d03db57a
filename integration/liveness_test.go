package integration

import (
	"fmt"
	"net/http"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/liveness"
	"github.com/kinformer/kinformer/internal/testenv"
)

// deadConnLimit is how soon an informer with default options must have
// recovered from a silently dead connection: the probe's 5 s of silence
// and 5 s without an answer, the backoff's first wait (800 ms), a new
// connection and the watch's resume, with room for a loaded machine.
const deadConnLimit = 15 * time.Second

// TestDeadConnectionDefaults is the chaos round of a silently dead
// connection with default options (TestChaosDeadConnection measures the
// other settings): the proxy holds every connection for 2 s, then new
// connections work but the held ones never carry a byte again, and the
// cache must hold a value written after that within deadConnLimit of the
// fault, on kinformer's own decoders, on the client's Watch, and for a
// Factory's informer (which the adapters use), each over HTTP/2.
func TestDeadConnectionDefaults(t *testing.T) {
	srv := testenv.Shared(t)
	reg := prometheus.NewRegistry()
	metrics, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	for _, v := range []struct {
		name string
		make cmInformer
	}{
		{"new-direct", newWith(&kinformer.Options[*corev1.ConfigMap]{Metrics: metrics})},
		{"new-client-watch", newWith(&kinformer.Options[*corev1.ConfigMap]{DisableDirectDecoding: true})},
		{"factory", func(t *testing.T, cfg *rest.Config, ns string) *kinformer.Informer[*corev1.ConfigMap] {
			f := kinformer.NewFactory(cfg, nil)
			t.Cleanup(f.Stop)
			inf, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil)
			if err != nil {
				t.Fatal(err)
			}
			return inf
		}},
	} {
		t.Run(v.name, func(t *testing.T) {
			before := liveness.Total()
			r := measureDeadConnectionOf(t, srv, v.make, 2*deadConnLimit)
			if !r.ok || r.recovered > deadConnLimit {
				t.Fatalf("recovered after %s (ok %v), want within %s", r.recovered.Round(100*time.Millisecond), r.ok, deadConnLimit)
			}
			if !strings.Contains(r.firstErr, "did not answer a probe") {
				t.Errorf("the first ERROR event, after %s, does not say a probe found the connection dead: %q", r.firstErrAfter.Round(100*time.Millisecond), r.firstErr)
			}
			if after := liveness.Total(); after.Dead <= before.Dead {
				t.Errorf("no connection closed by a probe: %+v → %+v", before, after)
			}
		})
	}
	if got := counterSum(t, reg, "kinformer_dead_connections_total"); got < 1 {
		t.Errorf("kinformer_dead_connections_total = %v after a dead connection, want at least 1", got)
	}
}

// TestSlowServerIsNotTakenForDead: a server that answers the probe in 3 s
// (every byte from it comes 3 s late) is slow, not dead: its quiet watch
// keeps its connection, and no ERROR comes.
func TestSlowServerIsNotTakenForDead(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, admin, configMap(ns, "marker", nil, "0"))
	p := newFaultProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
	proto := &protocols{}
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, proto.wrap(p.config(t, srv.Config()))).CoreV1().ConfigMaps(ns), nil)
	var mu sync.Mutex
	var errs []string
	inf.AddHandler(func(e cmEvent) {
		if e.Type == kinformer.Error {
			mu.Lock()
			errs = append(errs, e.Err.Error())
			mu.Unlock()
		}
	})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	before, conns := liveness.Total(), p.accepted.Load()
	p.lag.Store(int64(3 * time.Second))
	time.Sleep(25 * time.Second) // quiet: a probe after each 5 s of silence, answered 3 s later
	p.lag.Store(0)
	mustUpdate(t, admin, ns, "marker", "1")
	eventually(t, callTimeout, "the update on the same watch", func() bool {
		cm, ok := inf.Cache().GetByKey(ns + "/marker")
		return ok && cm.Data["v"] == "1"
	})
	after := liveness.Total()
	mu.Lock()
	defer mu.Unlock()
	t.Logf("protocol %s; probes %d, connections closed by a probe %d", proto, after.Probes-before.Probes, after.Dead-before.Dead)
	if after.Probes == before.Probes {
		t.Fatal("no probe in 25 s of silence")
	}
	if after.Dead != before.Dead || p.accepted.Load() != conns || len(errs) > 0 {
		t.Fatalf("a slow server was taken for dead: %d connections closed by a probe, %d new connections, errors %q",
			after.Dead-before.Dead, p.accepted.Load()-conns, errs)
	}
}

// TestProbeCost counts the probes of quiet informers: one informer, then
// 100 sharing one clientset (HTTP/2: their watches share a connection or
// two). A connection's probes do not grow with its watches: at most one
// per ProbeAfter (5 s) of silence. KINFORMER_PROBE_COST=DURATION measures for longer (the figures
// in docs/reliability.md are a minute each).
func TestProbeCost(t *testing.T) {
	srv := testenv.Shared(t)
	window := 20 * time.Second
	if d, err := time.ParseDuration(os.Getenv("KINFORMER_PROBE_COST")); err == nil && d > 0 {
		window = d
	}
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, clientset(t, srv.Config()), configMap(ns, "quiet", nil, "0"))
	for _, n := range []int{1, 100} {
		p := newFaultProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
		cs := clientset(t, p.config(t, srv.Config()))
		var infs []*kinformer.Informer[*corev1.ConfigMap]
		for i := range n {
			inf := kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{
				LabelSelector: fmt.Sprintf("informer!=%d", i), // n different watches
			})
			inf.Start()
			defer inf.Stop()
			infs = append(infs, inf)
		}
		for _, inf := range infs {
			if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(time.Second) // the watch-lists' ends
		before := liveness.Total()
		time.Sleep(window)
		got, conns := liveness.Total().Probes-before.Probes, p.open()
		t.Logf("%d quiet informers on %d connection(s): %d probes in %s: %.1f a minute", n, conns, got, window, float64(got)/window.Minutes())
		// Concurrent first requests may open a second connection; each
		// is probed on its own.
		if limit := (uint64(window/(5*time.Second)) + 1) * uint64(conns); got > limit || got == 0 {
			t.Errorf("%d probes in %s for %d informers on %d connections, want 1 to %d", got, window, n, conns, limit)
		}
	}
}

// counterSum is the sum of a counter's series in reg.
func counterSum(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	sum := 0.0
	for _, mf := range mfs {
		if mf.GetName() == name {
			for _, m := range mf.GetMetric() {
				sum += m.GetCounter().GetValue()
			}
		}
	}
	return sum
}

// TestProbeIsNotQueued: the probe asks something the API server's priority
// and fairness does not queue. A probe that waits in line with a busy
// priority level's requests (a GET /version took 7 s on a server under
// load) looks like a dead connection, and a healthy one is closed. The
// probes of a quiet informer, as the restricted user, are classified in
// the "exempt" priority level (the server says so in a response header);
// a GET /version of the same user is not.
func TestProbeIsNotQueued(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	grantConfigMaps(t, srv, ns)
	exempt, err := admin.FlowcontrolV1().PriorityLevelConfigurations().Get(bounded(t, callTimeout), "exempt", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	levels := map[string]string{} // request path → priority level UID
	cfg := rest.CopyConfig(srv.RestrictedConfig())
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil && !strings.HasPrefix(r.URL.Path, "/api/") {
				mu.Lock()
				levels[r.URL.Path] = resp.Header.Get("X-Kubernetes-PF-PriorityLevel-UID")
				mu.Unlock()
			}
			return resp, err
		})
	})
	cs := clientset(t, cfg)
	inf := kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), nil)
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.Discovery().ServerVersion(); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "a probe of the quiet watch's connection", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(levels) > 1
	})
	mu.Lock()
	defer mu.Unlock()
	t.Logf("priority levels by path (exempt %s): %v", exempt.UID, levels)
	for path, uid := range levels {
		switch {
		case path == "/version" && (uid == "" || uid == string(exempt.UID)):
			t.Errorf("GET /version in priority level %q: want a queued one, for the comparison", uid)
		case path != "/version" && uid != string(exempt.UID):
			t.Errorf("the probe, GET %s, in priority level %q, want exempt (%s)", path, uid, exempt.UID)
		}
	}
}
