package clientgo_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	utilruntime "k8s.io/apimachinery/pkg/util/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/clientgo"
)

// blocking is a handler whose OnAdd of "block" waits until release is
// closed; it records every call.
type blocking struct {
	handler
	entered chan struct{}
	release chan struct{}
}

func (b *blocking) OnAdd(obj any, initial bool) {
	b.handler.OnAdd(obj, initial)
	if obj.(*corev1.Pod).Name == "block" {
		close(b.entered)
		<-b.release
	}
}

// RemoveEventHandler from another goroutine returns at once while the
// handler runs (client-go's meaning: a handler blocked on what the remover
// does next must not deadlock it), and no call begins after it;
// client-go's cache.ShutDownEventHandler waits for the running call.
func TestRemoveEventHandlerDoesNotWait(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "block", "n1", nil))
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	b := &blocking{entered: make(chan struct{}), release: make(chan struct{})}
	reg, err := sii.AddEventHandler(b)
	if err != nil {
		t.Fatal(err)
	}
	released := false
	release := func() {
		if !released {
			released = true
			close(b.release)
		}
	}
	defer release()
	run(t, sii)
	select {
	case <-b.entered:
	case <-time.After(30 * time.Second):
		t.Fatal("the handler was not called")
	}

	removed := make(chan error, 1)
	go func() { removed <- sii.RemoveEventHandler(reg) }()
	select {
	case err := <-removed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(5 * time.Second):
		release()
		t.Fatal("RemoveEventHandler waited for the running handler call")
	}
	shut := make(chan error, 1)
	go func() { shut <- cache.ShutDownEventHandler(sii, reg) }()
	select {
	case err := <-shut:
		t.Fatalf("ShutDownEventHandler returned (%v) while the handler runs", err)
	case <-time.After(500 * time.Millisecond):
	}
	create(t, cs, pod(ns, "after", "n1", nil))
	release()
	select {
	case err := <-shut:
		if err != nil {
			t.Fatalf("ShutDownEventHandler: %v", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("ShutDownEventHandler did not return once the handler did")
	}
	// A second informer's handler sees "after": the removed one must not.
	other := &handler{}
	if _, err := sii.AddEventHandler(other); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the other handler's add", func() bool { return len(other.find("add", ns+"/after")) == 1 })
	if c := b.find("add", ns+"/after"); len(c) != 0 {
		t.Fatalf("the removed handler was called after RemoveEventHandler: %+v", c)
	}
	// Removing again is a no-op, and its shutdown is over.
	if err := cache.ShutDownEventHandler(sii, reg); err != nil {
		t.Fatal(err)
	}
}

// panicky panics in OnAdd of "boom".
type panicky struct{ handler }

func (p *panicky) OnAdd(obj any, initial bool) {
	if obj.(*corev1.Pod).Name == "boom" {
		panic("boom")
	}
	p.handler.OnAdd(obj, initial)
}

// A handler's panic reaches client-go's crash handlers
// (utilruntime.PanicHandlers). With utilruntime.ReallyCrash off, the event
// is skipped and the next ones are delivered; with it on (the default),
// the process crashes, as with client-go's informers
// (TestHandlerPanicCrashes).
func TestHandlerPanicReachesPanicHandlers(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "boom", "n1", nil))
	create(t, cs, pod(ns, "ok", "n1", nil))
	var mu sync.Mutex
	var got []any
	savedHandlers, savedCrash := utilruntime.PanicHandlers, utilruntime.ReallyCrash
	utilruntime.PanicHandlers = append(append([]func(context.Context, any){}, savedHandlers...), func(_ context.Context, r any) {
		mu.Lock()
		defer mu.Unlock()
		got = append(got, r)
	})
	utilruntime.ReallyCrash = false
	defer func() { utilruntime.PanicHandlers, utilruntime.ReallyCrash = savedHandlers, savedCrash }()

	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	p := &panicky{}
	if _, err := sii.AddEventHandler(p); err != nil {
		t.Fatal(err)
	}
	stop := run(t, sii)
	eventually(t, "the next pod after the panic", func() bool { return len(p.find("add", ns+"/ok")) == 1 })
	stop()
	mu.Lock()
	defer mu.Unlock()
	if len(got) != 1 || got[0] != "boom" {
		t.Fatalf("utilruntime.PanicHandlers got %v, want the handler's panic once", got)
	}
}

// The crash under utilruntime.ReallyCrash, in a child process (a test
// binary that crashes cannot report): the informer's source is a fixed
// list, the server is not what is tested.
func TestHandlerPanicCrashes(t *testing.T) {
	if os.Getenv("CLIENTGO_CRASH_CHILD") == "1" {
		lw := &cache.ListWatch{
			ListFunc: func(metav1.ListOptions) (runtime.Object, error) {
				return &corev1.PodList{ListMeta: metav1.ListMeta{ResourceVersion: "1"},
					Items: []corev1.Pod{*pod("ns", "boom", "n1", nil)}}, nil
			},
			WatchFunc: func(metav1.ListOptions) (watch.Interface, error) { return watch.NewFake(), nil },
		}
		sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
		if _, err := sii.AddEventHandler(&panicky{}); err != nil {
			t.Fatal(err)
		}
		utilruntime.PanicHandlers = append(utilruntime.PanicHandlers, func(context.Context, any) { fmt.Println("PANIC HANDLER CALLED") })
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		sii.RunWithContext(ctx)
		fmt.Println("NO CRASH")
		return
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandlerPanicCrashes$", "-test.count=1")
	cmd.Env = append(os.Environ(), "CLIENTGO_CRASH_CHILD=1")
	out, err := cmd.CombinedOutput()
	var exit *exec.ExitError
	if !errors.As(err, &exit) || exit.ExitCode() == 0 {
		t.Fatalf("the child did not crash (%v):\n%s", err, out)
	}
	for _, want := range []string{"PANIC HANDLER CALLED", "Observed a panic", "panic: boom"} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the child's output lacks %q:\n%s", want, out)
		}
	}
}

// crashPause is client-go's pause after a handler's recovered panic.
const crashPause = time.Second

// alwaysPanics panics in every OnAdd, recording when each call began.
type alwaysPanics struct {
	mu    sync.Mutex
	calls []time.Time
}

func (a *alwaysPanics) OnAdd(any, bool) {
	a.mu.Lock()
	a.calls = append(a.calls, time.Now())
	a.mu.Unlock()
	panic("always")
}
func (a *alwaysPanics) OnUpdate(_, _ any) {}
func (a *alwaysPanics) OnDelete(any)      {}

func (a *alwaysPanics) times() []time.Time {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([]time.Time(nil), a.calls...)
}

// noCrash turns utilruntime.ReallyCrash off, and client-go's panic logs
// (PanicHandlers stay), for the test.
func noCrash(t *testing.T) {
	saved := utilruntime.ReallyCrash
	utilruntime.ReallyCrash = false
	t.Cleanup(func() { utilruntime.ReallyCrash = saved })
}

// After a recovered panic (utilruntime.ReallyCrash off), a handler's next
// call comes a second later, as client-go's listener sleeps a second (its
// TestEventPanics "many"): a handler that always panics does not spin.
// Another handler of the informer is not held up.
func TestHandlerPanicPauses(t *testing.T) {
	_, cs, ns := clients(t)
	for i := range 3 {
		create(t, cs, pod(ns, fmt.Sprintf("p%d", i), "n1", nil))
	}
	noCrash(t)
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	bad, good := &alwaysPanics{}, &handler{}
	var goodAtThird int // the good handler's adds when the bad one's third call began
	if _, err := sii.AddEventHandler(bad); err != nil {
		t.Fatal(err)
	}
	if _, err := sii.AddEventHandler(cache.ResourceEventHandlerFuncs{AddFunc: func(obj any) { good.OnAdd(obj, true) }}); err != nil {
		t.Fatal(err)
	}
	stop := run(t, sii)
	eventually(t, "three calls of the panicking handler", func() bool {
		if len(bad.times()) < 3 {
			goodAtThird = len(good.all())
			return false
		}
		return true
	})
	stop()
	calls := bad.times()
	if len(calls) != 3 {
		t.Fatalf("the panicking handler was called %d times for 3 pods", len(calls))
	}
	for i := 1; i < len(calls); i++ {
		if gap := calls[i].Sub(calls[i-1]); gap < crashPause {
			t.Fatalf("call %d came %v after a panic, want at least %v", i+1, gap, crashPause)
		}
	}
	if goodAtThird != 3 {
		t.Fatalf("the other handler had %d of the 3 adds two pauses into the panicking one's", goodAtThird)
	}
}

// A removal, or the informer's stop, ends the pause at once:
// ShutDownEventHandler and Run return without waiting out the second, and
// the removed handler is not called again.
func TestHandlerPanicPauseEnds(t *testing.T) {
	for _, how := range []string{"remove", "stop"} {
		t.Run(how, func(t *testing.T) {
			_, cs, ns := clients(t)
			create(t, cs, pod(ns, "p0", "n1", nil))
			create(t, cs, pod(ns, "p1", "n1", nil))
			noCrash(t)
			lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
			sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
			bad := &alwaysPanics{}
			reg, err := sii.AddEventHandler(bad)
			if err != nil {
				t.Fatal(err)
			}
			stop := run(t, sii)
			for len(bad.times()) == 0 {
				time.Sleep(time.Millisecond)
			}
			// The second pod's call pauses, until a second after the
			// panic at the earliest.
			first := bad.times()[0]
			if how == "remove" {
				if err := cache.ShutDownEventHandler(sii, reg); err != nil {
					t.Fatal(err)
				}
			} else {
				stop()
			}
			if ended := time.Since(first); ended >= crashPause {
				t.Fatalf("%s returned %v after the panic: it waited for the pause", how, ended)
			}
			if how == "stop" {
				return
			}
			time.Sleep(crashPause + crashPause/5)
			if n := len(bad.times()); n != 1 {
				t.Fatalf("the removed handler was called %d times, want once", n)
			}
		})
	}
}
