package kinformer

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
)

// gate holds handlers until opened. A handler waits at most a minute of
// fake time at it, and says so: a test that fails before it opens its gate
// (its deferred inf.Stop waits for the handler) ends with its error, not
// with a deadlock of the bubble that kills the test binary.
type gate struct {
	ch   chan struct{}
	open func() // idempotent: deferred, and called by the test
}

func newGate() *gate {
	ch := make(chan struct{})
	return &gate{ch: ch, open: sync.OnceFunc(func() { close(ch) })}
}

func (g *gate) wait(t *testing.T) {
	select {
	case <-g.ch:
	case <-time.After(time.Minute):
		t.Error("a handler was held a minute at a gate that never opened")
	}
}

// A registration is synced once it has handled the cache as it stood when
// it was added: the first list's events for an early one, the replay for a
// late one; not before.
func TestRegistrationHasSynced(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		for i := range 5 {
			s.put(cm("ns", fmt.Sprintf("o%d", i)))
		}
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		gate := newGate()
		var early atomic.Int32
		earlyReg := inf.AddHandler(func(e cmEvent) {
			if e.Type == Added {
				gate.wait(t)
				early.Add(1)
			}
		})
		if earlyReg.HasSynced() {
			t.Fatal("synced before the informer listed")
		}
		inf.Start()
		defer inf.Stop()
		defer gate.open() // before Stop, which waits for the handlers
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		if earlyReg.HasSynced() {
			t.Fatal("synced before handling the first list's events")
		}
		gate.open()
		synctest.Wait()
		if !earlyReg.HasSynced() || early.Load() != 5 {
			t.Fatalf("after the first list's 5 events (%d handled): HasSynced %v", early.Load(), earlyReg.HasSynced())
		}

		block := newGate()
		defer block.open()
		var late atomic.Int32
		lateReg := inf.AddHandler(func(e cmEvent) {
			block.wait(t)
			late.Add(1)
		})
		synctest.Wait()
		if lateReg.HasSynced() {
			t.Fatal("a late registration synced before its replay was handled")
		}
		if d := lateReg.OldestPending(); d != 0 {
			// fake time has not moved: the replay was queued just now
			t.Fatalf("OldestPending %v right after the replay was queued", d)
		}
		time.Sleep(3 * time.Second)
		if d := lateReg.OldestPending(); d < 3*time.Second {
			t.Fatalf("OldestPending %v, want the replay's 3 s", d)
		}
		block.open()
		synctest.Wait()
		if !lateReg.HasSynced() || late.Load() != 5 || lateReg.OldestPending() != 0 {
			t.Fatalf("after the replay (%d handled): HasSynced %v, oldest %v", late.Load(), lateReg.HasSynced(), lateReg.OldestPending())
		}
	})
}

// A handler may remove itself and may stop its informer: neither waits
// for the handler's own call.
func TestHandlerRemovesItselfAndStopsItsInformer(t *testing.T) {
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	var reg *Registration
	var calls atomic.Int32
	returned := make(chan struct{})
	regCh := make(chan *Registration, 1)
	reg = inf.AddHandler(func(e cmEvent) {
		if e.Type != Added {
			return
		}
		calls.Add(1)
		me := <-regCh
		inf.RemoveEventHandler(me)
		inf.Stop()
		close(returned)
	})
	regCh <- reg
	s.put(cm("ns", "a"))
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("RemoveEventHandler or Stop from a handler deadlocked")
	}
	<-inf.RequestStop() // stopped: closed
	if calls.Load() != 1 {
		t.Fatalf("%d calls", calls.Load())
	}
}

// A handler that removes another registration is a caller like any other:
// RemoveEventHandler returns only once that registration's call in
// progress has ended. Only a handler's own registration is exempt.
func TestHandlerRemovingAnotherWaitsForItsCall(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		g := newGate()
		release, unblock := g.ch, g.open
		defer func() {
			unblock()
			inf.Stop()
		}()
		inf.Start()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		var otherCalls atomic.Int32
		other, _ := inf.AddEventHandler(Added, func(e cmEvent) {
			otherCalls.Add(1)
			if e.Object.Name == "b" {
				<-release
			}
		})
		removed := make(chan struct{})
		inf.AddEventHandler(Added, func(e cmEvent) {
			if e.Object.Name == "a" {
				inf.RemoveEventHandler(other)
				close(removed)
			}
		})
		s.put(cm("ns", "b"))
		synctest.Wait() // other is in its call for b
		s.put(cm("ns", "a"))
		synctest.Wait()
		select {
		case <-removed:
			t.Fatal("RemoveEventHandler from a handler returned while the registration it removed was in a call")
		default:
		}
		unblock()
		synctest.Wait()
		select {
		case <-removed:
		default:
			t.Fatal("RemoveEventHandler from a handler did not return once the other call ended")
		}
		if n := otherCalls.Load(); n != 1 {
			t.Fatalf("the removed registration was called %d times, want once (a was dropped)", n)
		}
	})
}

// A handler that has a goroutine of its own remove its registration does
// not remove itself: that goroutine waits, like any caller, until the
// handler's call has ended.
func TestHandlerRemovalHandedToAGoroutineWaits(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		defer inf.Stop()
		inf.Start()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		regCh := make(chan *Registration, 1)
		release, removed := make(chan struct{}), make(chan struct{})
		reg, _ := inf.AddEventHandler(Added, func(e cmEvent) {
			me := <-regCh
			go func() {
				inf.RemoveEventHandler(me)
				close(removed)
			}()
			<-release
		})
		regCh <- reg
		s.put(cm("ns", "a"))
		synctest.Wait()
		select {
		case <-removed:
			t.Fatal("RemoveEventHandler from a goroutine the handler started returned during the handler's call")
		default:
		}
		close(release)
		synctest.Wait()
		select {
		case <-removed:
		default:
			t.Fatal("RemoveEventHandler did not return once the handler's call ended")
		}
	})
}

// A handler that stops another informer is a caller like any other: Stop
// waits until that informer's handler calls have ended. Only a handler's
// own informer is exempt.
func TestHandlerStoppingAnotherInformerWaitsForIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		x := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		y := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		g := newGate()
		release, unblock := g.ch, g.open
		defer func() {
			unblock()
			x.Stop()
			y.Stop()
		}()
		x.Start()
		y.Start()
		if err := x.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		if err := y.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		y.AddEventHandler(Added, func(e cmEvent) {
			if e.Object.Name == "b" {
				<-release
			}
		})
		stopped := make(chan struct{})
		x.AddEventHandler(Added, func(e cmEvent) {
			if e.Object.Name == "a" {
				y.Stop()
				close(stopped)
			}
		})
		s.put(cm("ns", "b"))
		synctest.Wait() // y's handler is in its call for b
		s.put(cm("ns", "a"))
		synctest.Wait()
		select {
		case <-stopped:
			t.Fatal("Stop from another informer's handler returned while the stopped informer's handler was in a call")
		default:
		}
		unblock()
		synctest.Wait()
		select {
		case <-stopped:
		default:
			t.Fatal("Stop from another informer's handler did not return once the call ended")
		}
		if y.isRunning() {
			t.Fatal("y runs after its Stop returned")
		}
	})
}

// WaitForResourceVersion returns once the cache holds the version, at once
// for one already reached, and with ctx's error otherwise.
func TestWaitForResourceVersion(t *testing.T) {
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	o := s.put(cm("ns", "a", "v", "1"))
	if err := inf.WaitForResourceVersion(bounded(t), o.ResourceVersion); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().GetByKey("ns/a"); got == nil || got.ResourceVersion != o.ResourceVersion {
		t.Fatalf("cache after the wait: %v", got)
	}
	if err := inf.WaitForResourceVersion(bounded(t), "1"); err != nil {
		t.Fatalf("an old version: %v", err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	if err := inf.WaitForResourceVersion(ctx, "99999"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a future version: %v", err)
	}
	if err := inf.WaitForResourceVersion(bounded(t), "abc"); err == nil {
		t.Fatal("a malformed version was accepted")
	}
	if n := inf.status.Waiters(); n != 0 {
		t.Fatalf("%d waiters left behind", n)
	}
}

// forbiddenAfter lists and watches normally until revoked, then answers
// 403 to every list and watch, as a server does when RBAC is revoked.
type forbiddenAfter struct {
	*fakeServer
	revoked atomic.Bool
}

func (f *forbiddenAfter) List(ctx context.Context, o metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if f.revoked.Load() {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("revoked"))
	}
	return f.fakeServer.List(ctx, o)
}

func (f *forbiddenAfter) Watch(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
	if f.revoked.Load() {
		return nil, apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New("revoked"))
	}
	return f.fakeServer.Watch(ctx, o)
}

// LastError tells an informer that lost its permission after syncing, and
// clears once it works again.
func TestLastErrorAfterSync(t *testing.T) {
	f := &forbiddenAfter{fakeServer: newFakeServer()}
	inf, _ := startInformer(t, f, &Options[*corev1.ConfigMap]{DisableStreamingList: true})
	if err, _ := inf.LastError(); err != nil {
		t.Fatalf("LastError after sync: %v", err)
	}
	before := time.Now()
	f.revoked.Store(true)
	f.closeWatches() // the next watch is refused
	eventually(t, "a persistent error", func() bool { err, _ := inf.LastError(); return apierrors.IsForbidden(err) })
	err, since := inf.LastError()
	if since.Before(before) || !apierrors.IsForbidden(err) {
		t.Fatalf("LastError = %v since %v", err, since)
	}
	f.revoked.Store(false)
	eventually(t, "recovered", func() bool { err, _ := inf.LastError(); return err == nil })
}

// Indexes can be added before the informer starts and while it runs; an
// index added while it runs holds every cached object and follows later
// changes.
func TestAddIndexers(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	byApp := func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} }
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp}); err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp}); err == nil {
		t.Fatal("a second index named app was accepted")
	}
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().ByIndex("app", "web"); len(got) != 1 {
		t.Fatalf("ByIndex(app, web) = %v", got)
	}
	byName := func(o *corev1.ConfigMap) []string { return []string{o.Name} }
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"name": byName, "app": byApp}); err == nil || !strings.Contains(err.Error(), `"app"`) {
		t.Fatalf("AddIndexers with an existing name after start: %v", err)
	}
	if _, err := inf.Cache().ByIndex("name", "a"); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("a refused AddIndexers added an index: %v", err)
	}
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"name": byName}); err != nil {
		t.Fatalf("AddIndexers after start: %v", err)
	}
	if got, _ := inf.Cache().ByIndex("name", "a"); len(got) != 1 {
		t.Fatalf("ByIndex(name, a) after adding it = %v", got)
	}
	s.put(cm("ns", "b", "app", "web"))
	eventually(t, "b in the new index", func() bool { got, _ := inf.Cache().ByIndex("name", "b"); return len(got) == 1 })
	if vals, err := inf.Cache().IndexValues("name"); err != nil || len(vals) != 2 {
		t.Fatalf("IndexValues(name) = %v, %v", vals, err)
	}
	if _, err := inf.Cache().IndexValues("nope"); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("IndexValues(nope): %v", err)
	}
	if got := inf.Cache().Indexers(); len(got) != 3 || got["name"] == nil || got[IndexNamespace] == nil {
		t.Fatalf("Indexers() = %v", got)
	}
}

// An index added while the informer writes is exact: every object is in
// it under its current value, whatever the interleaving of the add with
// the writes (run with -race).
func TestAddIndexersWhileWriting(t *testing.T) {
	s := newFakeServer()
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	byV := func(o *corev1.ConfigMap) []string { return []string{o.Labels["v"]} }
	done := make(chan struct{})
	go func() {
		defer close(done)
		for i := range 300 {
			s.put(cm("ns", fmt.Sprintf("o%d", i%40), "v", fmt.Sprint(i)))
		}
	}()
	for i := range 20 {
		if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{fmt.Sprintf("v%d", i): byV}); err != nil {
			t.Fatal(err)
		}
	}
	<-done
	want := s.state()
	eventually(t, "cache caught up", func() bool { return equalMaps(cacheState(inf.Cache()), want) })
	for i := range 20 {
		name := fmt.Sprintf("v%d", i)
		for _, o := range inf.Cache().List() {
			keys, err := inf.Cache().IndexKeys(name, o.Labels["v"])
			if err != nil || len(keys) != 1 || keys[0] != "ns/"+o.Name {
				t.Fatalf("index %s, value %s: keys %v, %v", name, o.Labels["v"], keys, err)
			}
		}
		if vals, _ := inf.Cache().IndexValues(name); len(vals) != inf.Cache().Len() {
			t.Fatalf("index %s has %d values for %d objects: a stale value was left", name, len(vals), inf.Cache().Len())
		}
	}
}

// Registrations added while the first list completes all become synced:
// each is either marked by the list or finds the informer synced.
func TestHasSyncedAroundTheFirstList(t *testing.T) {
	for iter := range 20 {
		s := newFakeServer()
		for i := range 50 {
			s.put(cm("ns", fmt.Sprintf("o%d", i)))
		}
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		var regs []*Registration
		for !inf.HasSynced() {
			regs = append(regs, inf.AddHandler(func(cmEvent) {}))
		}
		regs = append(regs, inf.AddHandler(func(cmEvent) {}))
		eventually(t, fmt.Sprintf("iteration %d: %d registrations synced", iter, len(regs)), func() bool {
			for _, r := range regs {
				if !r.HasSynced() {
					return false
				}
			}
			return true
		})
		inf.Stop()
	}
}

// A handler that stops its informer and starts it again does not
// deadlock: the Start is ignored (the stop waits for that very handler).
func TestStopAndStartFromAHandler(t *testing.T) {
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	returned := make(chan struct{})
	inf.AddEventHandler(Added, func(e cmEvent) {
		if e.Object.Name == "restart" {
			inf.Stop()
			inf.Start()
			close(returned)
		}
	})
	s.put(cm("ns", "restart"))
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop and Start from a handler deadlocked")
	}
	<-inf.RequestStop()
}

// OldestPending counts the event being handled (a stuck handler shows its
// lag) and is 0 once the registration is removed; a removed registration
// counts as synced (no one waits for it forever).
func TestOldestPendingAndRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		reg := inf.AddHandler(func(e cmEvent) {
			if e.Type == Added {
				<-release
			}
		})
		s.put(cm("ns", "a"))
		synctest.Wait()
		time.Sleep(5 * time.Second)
		if p, d := reg.Pending(), reg.OldestPending(); p != 1 || d < 5*time.Second {
			t.Fatalf("a handler stuck on its only event: pending %d, oldest %v", p, d)
		}
		s.put(cm("ns", "b"))
		synctest.Wait()
		removed := make(chan struct{})
		go func() { inf.RemoveEventHandler(reg); close(removed) }()
		synctest.Wait()
		close(release)
		<-removed
		synctest.Wait()
		time.Sleep(time.Second)
		if d := reg.OldestPending(); d != 0 {
			t.Fatalf("OldestPending %v after removal", d)
		}
		if !reg.HasSynced() {
			t.Fatal("a removed registration never syncs")
		}
	})
}

// WaitForResourceVersion compares resourceVersions as numbers, not as
// strings: across a power of ten ("9" < "10") both when a call starts
// (already reached or not) and when the cache advances (waking a waiter).
func TestWaitForResourceVersionAcrossAPowerOfTen(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.rv = 7 // listed at 7; the next writes are at 8, 9 and 10
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		// expect checks, at the resourceVersion at, which versions are
		// reached at once and which a call waits for (a second, in vain).
		expect := func(at string, reached, future []string) {
			t.Helper()
			if inf.ResourceVersion() != at {
				t.Fatalf("resourceVersion %q, want %s", inf.ResourceVersion(), at)
			}
			for _, rv := range append(reached, future...) {
				ctx, cancel := context.WithTimeout(t.Context(), time.Second)
				err := inf.WaitForResourceVersion(ctx, rv)
				cancel()
				if want := slices.Contains(reached, rv); (err == nil) != want || err != nil && !errors.Is(err, context.DeadlineExceeded) {
					t.Errorf("WaitForResourceVersion(%s) at %s: %v, want reached %v", rv, at, err, want)
				}
			}
		}
		s.put(cm("ns", "a"))
		synctest.Wait()
		expect("8", []string{"7", "8"}, []string{"9", "10", "11"})
		ten := make(chan error, 1)
		go func() { ten <- inf.WaitForResourceVersion(t.Context(), "10") }()
		synctest.Wait()
		s.put(cm("ns", "b"))
		synctest.Wait()
		select {
		case err := <-ten:
			t.Errorf("a waiter for 10 returned (%v) when the cache reached 9", err)
			ten <- nil
		default:
		}
		expect("9", []string{"1", "8", "9"}, []string{"10", "11", "100"})
		s.put(cm("ns", "c"))
		synctest.Wait()
		select {
		case err := <-ten:
			if err != nil {
				t.Errorf("the waiter for 10: %v", err)
			}
		default:
			t.Errorf("the waiter for 10 still waits with the cache at %s", inf.ResourceVersion())
		}
		expect("10", []string{"2", "9", "10"}, []string{"11", "100"})
	})
}

// Once WaitForResourceVersion(rv) returns, the cache holds the change at
// rv: its resourceVersion is recorded after the cache is updated, not
// before. An index function, which runs as the writer updates the cache,
// holds the write up for a second of fake time: long enough for a call
// woken early to return and read the cache while the change is not in it.
func TestWaitForResourceVersionThenTheCacheHasIt(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		var armed atomic.Bool                     // the next indexing of ns/a holds the write up
		var release atomic.Pointer[chan struct{}] // closed by the test once it has read the cache
		hold := func(o *corev1.ConfigMap) []string {
			if o.Name == "a" && armed.CompareAndSwap(true, false) {
				select {
				case <-*release.Load():
				case <-time.After(time.Second):
				}
			}
			return nil
		}
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff,
			Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"hold": hold}})
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		for _, step := range []struct {
			what  string
			write func()
		}{
			{"create", func() { s.put(cm("ns", "a", "v", "1")) }},
			{"update", func() { s.put(cm("ns", "a", "v", "2")) }},
			{"delete", func() { s.del("ns", "a") }},
		} {
			ch := make(chan struct{})
			release.Store(&ch)
			armed.Store(true)
			step.write()
			rv := strconv.FormatInt(s.rv, 10) // the write's: the server is written only here
			if err := inf.WaitForResourceVersion(t.Context(), rv); err != nil {
				t.Fatal(err)
			}
			got, ok := inf.Cache().GetByKey("ns/a")
			close(ch)
			var at string
			if ok {
				at = got.ResourceVersion
			}
			if want := step.what != "delete"; ok != want || ok && at != rv {
				t.Errorf("%s: WaitForResourceVersion(%s) returned with ns/a cached %v (at %q), want %v at %s", step.what, rv, ok, at, want, rv)
			}
			synctest.Wait()
			if armed.Load() && !(compactAll && step.what == "delete") { // a compact cache keeps index values: none computed for a deletion
				t.Fatalf("%s: the index function was never called for ns/a: nothing was held up", step.what)
			}
		}
	})
}

// Resend queues, for one registration only, Modified (Old the same object,
// CauseResend) for every cached object, after what was queued before it.
func TestResend(t *testing.T) {
	s := newFakeServer()
	for _, n := range []string{"a", "b", "c"} {
		s.put(cm("ns", n))
	}
	inf, rec := startInformer(t, s, nil)
	other := &recorder{}
	inf.AddHandler(other.handle)
	addedOnly, err := inf.AddEventHandler(Added, func(cmEvent) {})
	if err != nil {
		t.Fatal(err)
	}
	reg := inf.AddHandler(rec.handle)
	if n := inf.Resend(addedOnly); n != 0 {
		t.Fatalf("Resend to a registration without Modified queued %d", n)
	}
	if n := inf.Resend(reg); n != 3 {
		t.Fatalf("Resend queued %d events, want 3", n)
	}
	eventually(t, "resent events", func() bool { return len(rec.lines(false, Modified)) == 3 })
	seen := map[string]bool{}
	var replayed int
	for _, e := range rec.all() {
		switch {
		case e.Type == Modified:
			if e.Cause != CauseResend || e.Old != e.Object || e.Key == "" {
				t.Fatalf("resent event %+v: want CauseResend and Old == Object", e)
			}
			if replayed < 3 {
				t.Fatalf("a resent event came before reg's replay was done")
			}
			seen[e.Key] = true
		case e.Type == Added && e.Cause == CauseReplay:
			replayed++
		}
	}
	if len(seen) != 3 {
		t.Fatalf("resent keys %v", seen)
	}
	if got := other.lines(false, Modified); len(got) != 0 {
		t.Fatalf("another registration got the resent events: %v", got)
	}
	inf.RemoveEventHandler(reg)
	if n := inf.Resend(reg); n != 0 {
		t.Fatalf("Resend to a removed registration queued %d", n)
	}
	if n := inf.Resend(nil); n != 0 {
		t.Fatalf("Resend(nil) queued %d", n)
	}
}

// Synced channels close when HasSynced becomes true: the informer's, a
// registration's added before the start, and one added after the sync;
// a removed registration's too.
func TestSyncedChannels(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	release := make(chan struct{})
	before := inf.AddHandler(func(cmEvent) { <-release })
	select {
	case <-inf.Synced():
		t.Fatal("Synced closed before the start")
	case <-before.Synced():
		t.Fatal("a registration's Synced closed before the start")
	default:
	}
	inf.Start()
	defer inf.Stop()
	select {
	case <-inf.Synced():
	case <-bounded(t).Done():
		t.Fatal("the informer's Synced did not close")
	}
	select {
	case <-before.Synced():
		t.Fatal("Synced closed while the handler still holds the first list's event")
	case <-time.After(20 * time.Millisecond):
	}
	close(release)
	select {
	case <-before.Synced():
	case <-bounded(t).Done():
		t.Fatal("the registration's Synced did not close")
	}
	after := inf.AddHandler(func(cmEvent) {})
	select {
	case <-after.Synced():
	case <-bounded(t).Done():
		t.Fatal("Synced of a registration added after the sync did not close")
	}
	stuck := make(chan struct{})
	removed := inf.AddHandler(func(cmEvent) { <-stuck })
	go func() { time.Sleep(10 * time.Millisecond); close(stuck) }()
	inf.RemoveEventHandler(removed)
	select {
	case <-removed.Synced():
	case <-bounded(t).Done():
		t.Fatal("a removed registration's Synced did not close")
	}
	var none *Registration
	if none.Synced() != nil {
		t.Fatal("a nil Registration's Synced is not nil")
	}
}

// SetTransform sets the Transform before the start, not after.
func TestSetTransform(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	mark := func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		o.Labels["seen"] = "yes"
		return o, nil
	}
	if err := inf.SetTransform(mark); err != nil {
		t.Fatal(err)
	}
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if o, ok := inf.Cache().GetByKey("ns/a"); !ok || o.Labels["seen"] != "yes" {
		t.Fatalf("cached %v, want the transformed object", o)
	}
	if err := inf.SetTransform(nil); !errors.Is(err, ErrStarted) {
		t.Fatalf("SetTransform after start: %v, want ErrStarted", err)
	}
}
