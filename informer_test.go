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
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestAddEventHandlerUnknownType(t *testing.T) {
	inf := New[*corev1.ConfigMap](newFakeServer(), nil)
	reg, err := inf.AddEventHandler("UPSERTED", func(cmEvent) {})
	if !errors.Is(err, ErrUnknownEventType) || reg != nil {
		t.Fatalf("AddEventHandler(UPSERTED) = %v, %v; want ErrUnknownEventType", reg, err)
	}
	if !strings.Contains(err.Error(), "UPSERTED") {
		t.Errorf("error %q does not name the bad type", err)
	}
	for _, typ := range []EventType{Added, Modified, Deleted, Bookmark, Error} {
		if _, err := inf.AddEventHandler(typ, func(cmEvent) {}); err != nil {
			t.Errorf("AddEventHandler(%s): %v", typ, err)
		}
	}
	// Removing unknown or nil registrations is a no-op.
	inf.RemoveEventHandler(nil)
	inf.RemoveEventHandler(&Registration{})
}

func TestEventsUpdateCache(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "before"))
	inf, rec := startInformer(t, s, nil)
	if got := rec.lines(false); strings.Join(got, ",") != "ADDED ns/before" {
		t.Fatalf("after sync: %v", got)
	}
	rec.reset()

	a := s.put(cm("ns", "a", "v", "1"))
	eventually(t, "a cached", func() bool { _, ok := inf.Cache().GetByKey("ns/a"); return ok })
	a2 := s.put(cm("ns", "a", "v", "2"))
	eventually(t, "a updated", func() bool {
		o, _ := inf.Cache().GetByKey("ns/a")
		return o != nil && o.Labels["v"] == "2"
	})
	s.del("ns", "a")
	eventually(t, "a deleted", func() bool { _, ok := inf.Cache().GetByKey("ns/a"); return !ok })
	eventually(t, "3 events", func() bool { return len(rec.all()) == 3 })

	ev := rec.all()
	if got := rec.lines(false); strings.Join(got, ",") != "ADDED ns/a,MODIFIED ns/a,DELETED ns/a" {
		t.Fatalf("events = %v", got)
	}
	if ev[1].Old.ResourceVersion != a.ResourceVersion || ev[1].Object.ResourceVersion != a2.ResourceVersion {
		t.Errorf("MODIFIED old/new rv = %s/%s, want %s/%s", ev[1].Old.ResourceVersion, ev[1].Object.ResourceVersion, a.ResourceVersion, a2.ResourceVersion)
	}
	if ev[2].Object.Name != "a" {
		t.Errorf("DELETED carries %v", ev[2].Object)
	}
	if inf.ResourceVersion() != strconv.FormatInt(s.rv, 10) {
		t.Errorf("ResourceVersion = %s, server at %d", inf.ResourceVersion(), s.rv)
	}
}

func TestBookmarkAdvancesResourceVersion(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf, rec := startInformer(t, s, nil)
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	_, watches := s.calls()
	if !watches[0].AllowWatchBookmarks {
		t.Fatal("watch did not ask for bookmarks")
	}
	// Advance the server without the informer seeing objects: a change
	// outside the selector is invisible, so use a raw bookmark at a new rv.
	s.mu.Lock()
	s.rv += 10
	s.mu.Unlock()
	rv := s.bookmark()
	eventually(t, "bookmark", func() bool { return inf.ResourceVersion() == rv })
	eventually(t, "bookmark event", func() bool { return len(rec.lines(false, Bookmark)) == 1 })
	if e := rec.all()[len(rec.all())-1]; e.Type != Bookmark || e.ResourceVersion != rv {
		t.Fatalf("last event = %+v", e)
	}
	if inf.Cache().Len() != 1 {
		t.Fatalf("bookmark changed the cache: %v", inf.Cache().ListKeys())
	}
	// A reconnect resumes from the bookmark's resourceVersion.
	s.closeWatches()
	eventually(t, "second watch", func() bool { _, w := s.counts(); return w == 2 })
	_, watches = s.calls()
	if got := watches[1].ResourceVersion; got != rv {
		t.Fatalf("resumed watch from %s, want bookmark's %s", got, rv)
	}
}

func TestRelistAfterExpiredDiffsCache(t *testing.T) {
	s := newFakeServer()
	for _, n := range []string{"keep", "change", "gone"} {
		s.put(cm("ns", n))
	}
	inf, rec := startInformer(t, s, nil)
	rec.reset()
	// Synced from the list, the watch may not be open yet: the 410 must
	// reach one.
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })

	// The server says 410 with nothing changed: re-list, no events at all.
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus})
	eventually(t, "re-list", func() bool { l, _ := s.counts(); return l == 2 })
	eventually(t, "watch again", func() bool { _, w := s.counts(); return w == 2 })
	// The handler's goroutine may not have taken the ERROR yet.
	eventually(t, "the ERROR event", func() bool { return len(rec.lines(false, Error)) > 0 })
	if got := rec.lines(true, Added, Modified, Deleted); len(got) != 0 {
		t.Fatalf("re-list of an unchanged server fired %v", got)
	}
	errs := rec.lines(false, Error)
	if len(errs) != 1 || !errors.Is(rec.all()[0].Err, ErrExpired) {
		t.Fatalf("want one ERROR event wrapping ErrExpired, got %v", rec.all())
	}

	// Stopped: changes, then compaction; restart gets 410 and re-lists.
	inf.Stop()
	rec.reset()
	s.put(cm("ns", "change", "v", "2"))
	s.del("ns", "gone")
	s.put(cm("ns", "new"))
	s.compact()
	inf.Start()
	eventually(t, "3 events", func() bool { return len(rec.lines(false, Added, Modified, Deleted)) == 3 })
	want := "ADDED ns/new,DELETED ns/gone,MODIFIED ns/change"
	if got := strings.Join(rec.lines(true, Added, Modified, Deleted), ","); got != want {
		t.Fatalf("events after 410 = %s, want %s", got, want)
	}
	if !equalMaps(cacheState(inf.Cache()), s.state()) {
		t.Fatalf("cache differs from server: %s", diffMaps(cacheState(inf.Cache()), s.state()))
	}
}

func TestTooLargeResourceVersionRelists(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	_, rec := startInformer(t, s, nil)
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 }) // else the error reaches no one
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 100, current: 5", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	s.sendRaw(watch.Event{Type: watch.Error, Object: &tooLarge.ErrStatus})
	eventually(t, "re-list", func() bool { l, _ := s.counts(); return l == 2 })
	eventually(t, "error event", func() bool { return len(rec.lines(false, Error)) == 1 })
	var e cmEvent
	for _, ev := range rec.all() {
		if ev.Type == Error {
			e = ev
		}
	}
	if !errors.Is(e.Err, ErrTooLargeResourceVersion) || !apierrors.IsTimeout(e.Err) {
		t.Fatalf("error = %v, want ErrTooLargeResourceVersion wrapping the 504", e.Err)
	}
}

func TestReconnectResumesWithoutRelist(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf, rec := startInformer(t, s, nil)
	rec.reset()
	for i := range 5 {
		eventually(t, "watch open", func() bool { _, w := s.counts(); return w == i+1 })
		s.closeWatches()
		// A change made while disconnected is replayed from history.
		s.put(cm("ns", fmt.Sprintf("while-closed-%d", i)))
	}
	eventually(t, "5 added", func() bool { return len(rec.lines(false, Added)) == 5 })
	eventually(t, "6 watches", func() bool { _, w := s.counts(); return w == 6 })
	if lists, _ := s.counts(); lists != 1 {
		t.Fatalf("reconnects re-listed: %d lists", lists)
	}
	if len(rec.lines(false, Error)) != 0 {
		t.Fatalf("a normal watch end fired errors: %v", rec.all())
	}
	if !equalMaps(cacheState(inf.Cache()), s.state()) {
		t.Fatal("cache differs from server")
	}
}

func TestWatchErrorResumesFromLastResourceVersion(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf, rec := startInformer(t, s, nil)
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	rv := inf.ResourceVersion()
	s.mu.Lock()
	s.watchErrs = []error{apierrors.NewServiceUnavailable("etcd is sad"), apierrors.NewInternalError(errors.New("boom"))}
	s.mu.Unlock()
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(errors.New("stream broke")).ErrStatus})
	eventually(t, "watch back", func() bool { _, w := s.counts(); return w == 4 && s.openWatches() == 1 })
	lists, _ := s.counts()
	if lists != 1 {
		t.Fatalf("non-410 errors re-listed (%d lists)", lists)
	}
	_, watchOpts := s.calls()
	for _, o := range watchOpts[1:] {
		if o.ResourceVersion != rv {
			t.Fatalf("watch resumed from %s, want %s", o.ResourceVersion, rv)
		}
	}
	eventually(t, "3 error events", func() bool { return len(rec.lines(false, Error)) == 3 })
	var got []bool
	for _, e := range rec.all() {
		if e.Type == Error {
			got = append(got, apierrors.IsServiceUnavailable(e.Err), apierrors.IsInternalError(e.Err))
		}
	}
	want := []bool{false, true, true, false, false, true}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("error classification %v, want %v (%v)", got, want, rec.all())
	}
}

func TestSelectorsReachListAndWatch(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "web", "app", "web"))
	s.put(cm("ns", "db", "app", "db"))
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{LabelSelector: "app=web", FieldSelector: "metadata.namespace=ns"})
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	listOpts, watchOpts := s.calls()
	for _, o := range append(listOpts, watchOpts...) {
		if o.LabelSelector != "app=web" || o.FieldSelector != "metadata.namespace=ns" {
			t.Fatalf("call without selectors: %+v", o)
		}
	}
	if keys := inf.Cache().ListKeys(); len(keys) != 1 || keys[0] != "ns/web" {
		t.Fatalf("cache = %v", keys)
	}
	rec.reset()
	s.put(cm("ns", "web", "app", "other")) // leaves the selector
	s.put(cm("ns", "db", "app", "web"))    // enters it
	eventually(t, "2 events", func() bool { return len(rec.all()) == 2 })
	if got := strings.Join(rec.lines(false), ","); got != "DELETED ns/web,ADDED ns/db" {
		t.Fatalf("events = %s", got)
	}
}

func TestPagedList(t *testing.T) {
	s := newFakeServer()
	for i := range 1201 {
		s.put(cm("ns", fmt.Sprintf("o%04d", i)))
	}
	inf, _ := startInformer(t, s, nil)
	if inf.Cache().Len() != 1201 {
		t.Fatalf("cached %d of 1201", inf.Cache().Len())
	}
	listOpts, _ := s.calls()
	if len(listOpts) != 3 {
		t.Fatalf("%d list calls, want 3 pages", len(listOpts))
	}
	for i, o := range listOpts {
		if o.Limit != 500 || (i == 0) != (o.Continue == "") {
			t.Fatalf("page %d options %+v", i, o)
		}
	}
	eventually(t, "watch", func() bool { return s.openWatches() == 1 })
	_, watchOpts := s.calls()
	if watchOpts[0].ResourceVersion != "1201" {
		t.Fatalf("watch from %s, want the list's 1201", watchOpts[0].ResourceVersion)
	}
}

func TestExpiredContinueFallsBackToFullList(t *testing.T) {
	s := newFakeServer()
	for i := range 30 {
		s.put(cm("ns", fmt.Sprintf("o%02d", i)))
	}
	s.expireContinue = true
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{PageSize: 10})
	if inf.Cache().Len() != 30 {
		t.Fatalf("cached %d of 30", inf.Cache().Len())
	}
	if n := len(rec.lines(false, Added)); n != 30 {
		t.Fatalf("%d ADDED events, want 30 (no duplicates from the abandoned page)", n)
	}
	listOpts, _ := s.calls()
	last := listOpts[len(listOpts)-1]
	if len(listOpts) != 3 || last.Limit != 0 || last.Continue != "" {
		t.Fatalf("list calls %+v; want page, expired page, one full list", listOpts)
	}
}

func TestWaitForSyncReturnsPersistentError(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	forbidden := apierrors.NewForbidden(cmResource, "", errors.New(`user "bob" cannot list configmaps`))
	s.listErrs = []error{forbidden, forbidden, forbidden}
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: Backoff{Initial: 50 * time.Millisecond, Max: 50 * time.Millisecond}})
	inf.Start()
	defer inf.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 5*time.Second)
	defer cancel()
	err := inf.WaitForSync(ctx)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "bob") {
		t.Fatalf("WaitForSync = %v, want the 403", err)
	}
	if inf.HasSynced() {
		t.Fatal("HasSynced after a failed list")
	}
	// The informer keeps retrying and syncs once allowed.
	eventually(t, "sync after retries", inf.HasSynced)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatalf("WaitForSync after recovery = %v", err)
	}
	if l, _ := s.counts(); l != 4 {
		t.Fatalf("%d lists, want 3 failures + 1", l)
	}
}

func TestWaitForSyncWaitsThroughTransientErrors(t *testing.T) {
	s := newFakeServer()
	s.listErrs = []error{apierrors.NewServiceUnavailable("starting"), errors.New("connection refused")}
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatalf("WaitForSync = %v; transient errors must not end it", err)
	}
	ctx, cancel := context.WithCancel(t.Context())
	cancel()
	inf2 := New[*corev1.ConfigMap](s, nil) // never started
	if err := inf2.WaitForSync(ctx); !errors.Is(err, context.Canceled) {
		t.Fatalf("WaitForSync on a cancelled ctx = %v", err)
	}
}

func TestStartStopRestartResumes(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	s.put(cm("ns", "b"))
	inf, rec := startInformer(t, s, nil)
	inf.Start() // no-op while running
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	inf.Stop()
	inf.Stop() // no-op when stopped
	eventually(t, "watch closed", func() bool { return s.openWatches() == 0 })
	if inf.Cache().Len() != 2 || !inf.HasSynced() {
		t.Fatal("Stop dropped the cache")
	}
	rvBefore := inf.ResourceVersion()
	rec.reset()
	s.put(cm("ns", "a", "v", "2"))
	s.del("ns", "b")
	s.put(cm("ns", "c"))
	inf.Start()
	eventually(t, "3 events", func() bool { return len(rec.all()) == 3 })
	if got := strings.Join(rec.lines(false), ","); got != "MODIFIED ns/a,DELETED ns/b,ADDED ns/c" {
		t.Fatalf("events after restart = %s", got)
	}
	listOpts, watchOpts := s.calls()
	if len(listOpts) != 1 || len(watchOpts) != 2 || watchOpts[1].ResourceVersion != rvBefore {
		t.Fatalf("restart: %d lists, %d watches, resumed from %q (want %s)", len(listOpts), len(watchOpts), watchOpts[1].ResourceVersion, rvBefore)
	}
	if err := inf.Run(t.Context()); !errors.Is(err, ErrRunning) {
		t.Fatalf("Run while running = %v", err)
	}
}

func TestRunStopsWithContext(t *testing.T) {
	s := newFakeServer()
	inf := New[*corev1.ConfigMap](s, nil)
	var calls atomic.Int32
	inf.AddHandler(func(cmEvent) { calls.Add(1) })
	ctx, cancel := context.WithCancel(t.Context())
	done := make(chan error)
	go func() { done <- inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("Run = %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("Run did not return after cancel")
	}
	// Stop after Run returned, and Run again.
	inf.Stop()
	ctx2, cancel2 := context.WithCancel(t.Context())
	_, before := s.counts()
	go func() { done <- inf.Run(ctx2) }()
	eventually(t, "second run's watch", func() bool { _, w := s.counts(); return w == before+1 })
	inf.Stop() // Stop also ends Run
	if err := <-done; err != nil {
		t.Fatalf("Run = %v", err)
	}
	cancel2()
}

func TestHandlerAddedAfterSyncGetsCachedObjectsFirst(t *testing.T) {
	s := newFakeServer()
	for i := range 20 {
		s.put(cm("ns", fmt.Sprintf("o%02d", i)))
	}
	inf, _ := startInformer(t, s, nil)
	// Keep a writer going while the handler is added.
	stop := make(chan struct{})
	var wg sync.WaitGroup
	wg.Add(1)
	go func() {
		defer wg.Done()
		for i := 0; ; i++ {
			select {
			case <-stop:
				return
			default:
			}
			s.put(cm("ns", fmt.Sprintf("o%02d", i%30), "i", strconv.Itoa(i)))
		}
	}()
	time.Sleep(5 * time.Millisecond)
	late := &recorder{}
	inf.AddHandler(late.handle)
	time.Sleep(5 * time.Millisecond)
	close(stop)
	wg.Wait()
	eventually(t, "caught up", func() bool { return equalMaps(cacheState(inf.Cache()), s.state()) })

	// Folding the late handler's events must give the cache: it saw every
	// object once (Added) and then every change after that, in order.
	eventually(t, "late handler caught up", func() bool {
		state, err := fold(late.all())
		return err == nil && equalMaps(state, s.state())
	})
	if _, err := fold(late.all()); err != nil {
		t.Fatal(err)
	}
}

// fold replays events into key -> resourceVersion, checking that they are
// consistent: no Added for a present key, no Modified or Deleted for an
// absent one, Old matching the previous state, versions only increasing.
func fold(events []cmEvent) (map[string]string, error) {
	state := map[string]string{}
	for i, e := range events {
		if e.Type == Bookmark || e.Type == Error {
			continue
		}
		key := MetaNamespaceKey(e.Object)
		prev, had := state[key]
		switch e.Type {
		case Added:
			if had {
				return nil, fmt.Errorf("event %d: ADDED %s already present at %s", i, key, prev)
			}
			state[key] = e.Object.ResourceVersion
		case Modified:
			if !had || e.Old == nil || e.Old.ResourceVersion != prev {
				return nil, fmt.Errorf("event %d: MODIFIED %s: had=%v prev=%s old=%v", i, key, had, prev, e.Old)
			}
			if rvLess(e.Object.ResourceVersion, prev) || e.Object.ResourceVersion == prev {
				return nil, fmt.Errorf("event %d: MODIFIED %s went from %s to %s", i, key, prev, e.Object.ResourceVersion)
			}
			state[key] = e.Object.ResourceVersion
		case Deleted:
			if !had {
				return nil, fmt.Errorf("event %d: DELETED %s not present", i, key)
			}
			delete(state, key)
		}
	}
	return state, nil
}

func rvLess(a, b string) bool {
	x, _ := strconv.ParseInt(a, 10, 64)
	y, _ := strconv.ParseInt(b, 10, 64)
	return x < y
}

func TestHandlerPanicIsRecovered(t *testing.T) {
	s := newFakeServer()
	inf, rec := startInformer(t, s, nil)
	var panicked atomic.Int32
	inf.AddEventHandler(Added, func(e cmEvent) {
		panicked.Add(1)
		panic("handler bug on " + e.Object.Name)
	})
	s.put(cm("ns", "a"))
	s.put(cm("ns", "b"))
	eventually(t, "both delivered", func() bool { return len(rec.lines(false, Added)) == 2 && panicked.Load() == 2 })
}

func TestRemoveEventHandlerStopsDelivery(t *testing.T) {
	s := newFakeServer()
	inf, all := startInformer(t, s, nil)
	rec := &recorder{}
	reg, _ := inf.AddEventHandler(Added, rec.handle)
	s.put(cm("ns", "a"))
	eventually(t, "a", func() bool { return len(rec.all()) == 1 })
	inf.RemoveEventHandler(reg)
	inf.RemoveEventHandler(reg) // twice: no-op
	s.put(cm("ns", "b"))
	eventually(t, "b seen by the other handler", func() bool { return len(all.lines(false, Added)) == 2 })
	time.Sleep(10 * time.Millisecond)
	if n := len(rec.all()); n != 1 {
		t.Fatalf("removed handler got %d events", n)
	}
}

func TestSlowHandlerDoesNotStallOthers(t *testing.T) {
	s := newFakeServer()
	inf, fast := startInformer(t, s, nil)
	release := make(chan struct{})
	var once sync.Once
	t.Cleanup(func() { once.Do(func() { close(release) }) })
	var slowSeen atomic.Int32
	reg := inf.AddHandler(func(e cmEvent) {
		<-release
		slowSeen.Add(1)
	})
	for i := range 100 {
		s.put(cm("ns", fmt.Sprintf("o%d", i)))
	}
	eventually(t, "fast handler has all", func() bool { return len(fast.lines(false, Added)) == 100 })
	if inf.Cache().Len() != 100 {
		t.Fatalf("cache stalled at %d", inf.Cache().Len())
	}
	if reg.Pending() < 99 {
		t.Fatalf("slow handler queue = %d, want ≥ 99", reg.Pending())
	}
	once.Do(func() { close(release) })
	eventually(t, "slow handler drains", func() bool { return slowSeen.Load() == 100 })
}

func TestTransform(t *testing.T) {
	withMF := func(name string) *corev1.ConfigMap {
		o := cm("ns", name)
		o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: "Apply"}}
		return o
	}
	t.Run("default strips managedFields", func(t *testing.T) {
		s := newFakeServer()
		s.put(withMF("listed"))
		inf, _ := startInformer(t, s, nil)
		s.put(withMF("watched"))
		eventually(t, "watched", func() bool { return inf.Cache().Len() == 2 })
		for _, o := range inf.Cache().List() {
			if o.ManagedFields != nil {
				t.Fatalf("%s kept managedFields", o.Name)
			}
		}
	})
	t.Run("KeepManagedFields", func(t *testing.T) {
		s := newFakeServer()
		s.put(withMF("listed"))
		inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{KeepManagedFields: true})
		if o, _ := inf.Cache().GetByKey("ns/listed"); len(o.ManagedFields) != 1 {
			t.Fatal("managedFields dropped")
		}
	})
	t.Run("custom transform and its errors", func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "ok"))
		s.put(cm("ns", "bad"))
		inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Transform: func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			if strings.HasPrefix(o.Name, "bad") {
				return nil, errors.New("no bad names")
			}
			if o.Name == "nil" {
				return nil, nil
			}
			o.Data = map[string]string{"transformed": "yes"}
			return o, nil
		}})
		s.put(cm("ns", "bad2"))
		s.put(cm("ns", "nil"))
		s.put(cm("ns", "ok2"))
		eventually(t, "ok2", func() bool { return inf.Cache().Len() == 2 && len(rec.lines(false, Error)) == 3 })
		for _, o := range inf.Cache().List() {
			if o.Data["transformed"] != "yes" {
				t.Fatalf("%s not transformed", o.Name)
			}
		}
		var errs []string
		for _, e := range rec.all() {
			if e.Type == Error {
				if !errors.Is(e.Err, ErrTransform) {
					t.Fatalf("error %v does not wrap ErrTransform", e.Err)
				}
				errs = append(errs, e.Err.Error())
			}
		}
		if len(errs) != 3 || !strings.Contains(errs[0], "ns/bad") || !strings.Contains(errs[1], "ns/bad2") || !strings.Contains(errs[2], "ns/nil: it returned nil") {
			t.Fatalf("transform errors = %v", errs)
		}
	})
}

func TestGarbageEventsAreReportedAndSkipped(t *testing.T) {
	s := newFakeServer()
	inf, rec := startInformer(t, s, nil)
	eventually(t, "watch", func() bool { return s.openWatches() == 1 })
	s.sendRaw(watch.Event{Type: "EXPLODED", Object: cm("ns", "x")})
	s.sendRaw(watch.Event{Type: watch.Added, Object: &corev1.Secret{}})
	s.sendRaw(watch.Event{Type: watch.Added, Object: (*corev1.ConfigMap)(nil)})
	s.sendRaw(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{}})
	s.put(cm("ns", "after"))
	eventually(t, "after", func() bool { _, ok := inf.Cache().GetByKey("ns/after"); return ok })
	eventually(t, "4 errors", func() bool { return len(rec.lines(false, Error)) == 4 })
	for _, e := range rec.all() {
		if e.Type == Error && !errors.Is(e.Err, ErrUnexpectedObject) {
			t.Fatalf("error %v is not ErrUnexpectedObject", e.Err)
		}
	}
	if l, w := s.counts(); l != 1 || w != 1 {
		t.Fatalf("garbage broke the watch: %d lists, %d watches", l, w)
	}
}

// nilLister returns a nil list and no error: garbage a real client never
// produces, which must still not crash the informer.
type nilLister struct{ *fakeServer }

func (nilLister) List(context.Context, metav1.ListOptions) (*corev1.ConfigMapList, error) {
	return nil, nil
}

func TestNilListIsAnError(t *testing.T) {
	inf := New[*corev1.ConfigMap](nilLister{newFakeServer()}, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	rec := &recorder{}
	inf.AddEventHandler(Error, rec.handle)
	inf.Start()
	defer inf.Stop()
	eventually(t, "error", func() bool { return len(rec.all()) > 0 })
	if !errors.Is(rec.all()[0].Err, ErrUnexpectedObject) {
		t.Fatalf("err = %v", rec.all()[0].Err)
	}
}

// Objects of another type in a list (a misconfigured source) are reported.
type wrongList struct{ *fakeServer }

// It says it lists runtime.Object, so New cannot check its items.
func (w wrongList) List(context.Context, metav1.ListOptions) (runtime.Object, error) {
	l := &corev1.SecretList{Items: []corev1.Secret{{ObjectMeta: metav1.ObjectMeta{Name: "s"}}}}
	l.ResourceVersion = "1"
	return l, nil
}

func TestWrongListItemTypeIsReported(t *testing.T) {
	inf := New[*corev1.ConfigMap](wrongList{newFakeServer()}, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	rec := &recorder{}
	inf.AddEventHandler(Error, rec.handle)
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "error", func() bool { return len(rec.all()) > 0 })
	if err := rec.all()[0].Err; !errors.Is(err, ErrUnexpectedObject) || !strings.Contains(err.Error(), "*v1.Secret") {
		t.Fatalf("err = %v", err)
	}
}

// secretsLister lists Secrets, by its type.
type secretsLister struct{ *fakeServer }

func (secretsLister) List(context.Context, metav1.ListOptions) (*corev1.SecretList, error) {
	return &corev1.SecretList{}, nil
}

// A client whose list type says its items are not T is caught at New,
// with a message that names both.
func TestNewCatchesAMismatchedClient(t *testing.T) {
	defer func() {
		r := recover()
		msg := fmt.Sprint(r)
		if r == nil || !strings.Contains(msg, "*v1.SecretList") || !strings.Contains(msg, "*v1.ConfigMap") {
			t.Fatalf("New over a Secrets client for ConfigMaps: recovered %v", r)
		}
	}()
	New[*corev1.ConfigMap](secretsLister{newFakeServer()}, nil)
}

// A re-list keeps the cached instance of every unchanged object and drops
// the new copy as soon as it is decoded, without transforming it again.
func TestRelistReusesUnchangedObjects(t *testing.T) {
	plainOnly(t)
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			s := newFakeServer()
			s.streaming = streaming
			for i := range 10 {
				s.put(cm("ns", fmt.Sprintf("o%d", i)))
			}
			var transforms atomic.Int32
			inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Transform: func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
				transforms.Add(1)
				return o, nil
			}})
			before, _ := inf.Cache().GetByKey("ns/o0")
			s.put(cm("ns", "o1", "v", "2"))
			eventually(t, "o1 updated", func() bool { o, _ := inf.Cache().GetByKey("ns/o1"); return o.Labels["v"] == "2" })
			transforms.Store(0)
			l0, _ := s.counts()
			l0 += streamCounts(s)
			s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
			// A change after the 410 arrives after (or within) the re-list:
			// once it is cached, the re-list is complete.
			s.put(cm("ns", "o2", "v", "3"))
			eventually(t, "re-list and o2", func() bool {
				l, _ := s.counts()
				o, _ := inf.Cache().GetByKey("ns/o2")
				return l+streamCounts(s) > l0 && o.Labels["v"] == "3"
			})
			if n := transforms.Load(); n != 1 {
				t.Fatalf("re-list and one change transformed %d objects, want only the changed one", n)
			}
			if after, _ := inf.Cache().GetByKey("ns/o0"); after != before {
				t.Fatal("re-list replaced an unchanged object's instance")
			}
		})
	}
}

func TestTypedNilObjectsInEventsAreReported(t *testing.T) {
	for _, streaming := range []bool{false, true} {
		t.Run(fmt.Sprintf("streaming=%v", streaming), func(t *testing.T) {
			s := newFakeServer()
			s.streaming = streaming
			inf, rec := startInformer(t, s, nil)
			// A streaming list ends before the plain watch opens: wait for
			// the watch that will receive the raw events.
			eventually(t, "watch", func() bool { _, w := s.counts(); return w == 1 && s.openWatches() == 1 })
			s.sendRaw(watch.Event{Type: watch.Bookmark, Object: (*corev1.ConfigMap)(nil)})
			s.sendRaw(watch.Event{Type: watch.Error, Object: (*metav1.Status)(nil)})
			s.sendRaw(watch.Event{Type: watch.Modified})
			s.put(cm("ns", "after"))
			eventually(t, "after", func() bool { _, ok := inf.Cache().GetByKey("ns/after"); return ok })
			eventually(t, "3 errors", func() bool { return len(rec.lines(false, Error)) == 3 })
		})
	}
}

// When the new state of a watched object fails to transform, the object
// leaves the cache (as a re-list would drop it) with a DELETED; a deletion
// always removes. The handler's whole event history, replayed from the
// start, is consistent and ends where the cache is.
func TestTransformFailureNeverLeavesStaleObjects(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	s.put(cm("ns", "b"))
	inf, rec := contractStart(t, s, &Options[*corev1.ConfigMap]{Transform: func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		if o.Labels["bad"] == "1" {
			return nil, errors.New("bad label")
		}
		return o, nil
	}})
	synced := len(rec.all())         // ADDED a, ADDED b
	s.put(cm("ns", "a", "bad", "1")) // cached a → fails: removed, DELETED
	s.put(cm("ns", "b", "bad", "1")) // then deleted while failing
	s.del("ns", "b")
	s.put(cm("ns", "after")) // delivered last: every event before it is in
	eventually(t, "ADDED ns/after", func() bool { return slices.Contains(rec.lines(false, Added), "ADDED ns/after") })
	var got []string
	for _, e := range rec.all()[synced:] {
		if e.Type == Added || e.Type == Modified || e.Type == Deleted {
			got = append(got, string(e.Type)+" "+MetaNamespaceKey(e.Object))
		}
	}
	if strings.Join(got, ",") != "DELETED ns/a,DELETED ns/b,ADDED ns/after" {
		t.Fatalf("events = %v", got)
	}
	state, err := fold(rec.all())
	if err != nil {
		t.Fatalf("fold: %v", err)
	}
	if want := cacheState(inf.Cache()); !equalMaps(state, want) {
		t.Fatalf("events fold to %v, cache holds %v", state, want)
	}
}

func TestStartRightAfterRunCancelIsNotLost(t *testing.T) {
	s := newFakeServer()
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	for range 20 {
		ctx, cancel := context.WithCancel(t.Context())
		done := make(chan error)
		go func() { done <- inf.Run(ctx) }()
		if err := inf.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		cancel()
		inf.Start() // while Run winds down
		<-done
		_, before := s.counts()
		s.closeWatches()
		eventually(t, "the started informer watches", func() bool { _, w := s.counts(); return w > before })
		inf.Stop()
	}
}

// A stream cut off in the middle of its initial events is retried as a
// streaming list, not taken for a server that cannot stream.
type cuttingServer struct {
	*fakeServer
	cuts *atomic.Int32
}

func (c cuttingServer) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.fakeServer.Watch(ctx, opts)
	if err == nil && opts.SendInitialEvents != nil && c.cuts.Add(1) == 1 {
		return &cutWatch{fw: w.(*fakeWatch)}, nil
	}
	return w, err
}

// cutWatch passes on only the first event of fw, then ends.
type cutWatch struct {
	fw  *fakeWatch
	out chan watch.Event
	o   sync.Once
}

func (c *cutWatch) Stop() { c.fw.Stop() }
func (c *cutWatch) ResultChan() <-chan watch.Event {
	c.o.Do(func() {
		c.out = make(chan watch.Event, 1)
		go func() {
			defer close(c.out)
			if ev, ok := <-c.fw.out; ok {
				c.out <- ev
			}
			c.fw.Stop()
			for range c.fw.out {
			}
		}()
	})
	return c.out
}

func TestStreamCutMidListKeepsStreaming(t *testing.T) {
	s := newFakeServer()
	s.streaming = true
	for i := range 5 {
		s.put(cm("ns", fmt.Sprintf("o%d", i)))
	}
	cuts := &atomic.Int32{}
	inf, _ := startInformer(t, cuttingServer{s, cuts}, nil)
	if inf.Cache().Len() != 5 {
		t.Fatalf("cached %d of 5", inf.Cache().Len())
	}
	if l, _ := s.counts(); l != 0 || streamCounts(s) != 2 {
		t.Fatalf("%d paged lists, %d streams: want the cut stream retried as a stream", l, streamCounts(s))
	}
}
