package kinformer

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// A re-list diff of 20,000 objects is queued after the swap, outside the
// cache's lock: a reader (a handler calling GetByKey) is not held up for the
// whole diff. The test stalls the queueing midway by holding one
// listener's queue lock; a read must still return. (When the diff was
// queued under the cache's write lock, the read waited until the end.)
func TestReaderNotBlockedByRelistDiff(t *testing.T) {
	const n = 20000
	c := newCache[*corev1.ConfigMap](nil, nil)
	w, events := newTestWriter(c)
	gen := func(rv string) map[string]*corev1.ConfigMap {
		m := make(map[string]*corev1.ConfigMap, n)
		for i := range n {
			o := cm("ns", fmt.Sprintf("o%05d", i))
			o.ResourceVersion = rv
			m[MetaNamespaceKey(o)] = o
		}
		return m
	}
	w.replace(plainAll(gen("1")), "1", nil)
	events() // the first list's Added
	var l *listener[*corev1.ConfigMap]
	for _, x := range w.disp.listeners {
		l = x
	}
	l.mu.Lock() // the queueing of the next diff stalls at its first event
	replaced := make(chan struct{})
	go func() {
		defer close(replaced)
		w.replace(plainAll(gen("2")), "2", nil) // every object modified: 20,000 events
	}()
	read := make(chan *corev1.ConfigMap)
	go func() {
		for {
			if o, _ := c.GetByKey("ns/o00000"); o.ResourceVersion == "2" {
				read <- o
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case <-read:
	case <-time.After(30 * time.Second):
		l.mu.Unlock()
		t.Fatal("GetByKey blocked while the re-list's events were being queued")
	}
	select {
	case <-replaced:
		t.Fatal("the diff was queued while a listener's queue was locked")
	default:
	}
	l.mu.Unlock()
	<-replaced
	if got := l.pending(); got != n {
		t.Fatalf("%d events queued, want %d MODIFIED", got, n)
	}
}

// An IndexFunc may read the cache: index values are computed outside its
// lock, for watch events and re-lists alike. (What it returns must still
// depend only on its object.)
func TestIndexFuncMayReadTheCache(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	var inf *Informer[*corev1.ConfigMap]
	var calls atomic.Int32
	var seen atomic.Int64
	byPeers := func(o *corev1.ConfigMap) []string {
		calls.Add(1)
		seen.Store(int64(inf.Cache().Len())) // reads the cache while it is written
		return []string{o.Name[:1]}
	}
	inf = New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff,
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"peers": byPeers}})
	done := make(chan struct{})
	go func() {
		defer close(done)
		inf.Start()
		ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
		defer cancel()
		if err := inf.WaitForSync(ctx); err != nil {
			t.Error(err)
			return
		}
		s.put(cm("ns", "b"))
		s.del("ns", "a")
		for ctx.Err() == nil && (inf.Cache().Len() != 1 || inf.ResourceVersion() != s.bookmark()) {
			time.Sleep(time.Millisecond)
		}
		s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
		for ctx.Err() == nil {
			if l, _ := s.counts(); l == 2 && inf.HasSynced() {
				break
			}
			time.Sleep(time.Millisecond)
		}
	}()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		t.Fatal("deadlock: an IndexFunc reading the cache blocked the informer")
	}
	inf.Stop()
	want := int32(3)
	if compactAll {
		want = 2 // index values kept: none computed for the deletion
	}
	if calls.Load() < want {
		t.Fatalf("IndexFunc called %d times", calls.Load())
	}
	if got, _ := inf.Cache().ByIndex("peers", "b"); len(got) != 1 || got[0].Name != "b" {
		t.Fatalf("ByIndex(peers, b) = %v", got)
	}
	if got, _ := inf.Cache().ByIndex("peers", "a"); len(got) != 0 {
		t.Fatalf("ByIndex(peers, a) = %v after a was deleted", got)
	}
}

// A handler may ask its own informer to stop (RequestStop) without
// deadlocking; Stop from outside waits until it has stopped.
func TestRequestStopFromAHandler(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	returned := make(chan (<-chan struct{}), 1)
	inf.AddEventHandler(Added, func(e cmEvent) {
		if e.Object.Name == "stop" {
			returned <- inf.RequestStop()
		}
	})
	ran := make(chan struct{})
	go func() {
		defer close(ran)
		inf.Run(context.Background())
	}()
	s.put(cm("ns", "stop"))
	var stopped <-chan struct{}
	select {
	case stopped = <-returned:
	case <-time.After(20 * time.Second):
		t.Fatal("RequestStop from a handler did not return")
	}
	select {
	case <-ran:
	case <-time.After(20 * time.Second):
		t.Fatal("Run did not return after RequestStop")
	}
	select {
	case <-stopped:
	default:
		t.Fatal("RequestStop's channel is open after Run returned")
	}
	select {
	case <-inf.RequestStop(): // stopped: closed at once
	default:
		t.Fatal("RequestStop on a stopped informer returned an open channel")
	}
}

// slowLister takes listTime (fake time) for every list.
type slowLister struct {
	*fakeServer
	listTime time.Duration
}

func (s slowLister) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	time.Sleep(s.listTime)
	return s.fakeServer.List(ctx, opts)
}

// A ResyncPeriod shorter than a list takes does not leave the informer
// listing all the time: the next resync comes no sooner than twice the
// last list took, after it ended, so the watch gets most of the time.
func TestShortResyncDoesNotStarveTheWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](slowLister{s, 3 * time.Second}, &Options[*corev1.ConfigMap]{
			ResyncPeriod: 100 * time.Millisecond, DisableStreamingList: true, Backoff: fastBackoff})
		inf.Start()
		defer inf.Stop()
		time.Sleep(90 * time.Second)
		synctest.Wait()
		lists, watches := s.counts()
		// 3 s listing, then at least 6 s watching: at most 10 lists in 90 s
		// (without the floor: one every 3.1 s, 29).
		if lists > 10 || watches < lists-1 {
			t.Fatalf("%d lists and %d watches in 90 s with a 100 ms resync and 3 s lists", lists, watches)
		}
	})
}

// Events say where they came from and carry their key.
func TestEventCauseAndKey(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "listed"))
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Transform: func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		if o.Labels["bad"] == "yes" {
			return nil, fmt.Errorf("refused")
		}
		return o, nil
	}})
	s.put(cm("ns", "watched"))
	eventually(t, "watched", func() bool { _, ok := inf.Cache().GetByKey("ns/watched"); return ok })
	late := &recorder{}
	inf.AddEventHandler(Added, late.handle)
	eventually(t, "replay", func() bool { return len(late.all()) == 2 })
	s.put(cm("ns", "watched", "bad", "yes")) // fails to transform: dropped
	eventually(t, "dropped", func() bool { _, ok := inf.Cache().GetByKey("ns/watched"); return !ok })
	inf.Stop()
	s.put(cm("ns", "relisted"))
	s.compact()
	inf.Start()
	// The handler, not only the cache: events reach it after the cache.
	eventually(t, "re-listed", func() bool {
		for _, e := range rec.all() {
			if e.Key == "ns/relisted" {
				return true
			}
		}
		return false
	})

	type ck struct {
		typ   EventType
		key   string
		cause Cause
	}
	var got []ck
	for _, e := range rec.all() {
		if e.Type != Error && e.Type != Bookmark {
			got = append(got, ck{e.Type, e.Key, e.Cause})
		}
	}
	want := []ck{{Added, "ns/listed", CauseList}, {Added, "ns/watched", CauseWatch},
		{Deleted, "ns/watched", CauseTransform}, {Added, "ns/relisted", CauseRelist}}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Fatalf("events (type, key, cause):\n got %v\nwant %v", got, want)
	}
	for _, e := range late.all()[:2] {
		if e.Cause != CauseReplay || e.Key != MetaNamespaceKey(e.Object) {
			t.Fatalf("replayed event %s %q cause %v", e.Type, e.Key, e.Cause)
		}
	}
}

// Without a Logger, a handler's panic is still logged, at error level, to
// slog.Default(): never silently lost.
func TestHandlerPanicLoggedByDefault(t *testing.T) {
	var buf syncBuffer
	prev := slog.Default()
	slog.SetDefault(slog.New(slog.NewTextHandler(&buf, nil)))
	defer slog.SetDefault(prev)
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	called := make(chan struct{})
	inf.AddEventHandler(Added, func(cmEvent) {
		defer close(called)
		panic("handler bug")
	})
	s.put(cm("ns", "a"))
	<-called
	eventually(t, "the panic logged", func() bool { return strings.Contains(buf.String(), "handler bug") })
	if out := buf.String(); !strings.Contains(out, "level=ERROR") || !strings.Contains(out, "panicked") || !strings.Contains(out, "ns/a") {
		t.Fatalf("log: %s", out)
	}
}

// Per-type callbacks of one registration run in order: folding state from
// them under churn gives the server's state (no phantom left by a Deleted
// run before its Added).
func TestHandlerFuncsFoldInOrder(t *testing.T) {
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	folded := map[string]string{} // used by the registration's one goroutine
	var mismatches atomic.Int32
	done := make(chan struct{})
	inf.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{
		Added: func(e cmEvent) {
			if _, ok := folded[e.Key]; ok {
				mismatches.Add(1)
			}
			folded[e.Key] = e.Object.ResourceVersion
		},
		Modified: func(e cmEvent) {
			if _, ok := folded[e.Key]; !ok {
				mismatches.Add(1)
			}
			folded[e.Key] = e.Object.ResourceVersion
		},
		Deleted: func(e cmEvent) {
			if _, ok := folded[e.Key]; !ok {
				mismatches.Add(1)
			}
			delete(folded, e.Key)
		},
		Bookmark: func(e cmEvent) {
			if e.ResourceVersion == "end" {
				close(done)
			}
		},
	})
	exists := map[string]bool{}
	for i := range 300 {
		name := fmt.Sprintf("o%d", i%17)
		if i%3 == 2 && exists[name] {
			s.del("ns", name)
			exists[name] = false
		} else {
			s.put(cm("ns", name, "i", fmt.Sprint(i)))
			exists[name] = true
		}
	}
	eventually(t, "caught up", func() bool { return inf.ResourceVersion() == s.bookmark() })
	s.sendRaw(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: "end"}}})
	<-done
	if mismatches.Load() != 0 {
		t.Fatalf("%d events out of order for the fold", mismatches.Load())
	}
	if fmt.Sprint(folded) != fmt.Sprint(s.state()) {
		t.Fatalf("folded %v\nserver %v", folded, s.state())
	}
}

// syncBuffer is a bytes.Buffer safe for concurrent use.
type syncBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// A DELETED the server sent is the server's, with its cause, even when the
// object's final state fails the Transform: only a modification that fails
// is the informer's own doing (CauseTransform).
func TestServerDeleteIsNotCauseTransform(t *testing.T) {
	c := newCache[*corev1.ConfigMap](nil, nil)
	w, events := newTestWriter(c)
	a := cm("ns", "a")
	a.ResourceVersion = "1"
	w.replace(plainAll(map[string]*corev1.ConfigMap{"ns/a": a}), "1", nil)
	events()
	w.transform = func(*corev1.ConfigMap) (*corev1.ConfigMap, error) { return nil, fmt.Errorf("refused") }
	gone := cm("ns", "a")
	gone.ResourceVersion = "2"
	w.apply(Deleted, arrivalOf(gone), w.prepare)
	var got []string
	for _, e := range events() {
		if e.Type != Error {
			got = append(got, fmt.Sprintf("%s %s %v rv=%s same=%v", e.Type, e.Key, e.Cause, e.ResourceVersion, e.Object == a))
		}
	}
	if want := "DELETED ns/a watch rv=2 same=true"; len(got) != 1 || got[0] != want {
		t.Fatalf("events %v, want [%s]", got, want)
	}
}

// anyItemsLister lists a metav1.List, whose items may be of any type: New
// cannot check them, so it does not refuse them.
type anyItemsLister struct{ *fakeServer }

func (anyItemsLister) List(context.Context, metav1.ListOptions) (*metav1.List, error) {
	return &metav1.List{}, nil
}

func TestNewAcceptsListsOfAnyItems(t *testing.T) {
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("New panicked over a *metav1.List client: %v", r)
		}
	}()
	New[*corev1.ConfigMap](anyItemsLister{newFakeServer()}, nil)
}

// A watch-list's end marker without a resourceVersion is recognised as the
// end marker (the list fails) rather than skipped as a broken bookmark.
func TestEndMarkerWithoutResourceVersion(t *testing.T) {
	end := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	c, err := check[*corev1.ConfigMap](watch.Event{Type: watch.Bookmark, Object: end})
	if err == nil || !c.endOfList {
		t.Fatalf("check = %+v, %v; want endOfList and an error", c, err)
	}
	end.ResourceVersion = "5"
	if c, err := check[*corev1.ConfigMap](watch.Event{Type: watch.Bookmark, Object: end}); err != nil || !c.endOfList || c.rv != "5" {
		t.Fatalf("check = %+v, %v", c, err)
	}
}

// A 410 on a watch that has delivered events re-lists at once: the server
// compacted past a healthy watch, and waiting would only widen the gap.
func TestExpiredAfterProgressRelistsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		startWatching(t, s, nil)
		s.put(cm("ns", "b")) // progress on the watch
		synctest.Wait()
		s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
		time.Sleep(time.Minute) // a backoff would be 45-60 minutes
		synctest.Wait()
		if lists, _ := s.counts(); lists != 2 {
			t.Fatalf("%d lists a minute after a 410 on a watch that made progress, want 2 (re-listed at once)", lists)
		}
	})
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Transform may modify the labels of its object: sharing comes after it,
// so no other object sees the change.
func TestSharingComesAfterTransform(t *testing.T) {
	plainOnly(t)
	s := newFakeServer()
	for _, name := range []string{"a", "b", "c"} {
		s.put(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Labels: map[string]string{"app": "web", "name": "x"}}})
	}
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Transform: func(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		if cm.Name == "a" {
			delete(cm.Labels, "name")
		}
		return cm, nil
	}})
	a, _ := inf.Cache().GetByKey("ns/a")
	b, _ := inf.Cache().GetByKey("ns/b")
	c, _ := inf.Cache().GetByKey("ns/c")
	if len(a.Labels) != 1 || len(b.Labels) != 2 || len(c.Labels) != 2 {
		t.Fatalf("labels: a %v, b %v, c %v", a.Labels, b.Labels, c.Labels)
	}
	if !sameMap(b.Labels, c.Labels) || sameMap(a.Labels, b.Labels) {
		t.Fatal("equal labels not shared, or different labels shared")
	}
}

// On a plain watch, an end marker without a resourceVersion is garbage:
// reported and skipped, and the watch goes on (no second watch, no
// re-list).
func TestEndMarkerWithoutResourceVersionOnAWatchIsSkipped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		var errs atomic.Int32
		inf := startWatching(t, s, func(inf *Informer[*corev1.ConfigMap]) {
			inf.AddEventHandler(Error, func(e cmEvent) {
				if errors.Is(e.Err, ErrUnexpectedObject) {
					errs.Add(1)
				}
			})
		})
		lists, watches := s.counts()
		s.sendRaw(watch.Event{Type: watch.Bookmark, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}})
		s.put(cm("ns", "b"))
		synctest.Wait()
		if _, ok := inf.Cache().GetByKey("ns/b"); !ok {
			t.Fatal("the write after the bad marker did not arrive on the same watch")
		}
		if l, w := s.counts(); l != lists || w != watches {
			t.Fatalf("lists %d → %d, watches %d → %d: the watch was dropped over a skippable event", lists, l, watches, w)
		}
		if errs.Load() != 1 {
			t.Fatalf("%d ErrUnexpectedObject events, want 1", errs.Load())
		}
	})
}

// startWatching starts, in a synctest bubble, an informer of s holding
// ns/a, with backoffs of an hour (a retry would be seen), registers what
// before adds, and returns once it is synced and watching; the test's end
// stops it.
func startWatching(t *testing.T, s *fakeServer, before func(*Informer[*corev1.ConfigMap])) *Informer[*corev1.ConfigMap] {
	t.Helper()
	s.put(cm("ns", "a"))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{
		Backoff: Backoff{Initial: time.Hour, Max: time.Hour}})
	if before != nil {
		before(inf)
	}
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return inf
}
