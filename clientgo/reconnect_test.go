package clientgo_test

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	typedcorev1 "k8s.io/client-go/kubernetes/typed/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
	"github.com/kinformer/kinformer/internal/testenv"
)

// recorder is a logr sink that keeps every line.
type recorder struct {
	mu    sync.Mutex
	lines []string // "level msg kv..." or "ERROR msg kv..."
}

type sink struct {
	r      *recorder
	values []any
}

func (s sink) Init(logr.RuntimeInfo)        {}
func (s sink) Enabled(int) bool             { return true }
func (s sink) WithName(string) logr.LogSink { return s }
func (s sink) WithValues(kv ...any) logr.LogSink {
	return sink{r: s.r, values: append(append([]any{}, s.values...), kv...)}
}
func (s sink) Info(level int, msg string, kv ...any) {
	s.r.add(fmt.Sprintf("V%d %s %v %v", level, msg, s.values, kv))
}
func (s sink) Error(err error, msg string, kv ...any) {
	s.r.add(fmt.Sprintf("ERROR %s %v %v err=%v", msg, s.values, kv, err))
}

func (r *recorder) add(l string) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.lines = append(r.lines, l)
}

func (r *recorder) all() []string {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]string(nil), r.lines...)
}

// A 2 s connection cut through Wrap: the informer reconnects and goes on,
// and the program's logger (the one in RunWithContext's context) hears of
// each failure as kinformer classes it (kinformer.Event.Routine): a
// routine reconnect below error level, naming the informer's type, and
// only what is no longer routine (the backoff has grown) at error level,
// through client-go's watch error handler. (An outage that outlasts the
// first attempts: TestLongOutageReachesTheWatchErrorHandler.)
func TestReconnectLogsAsKinformerClassesIt(t *testing.T) {
	cfg, cs, ns := clients(t)
	px, pods := proxiedPods(t, cfg, ns)
	inf := kinformer.New[*corev1.Pod](pods, nil)
	var mu sync.Mutex
	routine, other := 0, 0
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Error: func(e kinformer.Event[*corev1.Pod]) {
		mu.Lock()
		defer mu.Unlock()
		if e.Routine {
			routine++
		} else {
			other++
		}
	}})
	sii := clientgo.Wrap(inf)
	h := &handler{}
	if _, err := sii.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	rec := runLogged(t, sii)
	px.Down()
	time.Sleep(2 * time.Second)
	px.Up()
	create(t, cs, pod(ns, "after-cut", "n1", nil))
	eventually(t, "the add after the cut", func() bool { return len(h.find("add", ns+"/after-cut")) == 1 })
	count := func() (reconnects, errs int) {
		for _, l := range rec.all() {
			if strings.HasPrefix(l, "ERROR") {
				errs++
			}
			if strings.Contains(l, "reconnecting") && strings.Contains(l, "*v1.Pod") {
				reconnects++
			}
		}
		return reconnects, errs
	}
	eventually(t, "a log line for each Error event", func() bool {
		mu.Lock()
		defer mu.Unlock()
		reconnects, errs := count()
		return reconnects == routine && errs == other
	})
	lines := rec.all()
	t.Logf("logged:\n%s", strings.Join(lines, "\n"))
	for _, l := range lines {
		if strings.Contains(l, "<unspecified>") {
			t.Errorf("the type is unnamed: %s", l)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if routine == 0 {
		t.Error("no routine reconnect: the first failures of a cut should be, and be logged below error level")
	}
}

// An outage that outlasts the first attempts (the backoff has grown: no
// longer routine, kinformer.Event.Routine) reaches the watch error
// handler, as a refused list does in client-go's reflector; the first
// reconnects do not.
func TestLongOutageReachesTheWatchErrorHandler(t *testing.T) {
	cfg, _, ns := clients(t)
	px, pods := proxiedPods(t, cfg, ns)
	backoff := kinformer.Backoff{Initial: 20 * time.Millisecond, Max: 200 * time.Millisecond, Factor: 2}
	sii := clientgo.Wrap(kinformer.New[*corev1.Pod](pods, &kinformer.Options[*corev1.Pod]{Backoff: backoff}))
	var mu sync.Mutex
	var heard []error
	if err := sii.SetWatchErrorHandlerWithContext(func(_ context.Context, _ *cache.Reflector, err error) {
		mu.Lock()
		heard = append(heard, err)
		mu.Unlock()
	}); err != nil {
		t.Fatal(err)
	}
	rec := runLogged(t, sii)
	px.Down()
	defer px.Up()
	eventually(t, "the outage reaching the watch error handler", func() bool {
		mu.Lock()
		defer mu.Unlock()
		for _, err := range heard {
			if kinformer.FailureOf(err) == kinformer.FailureDown {
				return true
			}
		}
		return false
	})
	reconnects := 0
	for _, l := range rec.all() {
		if strings.Contains(l, "reconnecting") {
			reconnects++
		}
	}
	if reconnects == 0 {
		t.Error("no reconnect was routine: the first ones should be logged at V(4), not handed to the handler")
	}
}

// proxiedPods returns a cut proxy to cfg's server, and the Pods of ns
// through it.
func proxiedPods(t *testing.T, cfg *rest.Config, ns string) (*testenv.CutProxy, typedcorev1.PodInterface) {
	px, pcfg := testenv.NewCutProxy(t, cfg)
	pcs, err := kubernetes.NewForConfig(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { pcs.CoreV1().RESTClient().(*rest.RESTClient).Client.CloseIdleConnections() })
	return px, pcs.CoreV1().Pods(ns)
}

// runLogged runs sii until the test ends, with a context whose logger
// records every line, and waits until it has synced.
func runLogged(t *testing.T, sii cache.SharedIndexInformer) *recorder {
	rec := &recorder{}
	ctx, cancel := context.WithCancel(klog.NewContext(context.Background(), logr.New(sink{r: rec})))
	done := make(chan struct{})
	go func() { defer close(done); sii.RunWithContext(ctx) }()
	t.Cleanup(func() { cancel(); <-done })
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced) {
		t.Fatal("not synced")
	}
	return rec
}
