package kinformer_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

// Lifecycle under stress: many Start/Stop cycles while the server changes,
// Stop while a list, a watch or a handler is blocked, and Run's context
// cancelled at random moments. Nothing may leak, race or be lost: after it
// all, the cache and every handler's folded state equal the server.

// folder folds the events it receives into key → resourceVersion.
type folder struct {
	mu    sync.Mutex
	state map[string]string
	err   error
}

func newFolder() *folder { return &folder{state: map[string]string{}} }

func (f *folder) handle(e kinformer.Event[*corev1.ConfigMap]) {
	f.mu.Lock()
	defer f.mu.Unlock()
	_, had := f.state[e.Key]
	switch e.Type {
	case kinformer.Added:
		if had && f.err == nil {
			f.err = fmt.Errorf("ADDED %s twice", e.Key)
		}
		f.state[e.Key] = e.Object.ResourceVersion
	case kinformer.Modified:
		if !had && f.err == nil {
			f.err = fmt.Errorf("MODIFIED %s never added", e.Key)
		}
		f.state[e.Key] = e.Object.ResourceVersion
	case kinformer.Deleted:
		if !had && f.err == nil {
			f.err = fmt.Errorf("DELETED %s never added", e.Key)
		}
		delete(f.state, e.Key)
	}
}

func (f *folder) equals(want map[string]string) (bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.err != nil {
		return false, f.err
	}
	if len(f.state) != len(want) {
		return false, nil
	}
	for k, v := range want {
		if f.state[k] != v {
			return false, nil
		}
	}
	return true, nil
}

func serverState(srv *kinformertest.Server[*corev1.ConfigMap]) map[string]string {
	l, err := srv.List(context.Background(), metav1.ListOptions{})
	if err != nil {
		panic(err)
	}
	out := map[string]string{}
	for _, o := range l.Items {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

func cacheState(inf *kinformer.Informer[*corev1.ConfigMap]) map[string]string {
	out := map[string]string{}
	for _, o := range inf.Cache().List() {
		out[o.Namespace+"/"+o.Name] = o.ResourceVersion
	}
	return out
}

// churn writes to srv until ctx ends: creates, updates and deletes among
// n names.
func churn(ctx context.Context, srv *kinformertest.Server[*corev1.ConfigMap], n int, seed uint64) {
	r := rand.New(rand.NewPCG(seed, 1))
	for i := 0; ctx.Err() == nil; i++ {
		c := newCM(fmt.Sprintf("cm-%d", r.IntN(n)))
		c.Data["i"] = fmt.Sprint(i)
		switch r.IntN(3) {
		case 0:
			_ = srv.Delete(c)
		case 1:
			_, _ = srv.Add(c)
		default:
			_, _ = srv.Update(c)
		}
		if i%8 == 0 {
			time.Sleep(100 * time.Microsecond)
		}
	}
}

// settle waits until the cache and each folder equal the server.
func settle(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap], srv *kinformertest.Server[*corev1.ConfigMap], folders ...*folder) {
	t.Helper()
	want := serverState(srv)
	deadline := time.Now().Add(10 * time.Second)
	for {
		ok := fmt.Sprint(cacheState(inf)) == fmt.Sprint(want)
		for _, f := range folders {
			same, err := f.equals(want)
			if err != nil {
				t.Fatal(err)
			}
			ok = ok && same
		}
		if ok {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("cache (%d objects) or handlers differ from the server (%d objects)", len(cacheState(inf)), len(want))
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// 1,000 Start/Stop cycles of one informer, with a state file, while the
// server changes, with a fast and a slow registration.
func TestLifecycleThousandStartStops(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := kinformertest.NewServer[*corev1.ConfigMap]()
	ctx, stopChurn := context.WithCancel(t.Context())
	var writes sync.WaitGroup
	writes.Add(1)
	go func() { defer writes.Done(); churn(ctx, srv, 50, 1) }()

	opts := durableOpts(t.TempDir())
	opts.StateNoSync = true // a thousand final commits: their fsyncs are not what this tests
	inf := kinformer.New[*corev1.ConfigMap](srv, opts)
	fast, slow := newFolder(), newFolder()
	inf.AddHandler(fast.handle)
	inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		if rand.IntN(50) == 0 {
			time.Sleep(200 * time.Microsecond)
		}
		slow.handle(e)
	})
	r := rand.New(rand.NewPCG(2, 2))
	for range 1000 {
		inf.Start()
		time.Sleep(time.Duration(r.IntN(1500)) * time.Microsecond)
		inf.Stop()
	}
	stopChurn()
	writes.Wait()
	inf.Start()
	waitSynced(t, inf)
	settle(t, inf, srv, fast, slow)
	inf.Stop()

	// And what the state file kept is the server's state too.
	next, log, reg := runDurable(t, srv, opts.StateDir)
	waitSynced(t, next)
	waitHandled(t, reg)
	if _, errs := log.get(); len(errs) > 0 {
		t.Fatalf("errors from the state file after 1,000 cycles: %v", errs)
	}
	settle(t, next, srv)
	next.Stop()
}

// gate blocks the calls it wraps until released or their context ends.
type gate struct {
	kinformertest.Server[*corev1.ConfigMap]
	blockList, blockWatch atomic.Bool
	entered               chan string
}

func (g *gate) List(ctx context.Context, o metav1.ListOptions) (*cmList, error) {
	if g.blockList.Load() {
		g.entered <- "list"
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return g.Server.List(ctx, o)
}

func (g *gate) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if g.blockWatch.Load() {
		g.entered <- "watch"
		<-ctx.Done()
		return nil, ctx.Err()
	}
	return g.Server.Watch(ctx, o)
}

// Stop while a list, a watch request or a handler is blocked: Stop returns
// (at once, or once the handler returns), and nothing is left running.
func TestLifecycleStopWhileBlocked(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	stopWithin := func(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap], d time.Duration) {
		t.Helper()
		done := make(chan struct{})
		go func() { inf.Stop(); close(done) }()
		select {
		case <-done:
		case <-time.After(d):
			t.Fatalf("Stop did not return within %v", d)
		}
	}
	for _, where := range []string{"list", "watch"} {
		t.Run(where, func(t *testing.T) {
			g := &gate{Server: *kinformertest.NewServer(newCM("a")), entered: make(chan string, 10)}
			g.blockList.Store(where == "list")
			g.blockWatch.Store(true) // the watch-list too: listing is a watch first
			inf := kinformer.New[*corev1.ConfigMap](g, &kinformer.Options[*corev1.ConfigMap]{DisableStreamingList: where == "list"})
			inf.Start()
			if got := <-g.entered; got != where {
				t.Fatalf("blocked in %s, want %s", got, where)
			}
			stopWithin(t, inf, 2*time.Second)
		})
	}
	t.Run("handler", func(t *testing.T) {
		srv := kinformertest.NewServer(newCM("a"))
		inf := kinformer.New[*corev1.ConfigMap](srv, nil)
		in, release := make(chan struct{}), make(chan struct{})
		var once sync.Once
		inf.AddHandler(func(kinformer.Event[*corev1.ConfigMap]) {
			once.Do(func() { close(in); <-release })
		})
		inf.Start()
		<-in
		stopped := make(chan struct{})
		go func() { inf.Stop(); close(stopped) }()
		select {
		case <-stopped:
			t.Fatal("Stop returned while a handler was still running")
		case <-time.After(50 * time.Millisecond):
		}
		close(release)
		select {
		case <-stopped:
		case <-time.After(2 * time.Second):
			t.Fatal("Stop did not return once the handler did")
		}
	})
}

// Run with its context cancelled at random moments, 300 times, while the
// server changes: every Run returns, and the informer ends in step.
func TestLifecycleRandomCancel(t *testing.T) {
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	srv := kinformertest.NewServer[*corev1.ConfigMap]()
	ctx, stopChurn := context.WithCancel(t.Context())
	var writes sync.WaitGroup
	writes.Add(1)
	go func() { defer writes.Done(); churn(ctx, srv, 30, 3) }()
	inf := kinformer.New[*corev1.ConfigMap](srv, &kinformer.Options[*corev1.ConfigMap]{
		Backoff: kinformer.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
	})
	f := newFolder()
	inf.AddHandler(f.handle)
	r := rand.New(rand.NewPCG(4, 4))
	for range 300 {
		rctx, cancel := context.WithTimeout(t.Context(), time.Duration(r.IntN(3000))*time.Microsecond)
		returned := make(chan error, 1)
		go func() { returned <- inf.Run(rctx) }()
		select {
		case err := <-returned:
			if err != nil {
				t.Fatalf("Run: %v", err)
			}
		case <-time.After(5 * time.Second):
			t.Fatal("Run did not return after its context ended")
		}
		cancel()
	}
	stopChurn()
	writes.Wait()
	inf.Start()
	waitSynced(t, inf)
	settle(t, inf, srv, f)
	inf.Stop()
}
