package kinformertest_test

import (
	"context"
	"errors"
	"fmt"
	"maps"
	"slices"
	"strings"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

type (
	cmServer = kinformertest.Server[*corev1.ConfigMap]
	cmEvent  = kinformer.Event[*corev1.ConfigMap]
)

func cm(ns, name string, kv ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Labels[kv[i]] = kv[i+1]
	}
	return c
}

// fastBackoff keeps re-lists after 410 and re-opened watches quick.
var fastBackoff = kinformer.Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond}

// start runs an informer over lw with opts (fast backoff unless set), records
// the events of one ordered registration, and waits for sync.
func start(t *testing.T, lw kinformer.ListerWatcher[*kinformertest.List[*corev1.ConfigMap]], opts *kinformer.Options[*corev1.ConfigMap]) (*kinformer.Informer[*corev1.ConfigMap], <-chan cmEvent) {
	t.Helper()
	if opts == nil {
		opts = &kinformer.Options[*corev1.ConfigMap]{}
	}
	if opts.Backoff == (kinformer.Backoff{}) {
		opts.Backoff = fastBackoff
	}
	inf := kinformer.New[*corev1.ConfigMap](lw, opts)
	events := record(inf)
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	return inf, events
}

// record registers one ordered handler for every event type but Error and
// returns the channel it sends them on (large enough for any test here).
func record(inf *kinformer.Informer[*corev1.ConfigMap]) <-chan cmEvent {
	ch := make(chan cmEvent, 1000)
	send := func(e cmEvent) { ch <- e }
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: send, Modified: send, Deleted: send, Bookmark: send})
	return ch
}

// patience bounds every wait: far longer than anything here takes, even
// with the race detector on a loaded machine, so that only a lost event or
// a hang reaches it.
const patience = time.Minute

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), patience)
	t.Cleanup(cancel)
	return ctx
}

// waitFor polls cond until it holds, failing the test after patience.
func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	ctx := bounded(t)
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("timed out waiting for %s", what)
		case <-time.After(time.Millisecond):
		}
	}
}

// next returns the next n events as "TYPE key cause" lines, failing the test
// if they do not come within patience.
func next(t *testing.T, ch <-chan cmEvent, n int) []string {
	t.Helper()
	ctx := bounded(t)
	var out []string
	for range n {
		select {
		case e := <-ch:
			out = append(out, fmt.Sprintf("%s %s %s", e.Type, e.Key, e.Cause))
		case <-ctx.Done():
			t.Fatalf("after %v: timed out waiting for %d more events", out, n-len(out))
		}
	}
	return out
}

func expect(t *testing.T, got []string, want ...string) {
	t.Helper()
	if !slices.Equal(got, want) {
		t.Fatalf("events:\n got %q\nwant %q", got, want)
	}
}

// ownLists counts the lists state makes on each server, for
// informerRequests to leave out.
var ownLists = struct {
	sync.Mutex
	n map[*cmServer]int
}{n: map[*cmServer]int{}}

// informerRequests returns the requests s received from the informer: all
// but the lists that checkCache made.
func informerRequests(s *cmServer) kinformertest.Requests {
	ownLists.Lock()
	defer ownLists.Unlock()
	r := s.Requests()
	r.Lists -= ownLists.n[s]
	return r
}

// state returns key -> resourceVersion of everything on the server.
func state(t *testing.T, s *cmServer) map[string]string {
	t.Helper()
	ownLists.Lock()
	ownLists.n[s]++
	ownLists.Unlock()
	l, err := s.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range l.Items {
		out[kinformer.MetaNamespaceKey(o)] = o.ResourceVersion
	}
	return out
}

func cached(inf *kinformer.Informer[*corev1.ConfigMap]) map[string]string {
	out := map[string]string{}
	for _, o := range inf.Cache().List() {
		out[kinformer.MetaNamespaceKey(o)] = o.ResourceVersion
	}
	return out
}

// checkCache requires the informer's cache to hold exactly the server's
// objects at their resourceVersions. Call it after the events of the last
// write have arrived: the cache is updated before events are queued.
func checkCache(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap], s *cmServer) {
	t.Helper()
	if got, want := cached(inf), state(t, s); !maps.Equal(got, want) {
		t.Fatalf("cache %v, server %v", got, want)
	}
}

func must[T any](v T, err error) T {
	if err != nil {
		panic(err)
	}
	return v
}

// Writes reach handlers, in order and with their causes, and the cache,
// whether the informer lists with a watch-list (the default) or in pages.
func TestInformerFollowsWrites(t *testing.T) {
	for _, paged := range []bool{false, true} {
		t.Run(fmt.Sprintf("paged=%v", paged), func(t *testing.T) {
			srv := kinformertest.NewServer(cm("ns", "a"), cm("ns", "b"))
			inf, events := start(t, srv, &kinformer.Options[*corev1.ConfigMap]{DisableStreamingList: paged})
			initial := next(t, events, 2)
			slices.Sort(initial)
			expect(t, initial, "ADDED ns/a list", "ADDED ns/b list")
			checkCache(t, inf, srv)
			if got, want := inf.ResourceVersion(), srv.ResourceVersion(); got != want {
				t.Errorf("informer at resourceVersion %s, server at %s", got, want)
			}

			must(srv.Add(cm("ns", "c")))
			a := must(srv.Update(cm("ns", "a", "v", "2")))
			if err := srv.Delete(cm("ns", "b")); err != nil {
				t.Fatal(err)
			}
			expect(t, next(t, events, 3), "ADDED ns/c watch", "MODIFIED ns/a watch", "DELETED ns/b watch")
			checkCache(t, inf, srv)
			if got, _ := inf.Cache().GetByKey("ns/a"); got.Labels["v"] != "2" || got.ResourceVersion != a.ResourceVersion {
				t.Errorf("cached a = %v, want the update %v", got, a)
			}

			want := kinformertest.Requests{WatchLists: 1, Watches: 1}
			if paged {
				want = kinformertest.Requests{Lists: 1, Watches: 1}
			}
			if got := informerRequests(srv); got != want {
				t.Errorf("requests %+v, want %+v", got, want)
			}
		})
	}
}

// A stopped informer started again resumes its watch from where it was:
// it receives exactly the writes made meanwhile, without a re-list.
func TestRestartResumes(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a"), cm("ns", "b"))
	inf, events := start(t, srv, nil)
	next(t, events, 2)
	inf.Stop()

	must(srv.Add(cm("ns", "c")))
	must(srv.Update(cm("ns", "a", "v", "2")))
	if err := srv.Delete(cm("ns", "b")); err != nil {
		t.Fatal(err)
	}
	inf.Start()
	expect(t, next(t, events, 3), "ADDED ns/c watch", "MODIFIED ns/a watch", "DELETED ns/b watch")
	checkCache(t, inf, srv)
	if r := informerRequests(srv); r.Lists+r.WatchLists != 1 {
		t.Errorf("requests %+v: want one list in all", r)
	}
}

// After Compact, an informer that comes back with its old resourceVersion
// gets 410 Gone and re-lists: the differences arrive with CauseRelist.
func TestCompactForcesRelist(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a"), cm("ns", "b"))
	inf, events := start(t, srv, nil)
	next(t, events, 2)
	inf.Stop()

	must(srv.Add(cm("ns", "c")))
	if err := srv.Delete(cm("ns", "a")); err != nil {
		t.Fatal(err)
	}
	srv.Compact()
	inf.Start()
	got := next(t, events, 2)
	slices.Sort(got)
	expect(t, got, "ADDED ns/c relist", "DELETED ns/a relist")
	checkCache(t, inf, srv)
	if r := informerRequests(srv); r.WatchLists != 2 {
		t.Errorf("watch-lists = %d, want 2 (the first list and the re-list)", r.WatchLists)
	}
}

// CloseWatches ends the open watch; the informer opens another from its
// resourceVersion, so a write made in between is not lost, and nothing is
// re-listed.
func TestCloseWatchesResumes(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a"))
	inf, events := start(t, srv, nil)
	next(t, events, 1)
	// The informer opens its watch after the watch-list that synced it:
	// wait for it, so that CloseWatches has a watch to close.
	waitFor(t, "the watch", func() bool { return informerRequests(srv).Watches > 0 })
	before := informerRequests(srv)
	closeAndWrite(t, srv, inf, events, before)
}

// closeAndWrite closes the server's watches and writes ns/b: the informer
// must see it on a watch opened after the close (the watch closed did not
// see it), and have listed once.
func closeAndWrite(t *testing.T, srv *kinformertest.Server[*corev1.ConfigMap], inf *kinformer.Informer[*corev1.ConfigMap], events <-chan cmEvent, before kinformertest.Requests) {
	t.Helper()
	srv.CloseWatches()
	must(srv.Add(cm("ns", "b")))
	expect(t, next(t, events, 1), "ADDED ns/b watch")
	checkCache(t, inf, srv)
	if r := informerRequests(srv); r.Lists+r.WatchLists != 1 || r.Watches <= before.Watches {
		t.Errorf("requests %+v, then %+v: want one list, and a watch opened after CloseWatches", before, r)
	}
}

// slowWatch holds the informer's plain watches for delay, before they reach
// the server (the request in flight) or after it answered (the response in
// flight).
type slowWatch struct {
	*cmServer
	delay time.Duration
	after bool
}

func (s *slowWatch) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		return s.cmServer.Watch(ctx, opts)
	}
	if !s.after {
		time.Sleep(s.delay)
	}
	w, err := s.cmServer.Watch(ctx, opts)
	if s.after {
		time.Sleep(s.delay)
	}
	return w, err
}

// Regression: CloseWatches while the informer's watch is being opened.
// Watches used to be counted by a wrapper as they were asked for, before
// the server registered them; on a loaded machine CloseWatches could run
// in between, find nothing to close, and the watch counted before it went
// on. The server now counts a watch in the step that registers it: a watch
// Requests has counted is one CloseWatches closes, and one still on its way
// is not counted yet. synctest holds the watch in flight.
func TestCloseWatchesInFlight(t *testing.T) {
	for _, after := range []bool{false, true} {
		t.Run(fmt.Sprintf("after=%v", after), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				srv := kinformertest.NewServer(cm("ns", "a"))
				inf, events := start(t, &slowWatch{cmServer: srv, delay: time.Second, after: after}, nil)
				next(t, events, 1)
				synctest.Wait() // the informer's watch is in slowWatch's sleep
				before := informerRequests(srv)
				if want := map[bool]int{false: 0, true: 1}[after]; before.Watches != want {
					t.Fatalf("requests %+v with the watch in flight, want %d watches", before, want)
				}
				closeAndWrite(t, srv, inf, events, before)
			})
		})
	}
}

// Bookmark reaches Bookmark handlers and moves the informer's
// resourceVersion.
func TestBookmark(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a"))
	inf, events := start(t, srv, nil)
	next(t, events, 1)
	must(srv.Add(cm("ns", "b")))
	rv := srv.Bookmark()
	expect(t, next(t, events, 2), "ADDED ns/b watch", "BOOKMARK  watch")
	if got := inf.ResourceVersion(); got != rv {
		t.Errorf("ResourceVersion() = %s after the bookmark at %s", got, rv)
	}
}

// The informer's selectors are the server's: an object that leaves the
// label selector is Deleted, one that enters it Added, and a field
// selector on metadata.name works; an unsupported field is a 400 that
// WaitForSync returns.
func TestSelectors(t *testing.T) {
	t.Run("labels", func(t *testing.T) {
		srv := kinformertest.NewServer(cm("ns", "a", "app", "web"), cm("ns", "b", "app", "db"))
		inf, events := start(t, srv, &kinformer.Options[*corev1.ConfigMap]{LabelSelector: "app=web"})
		expect(t, next(t, events, 1), "ADDED ns/a list")
		must(srv.Update(cm("ns", "a", "app", "db")))
		must(srv.Update(cm("ns", "b", "app", "web")))
		must(srv.Update(cm("ns", "b", "app", "web", "v", "2")))
		expect(t, next(t, events, 3), "DELETED ns/a watch", "ADDED ns/b watch", "MODIFIED ns/b watch")
		if got := cached(inf); len(got) != 1 || got["ns/b"] == "" {
			t.Errorf("cache %v, want only ns/b", got)
		}
	})
	t.Run("fields", func(t *testing.T) {
		srv := kinformertest.NewServer(cm("ns", "a"), cm("ns", "b"), cm("other", "a"))
		_, events := start(t, srv, &kinformer.Options[*corev1.ConfigMap]{FieldSelector: "metadata.namespace=ns,metadata.name!=b"})
		expect(t, next(t, events, 1), "ADDED ns/a list")
		must(srv.Update(cm("ns", "b", "v", "2")))
		must(srv.Update(cm("other", "a", "v", "2")))
		must(srv.Update(cm("ns", "a", "v", "2")))
		expect(t, next(t, events, 1), "MODIFIED ns/a watch")
	})
	t.Run("unsupported field", func(t *testing.T) {
		srv := kinformertest.NewServer(cm("ns", "a"))
		inf := kinformer.New[*corev1.ConfigMap](srv, &kinformer.Options[*corev1.ConfigMap]{FieldSelector: "data.x=y", Backoff: fastBackoff})
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); !apierrors.IsBadRequest(err) {
			t.Fatalf("WaitForSync = %v, want 400 Bad Request", err)
		}
	})
}

// The server's writes behave as a client's Create, Update and Delete do,
// and nothing the test or a reader holds aliases what it stores.
func TestWrites(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a"))
	a, ok := srv.Get("ns/a")
	if !ok || a.ResourceVersion != "2" || a.UID == "" {
		t.Fatalf("Get(ns/a) = %v, %v; want it at resourceVersion 2 with a UID", a, ok)
	}
	checks := []struct {
		name string
		err  error
		is   func(error) bool
	}{
		{"Add existing", second(srv.Add(cm("ns", "a"))), apierrors.IsAlreadyExists},
		{"Update missing", second(srv.Update(cm("ns", "x"))), apierrors.IsNotFound},
		{"Delete missing", srv.Delete(cm("ns", "x")), apierrors.IsNotFound},
		{"Update stale", second(srv.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", ResourceVersion: "1"}})), apierrors.IsConflict},
		{"Update another UID", second(srv.Update(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", UID: "other"}})), apierrors.IsConflict},
		{"Add nil", second(srv.Add(nil)), apierrors.IsBadRequest},
		{"Add nameless", second(srv.Add(cm("ns", ""))), apierrors.IsBadRequest},
	}
	for _, c := range checks {
		if !c.is(c.err) {
			t.Errorf("%s: %v", c.name, c.err)
		}
	}
	if rv := srv.ResourceVersion(); rv != "2" {
		t.Errorf("failed writes moved the resourceVersion to %s", rv)
	}

	a.Labels["changed"] = "by the test"
	a2 := must(srv.Update(a)) // at its current resourceVersion: no conflict
	if a2.ResourceVersion != "3" || a2.UID != a.UID {
		t.Errorf("update: resourceVersion %s, UID %s; want 3 and the same UID %s", a2.ResourceVersion, a2.UID, a.UID)
	}
	a2.Labels["changed"] = "after the write"
	if got, _ := srv.Get("ns/a"); got.Labels["changed"] != "by the test" {
		t.Errorf("the returned object aliases the stored one: %v", got.Labels)
	}
	if err := srv.Delete(cm("ns", "a")); err != nil {
		t.Fatal(err)
	}
	if _, ok := srv.Get("ns/a"); ok {
		t.Error("Get finds a deleted object")
	}
	again := must(srv.Add(cm("ns", "a")))
	if again.UID == a.UID {
		t.Error("an object created again has its predecessor's UID")
	}
}

func second[T any](_ T, err error) error { return err }

// A watch from a compacted resourceVersion gets one ERROR event with 410
// Gone and ends; a watch from the current one sees only later writes; a
// Deleted carries the last state at the deletion's resourceVersion.
func TestWatch(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "a", "k", "v"))
	srv.Compact()
	w, err := srv.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1"})
	if err != nil {
		t.Fatal(err)
	}
	evs := drain(t, w, -1)
	if len(evs) != 1 || evs[0].Type != watch.Error || !apierrors.IsResourceExpired(apierrors.FromObject(evs[0].Object)) {
		t.Fatalf("watch from a compacted resourceVersion: %v, want one 410 ERROR", evs)
	}

	w, err = srv.Watch(t.Context(), metav1.ListOptions{ResourceVersion: srv.ResourceVersion()})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	if err := srv.Delete(cm("ns", "a")); err != nil {
		t.Fatal(err)
	}
	evs = drain(t, w, 1)
	if o, ok := evs[0].Object.(*corev1.ConfigMap); evs[0].Type != watch.Deleted || !ok || o.Labels["k"] != "v" || o.ResourceVersion != srv.ResourceVersion() {
		t.Errorf("got %s %#v; want DELETED with the last state at resourceVersion %s", evs[0].Type, evs[0].Object, srv.ResourceVersion())
	}

	if _, err := srv.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "x"}); !apierrors.IsBadRequest(err) {
		t.Errorf("watch from resourceVersion x: %v, want 400", err)
	}
}

// drain reads n events (-1: until the watch ends) within 10 s.
func drain(t *testing.T, w watch.Interface, n int) []watch.Event {
	t.Helper()
	ctx := bounded(t)
	var out []watch.Event
	for n < 0 || len(out) < n {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				if n >= 0 {
					t.Fatalf("watch ended after %d of %d events", len(out), n)
				}
				return out
			}
			out = append(out, ev)
		case <-ctx.Done():
			t.Fatalf("timed out after %d events", len(out))
		}
	}
	return out
}

// A watch ends at its timeoutSeconds, or when its context does.
func TestWatchEnds(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		srv := kinformertest.NewServer[*corev1.ConfigMap]()
		secs := int64(60)
		began := time.Now()
		w, err := srv.Watch(t.Context(), metav1.ListOptions{ResourceVersion: "1", TimeoutSeconds: &secs})
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := <-w.ResultChan(); ok {
			t.Fatal("an event on an idle watch")
		}
		if d := time.Since(began); d != time.Minute {
			t.Errorf("the watch ended after %s, want its timeout of 1m", d)
		}

		ctx, cancel := context.WithCancel(t.Context())
		w, err = srv.Watch(ctx, metav1.ListOptions{ResourceVersion: "1"})
		if err != nil {
			t.Fatal(err)
		}
		cancel()
		if _, ok := <-w.ResultChan(); ok {
			t.Fatal("an event on an idle watch")
		}
	})
}

// List is a list type as apimachinery sees lists, and its deep copy
// shares nothing.
func TestList(t *testing.T) {
	srv := kinformertest.NewServer(cm("ns", "b"), cm("ns", "a"))
	l, err := srv.List(t.Context(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	acc, err := meta.ListAccessor(l)
	if err != nil || acc.GetResourceVersion() != "3" {
		t.Fatalf("ListAccessor: %v, %v; want resourceVersion 3", acc, err)
	}
	var names []string
	if err := meta.EachListItemWithAlloc(l, func(o runtime.Object) error {
		names = append(names, o.(*corev1.ConfigMap).Name)
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(names, []string{"a", "b"}) {
		t.Errorf("items %v, want [a b] (in key order)", names)
	}
	c := l.DeepCopyObject().(*kinformertest.List[*corev1.ConfigMap])
	c.Items[0].Name = "changed"
	c.ResourceVersion = "changed"
	if l.Items[0].Name != "a" || l.ResourceVersion != "3" {
		t.Error("the deep copy shares state with the original")
	}
}

// Any Object works, custom resources through the dynamic client's type
// among them.
func TestUnstructured(t *testing.T) {
	obj := func(name, v string) *unstructured.Unstructured {
		u := &unstructured.Unstructured{}
		u.SetAPIVersion("example.com/v1")
		u.SetKind("Widget")
		u.SetNamespace("ns")
		u.SetName(name)
		u.SetLabels(map[string]string{"v": v})
		return u
	}
	inf, srv := kinformertest.New(obj("a", "1"))
	modified := make(chan string, 1)
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*unstructured.Unstructured]{
		Modified: func(e kinformer.Event[*unstructured.Unstructured]) { modified <- e.Object.GetLabels()["v"] },
	})
	inf.Start()
	defer inf.Stop()
	ctx := bounded(t)
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	must(srv.Update(obj("a", "2")))
	select {
	case v := <-modified:
		if v != "2" {
			t.Errorf("modified to v=%s, want 2", v)
		}
	case <-ctx.Done():
		t.Fatal("no Modified event")
	}
}

// Informers over a Server detect mutations of their cache: a handler that
// changes the object it was given, instead of a copy, gets the informer's
// handlers an Error event wrapping ErrMutated that names the object.
func TestMutationsDetected(t *testing.T) {
	t.Setenv(kinformer.EnvMutationDetector, "") // the Server's doing, whatever the environment says
	inf, srv := kinformertest.New(cm("ns", "a", "app", "web"))
	errs := make(chan error, 10)
	inf.AddEventHandler(kinformer.Error, func(e cmEvent) { errs <- e.Err })
	changed := make(chan struct{})
	inf.AddEventHandler(kinformer.Added, func(e cmEvent) {
		e.Object.Labels["app"] = "changed" // the bug
		close(changed)
	})
	inf.Start()
	defer inf.Stop()
	<-changed
	must(srv.Update(cm("ns", "a", "app", "web", "v", "2")))
	select {
	case err := <-errs:
		if !errors.Is(err, kinformer.ErrMutated) || !strings.Contains(err.Error(), `ns/a: metadata.labels["app"]: "changed", was "web"`) {
			t.Fatalf("error %v, want ErrMutated naming ns/a and its label", err)
		}
	case <-bounded(t).Done():
		t.Fatal("no report")
	}
}
