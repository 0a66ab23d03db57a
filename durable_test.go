package kinformer_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

// The durable cache's state machine over the in-memory server: restore,
// probe, catch-up, and what happens when any of them goes wrong. The real
// API server's behaviour is in integration/durable*_test.go.

type cmList = kinformertest.List[*corev1.ConfigMap]

// flakyLister fails the first fails lists, and counts lists by limit.
type flakyLister struct {
	*kinformertest.Server[*corev1.ConfigMap]
	mu     sync.Mutex
	fails  int
	limits []int64
}

func (f *flakyLister) List(ctx context.Context, opts metav1.ListOptions) (*cmList, error) {
	f.mu.Lock()
	f.limits = append(f.limits, opts.Limit)
	fail := f.fails > 0
	f.fails--
	f.mu.Unlock()
	if fail {
		return nil, errors.New("connection refused")
	}
	return f.Server.List(ctx, opts)
}

func (f *flakyLister) lists() []int64 {
	f.mu.Lock()
	defer f.mu.Unlock()
	return append([]int64(nil), f.limits...)
}

type eventLog struct {
	mu     sync.Mutex
	events []string
	errs   []error
}

func (l *eventLog) handle(e kinformer.Event[*corev1.ConfigMap]) {
	l.mu.Lock()
	defer l.mu.Unlock()
	switch e.Type {
	case kinformer.Error:
		l.errs = append(l.errs, e.Err)
	case kinformer.Bookmark:
	default:
		l.events = append(l.events, fmt.Sprintf("%s %s %s", e.Type, e.Key, e.Cause))
	}
}

func (l *eventLog) get() ([]string, []error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return append([]string(nil), l.events...), append([]error(nil), l.errs...)
}

func durableOpts(dir string) *kinformer.Options[*corev1.ConfigMap] {
	return &kinformer.Options[*corev1.ConfigMap]{
		StateDir: dir, StateKey: "in-memory configmaps", StateInterval: 5 * time.Millisecond,
		Backoff: kinformer.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond},
	}
}

func newCM(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}, Data: map[string]string{"k": name}}
}

func runDurable(t *testing.T, lw kinformer.ListerWatcher[*cmList], dir string) (*kinformer.Informer[*corev1.ConfigMap], *eventLog, *kinformer.Registration) {
	t.Helper()
	inf := kinformer.New[*corev1.ConfigMap](lw, durableOpts(dir))
	log := &eventLog{}
	reg := inf.AddHandler(log.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	return inf, log, reg
}

func waitSynced(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
}

// waitHandled waits until reg has handled every event up to the sync.
func waitHandled(t *testing.T, reg *kinformer.Registration) {
	t.Helper()
	deadline := time.Now().Add(5 * time.Second)
	for !reg.HasSynced() {
		if time.Now().After(deadline) {
			t.Fatal("the registration did not handle the events up to the sync")
		}
		time.Sleep(time.Millisecond)
	}
}

// changedWhileDown returns a server and a state directory that a first
// informer left with a, b and c: since then b is deleted, c updated and d
// added.
func changedWhileDown(t *testing.T) (*kinformertest.Server[*corev1.ConfigMap], string) {
	t.Helper()
	srv := kinformertest.NewServer(newCM("a"), newCM("b"), newCM("c"))
	dir := t.TempDir()
	first, _, _ := runDurable(t, srv, dir)
	waitSynced(t, first)
	first.Stop()
	srv.Delete(newCM("b"))
	srv.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Data: map[string]string{"k": "new"}})
	srv.Add(newCM("d"))
	return srv, dir
}

func sortedTail(events []string, from int) []string {
	tail := append([]string(nil), events[from:]...)
	sort.Strings(tail)
	return tail
}

func TestDurableRestoreThenCatchUp(t *testing.T) {
	srv, dir := changedWhileDown(t)

	// The probe fails twice: the informer restores nothing until the
	// probe works, and is not synced until the watch catches up.
	lw := &flakyLister{Server: srv, fails: 2}
	second, log, reg := runDurable(t, lw, dir)
	waitSynced(t, second)
	waitHandled(t, reg) // a registration added before Start syncs with the catch-up
	time.Sleep(50 * time.Millisecond)
	events, errs := log.get()
	want := []string{"ADDED ns/a restore", "ADDED ns/b restore", "ADDED ns/c restore"}
	if len(events) != 6 || fmt.Sprint(sortedTail(events[:3], 0)) != fmt.Sprint(want) {
		t.Fatalf("events: %v", events)
	}
	if got := fmt.Sprint(sortedTail(events, 3)); got != "[ADDED ns/d watch DELETED ns/b watch MODIFIED ns/c watch]" {
		t.Fatalf("changes after the restore: %s", got)
	}
	if got := fmt.Sprint(lw.lists()); got != "[1 1 1]" {
		t.Fatalf("lists (by limit): %s, want three one-object probes and no full list", got)
	}
	if len(errs) < 2 {
		t.Fatalf("the failed probes were not reported: %v", errs)
	}
	if second.ResourceVersion() != srv.ResourceVersion() {
		t.Fatalf("resourceVersion %s, server %s", second.ResourceVersion(), srv.ResourceVersion())
	}
	// Startup says what was restored, from where, at which version: the
	// file's, before the changes made while down.
	files, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
	if r := second.Startup().Restored; len(files) != 1 || r.Objects != 3 || r.File != files[0] || r.ResourceVersion == "" || r.ResourceVersion == srv.ResourceVersion() {
		t.Fatalf("Startup().Restored = %+v; want 3 objects from %q, at the version before the changes (now %s)", r, files, srv.ResourceVersion())
	}
}

func TestDurableRestoreAfterCompaction(t *testing.T) {
	srv := kinformertest.NewServer(newCM("a"), newCM("b"))
	dir := t.TempDir()
	first, _, _ := runDurable(t, srv, dir)
	waitSynced(t, first)
	first.Stop()
	srv.Delete(newCM("a"))
	srv.Add(newCM("c"))
	srv.Compact()
	second, log, reg := runDurable(t, srv, dir)
	waitSynced(t, second)
	waitHandled(t, reg)
	time.Sleep(50 * time.Millisecond) // room for any spurious event
	events, errs := log.get()
	if got := fmt.Sprint(sortedTail(events, 2)); len(events) != 4 || got != "[ADDED ns/c relist DELETED ns/a relist]" {
		t.Fatalf("events: %v", events)
	}
	var expired bool
	for _, err := range errs {
		expired = expired || errors.Is(err, kinformer.ErrExpired)
	}
	if !expired {
		t.Fatalf("no ErrExpired among %v", errs)
	}
}

// Stop and Start of one informer, then a new informer: the file follows the
// cache across runs (the second run does not restore again), and the new
// informer restores the latest state.
func TestDurableAcrossRunsOfOneInformer(t *testing.T) {
	srv := kinformertest.NewServer(newCM("a"))
	dir := t.TempDir()
	inf, log, _ := runDurable(t, srv, dir)
	waitSynced(t, inf)
	inf.Stop()
	srv.Add(newCM("b"))
	inf.Start()
	deadline := time.Now().Add(5 * time.Second)
	for inf.Cache().Len() != 2 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	srv.Delete(newCM("a"))
	for inf.Cache().Len() != 1 && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	for events, _ := log.get(); len(events) < 3 && time.Now().Before(deadline); events, _ = log.get() {
		time.Sleep(time.Millisecond) // handled, not only queued, before Stop
	}
	inf.Stop()
	if events, _ := log.get(); fmt.Sprint(events) != "[ADDED ns/a list ADDED ns/b watch DELETED ns/a watch]" {
		t.Fatalf("events of the first informer: %v", events)
	}
	next, log2, reg := runDurable(t, srv, dir)
	waitSynced(t, next)
	waitHandled(t, reg)
	if events, _ := log2.get(); fmt.Sprint(events) != "[ADDED ns/b restore]" {
		t.Fatalf("events of the next informer: %v", events)
	}
}

// Two informers of one identity at once: the second cannot have the file,
// says so, and works without it.
func TestDurableFileInUse(t *testing.T) {
	srv := kinformertest.NewServer(newCM("a"))
	dir := t.TempDir()
	first, _, _ := runDurable(t, srv, dir)
	waitSynced(t, first)
	second, log, reg := runDurable(t, srv, dir)
	waitSynced(t, second)
	waitHandled(t, reg)
	_, errs := log.get()
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) {
		t.Fatalf("errors: %v, want one ErrSnapshot", errs)
	}
	t.Log(errs[0])
	if second.Cache().Len() != 1 {
		t.Fatal("the second informer does not work without its file")
	}
}

// A client that cannot say what it watches, and no StateKey: StateDir is
// ignored, with an error saying why, and the informer works.
func TestDurableNeedsStateKey(t *testing.T) {
	srv := kinformertest.NewServer(newCM("a"))
	opts := durableOpts(t.TempDir())
	opts.StateKey = ""
	inf := kinformer.New[*corev1.ConfigMap](srv, opts)
	log := &eventLog{}
	reg := inf.AddHandler(log.handle)
	inf.Start()
	defer inf.Stop()
	waitSynced(t, inf)
	waitHandled(t, reg)
	_, errs := log.get()
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) {
		t.Fatalf("errors: %v, want one ErrSnapshot naming StateKey", errs)
	}
}

// heldLister passes lists through, and holds the events of every watch
// from a resourceVersion (the catch-up watch of a restored informer) until
// release is closed.
type heldLister struct {
	*kinformertest.Server[*corev1.ConfigMap]
	release chan struct{}
	opened  atomic.Int32 // watches held
}

func (h *heldLister) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := h.Server.Watch(ctx, opts)
	if err != nil || opts.ResourceVersion == "" || opts.SendInitialEvents != nil {
		return w, err
	}
	h.opened.Add(1)
	hw := &heldWatch{inner: w, out: make(chan watch.Event), stop: make(chan struct{})}
	go hw.forward(h.release)
	return hw, nil
}

type heldWatch struct {
	inner    watch.Interface
	out      chan watch.Event
	stop     chan struct{}
	stopOnce sync.Once
}

func (w *heldWatch) forward(release <-chan struct{}) {
	defer close(w.out)
	defer w.inner.Stop()
	select {
	case <-release:
	case <-w.stop:
		return
	}
	for ev := range w.inner.ResultChan() {
		select {
		case w.out <- ev:
		case <-w.stop:
			return
		}
	}
}

func (w *heldWatch) Stop()                          { w.stopOnce.Do(func() { close(w.stop) }) }
func (w *heldWatch) ResultChan() <-chan watch.Event { return w.out }

// A restored informer is synced only once its catch-up watch has brought
// the cache to the server's state at its start, not when the probe has
// learnt the resourceVersion to reach. The catch-up watch's events are
// held: in the bubble no time passes, so the silence rule cannot end the
// catch-up either, and WaitForSync must still be waiting.
func TestDurableNotSyncedBeforeTheCatchUp(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv, dir := changedWhileDown(t)
		atStart := serverState(srv)

		lw := &heldLister{Server: srv, release: make(chan struct{})}
		second, _, _ := runDurable(t, lw, dir)
		synced := make(chan error, 1)
		go func() { synced <- second.WaitForSync(t.Context()) }()
		synctest.Wait()
		if lw.opened.Load() != 1 {
			t.Fatalf("%d catch-up watches open, want 1 (its events held)", lw.opened.Load())
		}
		select {
		case err := <-synced:
			close(lw.release)
			t.Fatalf("WaitForSync returned (%v) before the catch-up watch delivered anything: cache %v, server at the start %v",
				err, cacheState(second), atStart)
		default:
		}
		if second.HasSynced() {
			t.Fatal("HasSynced before the catch-up watch delivered anything")
		}
		close(lw.release)
		if err := <-synced; err != nil {
			t.Fatalf("WaitForSync: %v", err)
		}
		if got := cacheState(second); !maps.Equal(got, atStart) {
			t.Fatalf("cache when WaitForSync returned: %v, want the server's state at the start %v", got, atStart)
		}
	})
}

// A deletion that only a re-list finds (the catch-up watch got 410, and
// the re-list is diffed against the restored cache) is written to the
// state file like any other: a third run, whose catch-up watch is held,
// restores the cache without the deleted object.
func TestDurableRelistDeletionIsPersisted(t *testing.T) {
	srv, dir := changedWhileDown(t)
	srv.Compact() // the second run's catch-up watch gets 410

	second, log, reg := runDurable(t, srv, dir)
	waitSynced(t, second)
	waitHandled(t, reg)
	if events, _ := log.get(); !slices.Contains(events, "DELETED ns/b relist") {
		t.Fatalf("second run's events: %v, want ns/b deleted by the re-list", events)
	}
	want := cacheState(second)
	second.Stop()

	held := &heldLister{Server: srv, release: make(chan struct{})}
	t.Cleanup(func() { close(held.release) })
	third, _, _ := runDurable(t, held, dir)
	deadline := time.Now().Add(10 * time.Second)
	// Restored at once, after the probe (the list is held): the file
	// loads object by object, so wait for the restore to end.
	for third.Startup().Restored.File == "" {
		if time.Now().After(deadline) {
			t.Fatal("the third run restored nothing")
		}
		time.Sleep(time.Millisecond)
	}
	if got := cacheState(third); !maps.Equal(got, want) {
		t.Fatalf("third run restored %v, want what the second run left: %v", got, want)
	}
}

// Nothing of the state file reaches the cache or the handlers before the
// server has authorized a list: while the probe fails (the server down
// here; a 403 in integration/durable_access_test.go) the cache is empty
// and the informer retries with backoff; once the probe works, the file
// is restored, then caught up.
func TestDurableNothingRestoredBeforeTheProbe(t *testing.T) {
	srv, dir := changedWhileDown(t)
	down := &flakyLister{Server: srv, fails: 1 << 30}
	inf, log, reg := runDurable(t, down, dir)
	deadline := time.Now().Add(10 * time.Second)
	for len(down.lists()) < 3 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes in 10s, want retries", len(down.lists()))
		}
		time.Sleep(time.Millisecond)
	}
	if n := inf.Cache().Len(); n != 0 {
		t.Fatalf("%d objects in the cache before the server authorized a list", n)
	}
	if events, _ := log.get(); len(events) != 0 {
		t.Fatalf("events before the server authorized a list: %v", events)
	}
	if inf.HasSynced() {
		t.Fatal("synced without the server")
	}
	down.mu.Lock()
	down.fails = 0
	down.mu.Unlock()
	waitSynced(t, inf)
	waitHandled(t, reg)
	events, _ := log.get()
	if got := fmt.Sprint(sortedTail(events[:min(3, len(events))], 0)); got != "[ADDED ns/a restore ADDED ns/b restore ADDED ns/c restore]" {
		t.Fatalf("events once the server answered: %v", events)
	}
	if got := cacheState(inf); !maps.Equal(got, serverState(srv)) {
		t.Fatalf("cache %v, server %v", got, serverState(srv))
	}
}

// A run that ended before the server authorized the restore (its probe
// refused: the server down here, a 403 alike) restored nothing, so the
// next run of the same informer loads the file again and catches it up;
// it does not take the file for the cache's, which would leave in it the
// objects deleted meanwhile for a later informer to restore.
func TestDurableRunAfterRefusedRestoreLoadsTheFile(t *testing.T) {
	srv, dir := changedWhileDown(t) // the file has a, b and c; b is deleted since
	down := &flakyLister{Server: srv, fails: 1 << 30}
	inf, log, reg := runDurable(t, down, dir)
	deadline := time.Now().Add(10 * time.Second)
	for len(down.lists()) < 2 {
		if time.Now().After(deadline) {
			t.Fatalf("%d probes in 10s, want retries", len(down.lists()))
		}
		time.Sleep(time.Millisecond)
	}
	inf.Stop()
	if n := inf.Cache().Len(); n != 0 {
		t.Fatalf("%d objects in the cache after a run whose probe always failed", n)
	}

	down.mu.Lock()
	down.fails = 0
	down.mu.Unlock()
	inf.Start()
	waitSynced(t, inf)
	waitHandled(t, reg)
	events, _ := log.get()
	if got := fmt.Sprint(sortedTail(events[:min(3, len(events))], 0)); got != "[ADDED ns/a restore ADDED ns/b restore ADDED ns/c restore]" {
		t.Errorf("events of the run after the refused one: %v, want the file restored", events)
	}
	if got := cacheState(inf); !maps.Equal(got, serverState(srv)) {
		t.Fatalf("cache %v, server %v", got, serverState(srv))
	}
	inf.Stop()

	held := &heldLister{Server: srv, release: make(chan struct{})}
	t.Cleanup(func() { close(held.release) })
	next, _, _ := runDurable(t, held, dir)
	deadline = time.Now().Add(10 * time.Second)
	want := len(serverState(srv))
	for next.Cache().Len() < want { // restored at once, after the probe (object by object)
		if time.Now().After(deadline) {
			t.Fatalf("the next informer restored %d objects, want %d", next.Cache().Len(), want)
		}
		time.Sleep(time.Millisecond)
	}
	if got := cacheState(next); !maps.Equal(got, serverState(srv)) {
		t.Fatalf("the next informer restored %v, want what the last run left, the server's state %v", got, serverState(srv))
	}
}

// A state file at a resourceVersion the server has not reached is another
// history (another cluster at the same URL, or etcd restored from a
// backup): it is not restored, an ERROR wrapping ErrSnapshot says why, the
// informer lists, and the file then holds this server's objects, which the
// next run restores.
func TestDurableFileFromAnotherHistoryIsNotRestored(t *testing.T) {
	first := kinformertest.NewServer(newCM("a"), newCM("b"), newCM("c"))
	first.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "c"}, Data: map[string]string{"k": "v2"}})
	dir := t.TempDir()
	inf, _, _ := runDurable(t, first, dir)
	waitSynced(t, inf)
	inf.Stop()

	other := kinformertest.NewServer(newCM("x")) // a younger history
	inf, log, reg := runDurable(t, other, dir)
	waitSynced(t, inf)
	waitHandled(t, reg)
	events, errs := log.get()
	if fmt.Sprint(events) != "[ADDED ns/x list]" {
		t.Fatalf("events on another history's server: %v (errors %v)", events, errs)
	}
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) || !strings.Contains(errs[0].Error(), "beyond the server's") {
		t.Fatalf("errors %v, want one ErrSnapshot saying the file is beyond the server's resourceVersion", errs)
	}
	if got := cacheState(inf); !maps.Equal(got, serverState(other)) {
		t.Fatalf("cache %v, server %v", got, serverState(other))
	}
	inf.Stop()

	inf, log, reg = runDurable(t, other, dir)
	waitSynced(t, inf)
	waitHandled(t, reg)
	if events, errs := log.get(); fmt.Sprint(events) != "[ADDED ns/x restore]" || len(errs) != 0 {
		t.Fatalf("the next run: events %v, errors %v; want x restored", events, errs)
	}
}

// Without StateKeys an informer of Secrets keeps no state file, whether
// typed, or dynamic through client-go's dynamic client; with keys it does.
// The file is opened (made) as a run starts, before the server answers:
// the dynamic client's server is nowhere.
func TestDurableSecretsNeedKeys(t *testing.T) {
	gvr := schema.GroupVersionResource{Version: "v1", Resource: "secrets"}
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	meta, err := metadata.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	cs := fake.NewClientset()
	for _, tc := range []struct {
		name  string
		start func(dir string, keys [][]byte) (stop func())
	}{
		{"typed", func(dir string, keys [][]byte) func() {
			inf := kinformer.New[*corev1.Secret](cs.CoreV1().Secrets("ns"), &kinformer.Options[*corev1.Secret]{StateDir: dir, StateKeys: keys, StateKey: "test typed secrets"})
			inf.Start()
			return inf.Stop
		}},
		{"metadata", func(dir string, keys [][]byte) func() {
			inf := kinformer.New[*metav1.PartialObjectMetadata](meta.Resource(gvr).Namespace("ns"), &kinformer.Options[*metav1.PartialObjectMetadata]{StateDir: dir, StateKeys: keys, StateKey: "test metadata secrets"})
			inf.Start()
			return inf.Stop
		}},
		{"dynamic", func(dir string, keys [][]byte) func() {
			inf := kinformer.New[*unstructured.Unstructured](dyn.Resource(gvr).Namespace("ns"), &kinformer.Options[*unstructured.Unstructured]{StateDir: dir, StateKeys: keys, StateKey: "test secrets"})
			inf.Start()
			return inf.Stop
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			files := func(dir string) []string {
				m, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
				return m
			}
			dir := t.TempDir()
			stop := tc.start(dir, nil)
			time.Sleep(500 * time.Millisecond)
			stop()
			if m := files(dir); len(m) != 0 {
				t.Fatalf("without keys: state files %v", m)
			}
			stop = tc.start(dir, [][]byte{make([]byte, 32)})
			deadline := time.Now().Add(5 * time.Second)
			for len(files(dir)) == 0 && time.Now().Before(deadline) {
				time.Sleep(10 * time.Millisecond)
			}
			stop()
			if m := files(dir); len(m) != 1 {
				t.Fatalf("with a key: state files %v, want one", m)
			}
		})
	}
}

// A restored informer whose state file's resourceVersion the server has
// compacted (a restart longer than a few minutes) re-lists as soon as its
// catch-up watch is answered 410, without a backoff first (the default
// one: its first wait is 0.6-0.8 s).
func TestDurableCompactedFileRelistsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := kinformertest.NewServer(newCM("a"), newCM("b"))
		dir := t.TempDir()
		opts := durableOpts(dir)
		opts.Backoff = kinformer.Backoff{} // the default
		first := kinformer.New[*corev1.ConfigMap](srv, opts)
		first.Start()
		waitSynced(t, first)
		first.Stop()
		srv.Add(newCM("c"))
		srv.Compact()
		began := time.Now()
		second := kinformer.New[*corev1.ConfigMap](srv, opts)
		second.Start()
		defer second.Stop()
		waitSynced(t, second)
		if took := time.Since(began); took >= 500*time.Millisecond {
			t.Fatalf("synced %v after the start (fake clock): the re-list after the 410 waited a backoff", took)
		}
	})
}

// embedsNil is a ListerWatcher of someone's own whose embedded pointer is
// nil and has a field named as the Factory's metadata wrapper's.
type embedsNil struct {
	*hasResourceInterface
	*kinformertest.Server[*corev1.ConfigMap]
}

type hasResourceInterface struct{ ResourceInterface any }

// Telling Secrets from others looks into ListerWatchers by reflection: one
// of an unexpected shape is not taken for anything, and does not panic.
func TestSecretsOfOddListerWatcher(t *testing.T) {
	dir := t.TempDir()
	inf := kinformer.New[*corev1.ConfigMap](embedsNil{Server: kinformertest.NewServer(newCM("a"))}, &kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateKey: "odd"})
	inf.Start()
	inf.Stop()
}

// A restore at the server's resourceVersion (nothing changed since the
// file was written) is caught up already: the informer syncs as the file
// is restored, not after its catch-up watch's quiet period. The catch-up
// watch is held, and no time passes in the bubble: only the restore
// itself can sync it.
func TestDurableRestoreAtTheServersVersionSyncsAtOnce(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := kinformertest.NewServer(newCM("a"), newCM("b"))
		dir := t.TempDir()
		first, _, _ := runDurable(t, srv, dir)
		waitSynced(t, first)
		first.Stop()

		lw := &heldLister{Server: srv, release: make(chan struct{})}
		defer close(lw.release)
		start := time.Now()
		second, log, _ := runDurable(t, lw, dir)
		synctest.Wait()
		if !second.HasSynced() {
			t.Fatalf("not synced after restoring a file at the server's resourceVersion %s (its resourceVersion %s, %d objects): waiting for the catch-up watch",
				srv.ResourceVersion(), second.ResourceVersion(), second.Cache().Len())
		}
		if d := time.Since(start); d != 0 {
			t.Fatalf("synced after %v of the bubble's time, want at once", d)
		}
		if got := cacheState(second); !maps.Equal(got, serverState(srv)) {
			t.Fatalf("cache %v, server %v", got, serverState(srv))
		}
		if events, errs := log.get(); len(errs) != 0 || len(events) != 2 {
			t.Fatalf("events %v, errors %v; want a and b restored", events, errs)
		}
	})
}

// keyPrefix is what prefixKey puts before an object's key: a KeyFunc of
// one name (one state file identity) that keys differently from one run
// to the next.
var keyPrefix atomic.Pointer[string]

func prefixKey(o *corev1.ConfigMap) string {
	p := ""
	if s := keyPrefix.Load(); s != nil {
		p = *s
	}
	return p + o.Namespace + "/" + o.Name
}

// An object of the state file that its KeyFunc no longer keys as it is
// stored is not restored under the stale key: the file is set aside with
// an ErrSnapshot naming the key, and the informer lists.
func TestDurableRestoredObjectMustHaveItsKey(t *testing.T) {
	defer keyPrefix.Store(nil)
	srv := kinformertest.NewServer(newCM("a"), newCM("b"))
	dir := t.TempDir()
	run := func(prefix string) (*kinformer.Informer[*corev1.ConfigMap], *eventLog) {
		keyPrefix.Store(&prefix)
		opts := durableOpts(dir)
		opts.KeyFunc = prefixKey
		inf := kinformer.New[*corev1.ConfigMap](srv, opts)
		log := &eventLog{}
		reg := inf.AddHandler(log.handle)
		inf.Start()
		t.Cleanup(inf.Stop)
		waitSynced(t, inf)
		waitHandled(t, reg)
		return inf, log
	}
	first, _ := run("old:")
	first.Stop()

	second, log := run("new:")
	events, errs := log.get()
	sort.Strings(events)
	if fmt.Sprint(events) != "[ADDED new:ns/a list ADDED new:ns/b list]" {
		t.Fatalf("events: %v (errors %v); want a and b listed under their new keys", events, errs)
	}
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) || !strings.Contains(errs[0].Error(), `has key "new:ns/`) {
		t.Fatalf("errors %v, want one ErrSnapshot saying an object has another key", errs)
	}
	keys := second.Cache().ListKeys()
	sort.Strings(keys)
	if fmt.Sprint(keys) != "[new:ns/a new:ns/b]" {
		t.Fatalf("cache keys %v, want the new ones alone", keys)
	}
}

// tlsLister makes each list over a TLS connection first (a GET of a test
// server, with the list's context, whose trace notes the cluster the
// connection reaches), then answers it from the in-memory server.
type tlsLister struct {
	*kinformertest.Server[*corev1.ConfigMap]
	hs *httptest.Server
}

func (l *tlsLister) List(ctx context.Context, opts metav1.ListOptions) (*cmList, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, l.hs.URL, nil)
	if err != nil {
		return nil, err
	}
	resp, err := l.hs.Client().Do(req)
	if err != nil {
		return nil, err
	}
	resp.Body.Close()
	return l.Server.List(ctx, opts)
}

// A state file that records no cluster (written where the lists were not
// over TLS) is not restored once the server is reached over TLS, which
// names a cluster the file cannot be matched with: an ErrSnapshot says
// why, the informer lists, and the next run, the file now bound to the
// cluster, restores it.
func TestDurableFileWithoutClusterIsNotRestoredOverTLS(t *testing.T) {
	srv := kinformertest.NewServer(newCM("a"), newCM("b"))
	dir := t.TempDir()
	first, _, _ := runDurable(t, srv, dir) // in memory: no connection, no cluster
	waitSynced(t, first)
	first.Stop()

	hs := httptest.NewTLSServer(http.HandlerFunc(func(http.ResponseWriter, *http.Request) {}))
	defer hs.Close()
	lw := &tlsLister{Server: srv, hs: hs}
	second, log, reg := runDurable(t, lw, dir)
	waitSynced(t, second)
	waitHandled(t, reg)
	events, errs := log.get()
	sort.Strings(events)
	if fmt.Sprint(events) != "[ADDED ns/a list ADDED ns/b list]" {
		t.Fatalf("events over TLS: %v (errors %v); want a and b listed, not restored", events, errs)
	}
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) || !strings.Contains(errs[0].Error(), "does not say which cluster") {
		t.Fatalf("errors %v, want one ErrSnapshot saying the file names no cluster", errs)
	}
	second.Stop()

	third, log, reg := runDurable(t, lw, dir)
	waitSynced(t, third)
	waitHandled(t, reg)
	events, errs = log.get()
	sort.Strings(events)
	if fmt.Sprint(events) != "[ADDED ns/a restore ADDED ns/b restore]" || len(errs) != 0 {
		t.Fatalf("the next run over TLS: events %v, errors %v; want a and b restored", events, errs)
	}
}

// A restore is delivered while the file loads: each object is cached and
// its Added (CauseRestore) queued as it is read. The load is held on its
// tenth object (the KeyFunc, which checks every restored object, waits)
// until the handler has had its first restored object: were the events
// queued only once the whole file had loaded, the handler would see none
// before the 10 s hold, and the cache would be whole at its first.
func TestDurableRestoreDeliveredWhileTheFileLoads(t *testing.T) {
	const n = 50
	var objs []*corev1.ConfigMap
	for i := range n {
		objs = append(objs, newCM(fmt.Sprintf("cm-%02d", i)))
	}
	srv := kinformertest.NewServer(objs...)
	dir := t.TempDir()
	var restoring atomic.Bool
	var keyed atomic.Int32
	firstEvent := make(chan struct{})
	key := func(obj *corev1.ConfigMap) string { // one function: the state file's identity names it
		if restoring.Load() && keyed.Add(1) == 10 {
			select {
			case <-firstEvent:
			case <-time.After(10 * time.Second):
			}
		}
		return obj.Namespace + "/" + obj.Name
	}
	opts := func() *kinformer.Options[*corev1.ConfigMap] {
		o := durableOpts(dir)
		o.KeyFunc = key
		return o
	}
	first := kinformer.New[*corev1.ConfigMap](srv, opts())
	first.Start()
	waitSynced(t, first)
	first.Stop()

	restoring.Store(true)
	next := kinformer.New[*corev1.ConfigMap](srv, opts())
	var once sync.Once
	var restored atomic.Int32
	cachedAtFirst := -1
	next.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		if e.Cause != kinformer.CauseRestore {
			return
		}
		restored.Add(1)
		once.Do(func() {
			cachedAtFirst = next.Cache().Len()
			close(firstEvent)
		})
	})
	began := time.Now()
	next.Start()
	t.Cleanup(next.Stop)
	waitSynced(t, next)
	if took := time.Since(began); took > 5*time.Second {
		t.Fatalf("synced after %v: the load waited for the handler's first restored object, which came only after it", took)
	}
	deadline := time.Now().Add(5 * time.Second)
	for restored.Load() < n && time.Now().Before(deadline) {
		time.Sleep(time.Millisecond)
	}
	if got := restored.Load(); got != n {
		t.Fatalf("%d objects restored, want %d", got, n)
	}
	<-firstEvent
	if cachedAtFirst <= 0 || cachedAtFirst >= n {
		t.Fatalf("the cache held %d objects when the handler had its first restored one; want some, not all %d", cachedAtFirst, n)
	}
}
