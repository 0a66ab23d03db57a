package integration

import (
	"context"
	"errors"
	"fmt"
	"reflect"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

type cmEvent = kinformer.Event[*corev1.ConfigMap]

// start runs an informer over the namespace's configmaps, through the
// typed client of a clientset whose requests are counted, with a recorder on
// every event type, and waits for sync and for the initial events to be
// delivered.
func start(t *testing.T, cfg *rest.Config, ns string, opts *kinformer.Options[*corev1.ConfigMap]) (*kinformer.Informer[*corev1.ConfigMap], *counting, *recorder[*corev1.ConfigMap]) {
	t.Helper()
	c := &counting{}
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, c.wrap(cfg)).CoreV1().ConfigMaps(ns), variant(opts))
	inVariant(t, inf.Cache())
	rec := &recorder[*corev1.ConfigMap]{}
	inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	n := inf.Cache().Len()
	eventually(t, 10*time.Second, "initial events", func() bool { return rec.count(kinformer.Added) >= n })
	return inf, c, rec
}

// 1. Objects that existed before start are cached after WaitForSync: by a
// streaming list (the default, which the local API server offers), and by
// a paged list.
func TestPreexistingObjectsAreCached(t *testing.T) {
	bothWays(t, testPreexistingObjectsAreCached)
}

func testPreexistingObjectsAreCached(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 25 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("pre-%02d", i), nil, "x"))
	}
	want := serverState(t, c, ns, metav1.ListOptions{})
	check := func(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap], rec *recorder[*corev1.ConfigMap]) {
		t.Helper()
		if got := cacheState(inf.Cache()); !sameState(got, want) {
			t.Fatalf("cache %v\nserver %v", got, want)
		}
		if n := rec.count(kinformer.Added); n != 25 {
			t.Fatalf("%d ADDED events, want 25", n)
		}
		if !inf.HasSynced() || rv(inf.ResourceVersion()) == 0 {
			t.Fatal("not synced or no resourceVersion")
		}
	}
	t.Run("streaming", func(t *testing.T) {
		inf, lw, rec := start(t, srv.Config(), ns, nil)
		check(t, inf, rec)
		// Changes arrive over a plain watch from the list's resourceVersion
		// (the streaming list is gzipped, a plain watch is not).
		listRV := inf.ResourceVersion()
		mustCreate(t, c, configMap(ns, "after", nil, "x"))
		eventually(t, 10*time.Second, "after", func() bool { _, ok := inf.Cache().GetByKey(ns + "/after"); return ok })
		lists, watches, _ := lw.calls()
		if len(lists) != 1 || !isStream(lists[0]) || len(watches) != 1 || isStream(watches[0]) || watches[0].ResourceVersion != listRV {
			t.Fatalf("calls: lists %+v, watches %+v; want one streaming list, then one watch from %s", lists, watches, listRV)
		}
		mustDelete(t, c, ns, "after")
	})
	t.Run("paged", func(t *testing.T) {
		inf, lw, rec := start(t, srv.Config(), ns, &kinformer.Options[*corev1.ConfigMap]{PageSize: 10, DisableStreamingList: true})
		check(t, inf, rec)
		if lists, _ := lw.counts(); lists != 3 {
			t.Fatalf("%d list calls for 25 objects in pages of 10, want 3", lists)
		}
	})
}

// 2. create → ADDED and cached; patch → MODIFIED with Old and new; delete →
// DELETED and gone.
func TestCreatePatchDelete(t *testing.T) {
	bothWays(t, testCreatePatchDelete)
}

func testCreatePatchDelete(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	inf, _, rec := start(t, srv.Config(), ns, nil)
	ctx := bounded(t, time.Minute)

	created := mustCreate(t, c, configMap(ns, "cm", nil, "one"))
	eventually(t, 10*time.Second, "ADDED", func() bool { return rec.count(kinformer.Added) == 1 })
	if got, ok := inf.Cache().GetByKey(ns + "/cm"); !ok || got.ResourceVersion != created.ResourceVersion {
		t.Fatalf("cache after create: %v %v", got, ok)
	}

	patched, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "cm", types.MergePatchType, []byte(`{"data":{"v":"two"}}`), metav1.PatchOptions{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "MODIFIED", func() bool { return rec.count(kinformer.Modified) == 1 })
	var mod cmEvent
	for _, e := range rec.all() {
		if e.Type == kinformer.Modified {
			mod = e
		}
	}
	if mod.Old.Data["v"] != "one" || mod.Object.Data["v"] != "two" || mod.Object.ResourceVersion != patched.ResourceVersion {
		t.Fatalf("MODIFIED old=%v new=%v", mod.Old.Data, mod.Object.Data)
	}
	if got, _ := inf.Cache().GetByKey(ns + "/cm"); got.Data["v"] != "two" {
		t.Fatalf("cache after patch: %v", got.Data)
	}
	if mod.Object.ManagedFields != nil {
		t.Fatal("managedFields not stripped by default")
	}

	mustDelete(t, c, ns, "cm")
	eventually(t, 10*time.Second, "DELETED", func() bool { return rec.count(kinformer.Deleted) == 1 })
	if _, ok := inf.Cache().GetByKey(ns + "/cm"); ok {
		t.Fatal("deleted object still cached")
	}
	if got := strings.Join(rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted), ","); got != "ADDED cm,DELETED cm,MODIFIED cm" {
		t.Fatalf("events: %s", got)
	}
}

// 3. The resourceVersion only moves forward; bookmarks arrive and advance it.
func TestResourceVersionAdvancesWithBookmarks(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	// A short server-side watch timeout (5-10 s): the API server sends a
	// bookmark shortly before it ends each watch.
	inf, lw, rec := start(t, srv.Config(), ns, &kinformer.Options[*corev1.ConfigMap]{WatchTimeout: 5 * time.Second})
	var rvs []int64
	var mu sync.Mutex
	inf.AddHandler(func(e cmEvent) {
		mu.Lock()
		rvs = append(rvs, rv(e.ResourceVersion))
		mu.Unlock()
	})
	for i := range 5 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	// Changes in another namespace move the global revision: bookmarks carry it.
	other := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(other, "elsewhere", nil, "x"))
	before := rv(inf.ResourceVersion())
	eventually(t, 30*time.Second, "a bookmark", func() bool { return rec.count(kinformer.Bookmark) > 0 })
	if got := rv(inf.ResourceVersion()); got < before {
		t.Fatalf("resourceVersion went back from %d to %d", before, got)
	}
	mu.Lock()
	defer mu.Unlock()
	for i := 1; i < len(rvs); i++ {
		if rvs[i] < rvs[i-1] {
			t.Fatalf("resourceVersion went back: %v", rvs)
		}
	}
	lists, watches, _ := lw.calls()
	for _, o := range append(lists, watches...) {
		if !o.AllowWatchBookmarks || o.TimeoutSeconds == nil || *o.TimeoutSeconds < 5 || *o.TimeoutSeconds >= 10 {
			t.Fatalf("watch options %+v", o)
		}
	}
	var bm cmEvent
	for _, e := range rec.all() {
		if e.Type == kinformer.Bookmark {
			bm = e
			break
		}
	}
	if rv(bm.ResourceVersion) == 0 {
		t.Fatalf("bookmark without resourceVersion: %+v", bm)
	}
}

// 4. Label and field selectors are honoured; objects leaving the selector
// fire DELETED.
func TestSelectors(t *testing.T) {
	bothWays(t, testSelectors)
}

func testSelectors(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(ns, "web", map[string]string{"app": "web"}, "x"))
	mustCreate(t, c, configMap(ns, "db", map[string]string{"app": "db"}, "x"))
	inf, lw, rec := start(t, srv.Config(), ns, &kinformer.Options[*corev1.ConfigMap]{LabelSelector: "app=web"})
	if keys := inf.Cache().ListKeys(); len(keys) != 1 || keys[0] != ns+"/web" {
		t.Fatalf("cache %v", keys)
	}
	rec.reset()
	ctx := bounded(t, time.Minute)
	web, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, "web", metav1.GetOptions{})
	web.Labels["app"] = "retired"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, web, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	db, _ := c.CoreV1().ConfigMaps(ns).Get(ctx, "db", metav1.GetOptions{})
	db.Labels["app"] = "web"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, db, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "2 events", func() bool { return len(rec.lines(kinformer.Added, kinformer.Deleted)) == 2 })
	if got := strings.Join(rec.lines(kinformer.Added, kinformer.Deleted, kinformer.Modified), ","); got != "ADDED db,DELETED web" {
		t.Fatalf("events %s", got)
	}
	lists, watches, _ := lw.calls()
	for _, o := range append(lists, watches...) {
		if o.LabelSelector != "app=web" {
			t.Fatalf("call without the selector: %+v", o)
		}
	}

	// Field selector.
	fs, _, _ := start(t, srv.Config(), ns, &kinformer.Options[*corev1.ConfigMap]{FieldSelector: "metadata.name=db"})
	if keys := fs.Cache().ListKeys(); len(keys) != 1 || keys[0] != ns+"/db" {
		t.Fatalf("field-selected cache %v", keys)
	}
	mustCreate(t, c, configMap(ns, "other", nil, "x"))
	mustUpdate(t, c, ns, "db", "changed")
	eventually(t, 10*time.Second, "db updated", func() bool {
		o, _ := fs.Cache().GetByKey(ns + "/db")
		return o.Data["v"] == "changed"
	})
	if fs.Cache().Len() != 1 {
		t.Fatalf("field selector leaked: %v", fs.Cache().ListKeys())
	}
}

// 5. A 2 s resync re-lists from the server in a quiet namespace and fires
// no MODIFIED for unchanged objects.
func TestResyncRelistsWithoutSpuriousEvents(t *testing.T) {
	bothWays(t, testResyncRelistsWithoutSpuriousEvents)
}

func testResyncRelistsWithoutSpuriousEvents(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 3 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	var transforms atomic.Int32
	inf, lw, rec := start(t, srv.Config(), ns, &kinformer.Options[*corev1.ConfigMap]{
		ResyncPeriod: 2 * time.Second,
		Transform:    func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) { transforms.Add(1); return o, nil },
	})
	rec.reset()
	before, _ := inf.Cache().GetByKey(ns + "/cm-0")
	eventually(t, 15*time.Second, "3 re-lists", func() bool { l, _ := lw.counts(); return l >= 4 })
	if got := rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted); len(got) != 0 {
		t.Fatalf("resync of an unchanged namespace fired %v", got)
	}
	if inf.Cache().Len() != 3 {
		t.Fatalf("cache %v", inf.Cache().ListKeys())
	}
	// Unchanged objects keep their cached instance (in a compact cache,
	// whose every read is a new object, their bytes): the re-listed
	// copies are dropped as decoded, never transformed.
	if after, _ := inf.Cache().GetByKey(ns + "/cm-0"); !inf.Cache().Compact() && after != before || !reflect.DeepEqual(after, before) {
		t.Fatal("resync replaced an unchanged object's instance")
	}
	if n := transforms.Load(); n != 3 {
		t.Fatalf("%d transforms over the initial list and 3 resyncs, want 3", n)
	}
}

// 6. Compaction while the informer is stopped → 410 → re-list: exactly the
// changes made in the gap fire, and nothing else.
func TestCompactionWhileStoppedRelistsAndDiffs(t *testing.T) {
	bothWays(t, testCompactionWhileStoppedRelistsAndDiffs)
}

func testCompactionWhileStoppedRelistsAndDiffs(t *testing.T) {
	// Without the watch cache every watch is served by etcd, so a watch from
	// a compacted revision reliably gets 410 Gone.
	srv := testenv.New(t, testenv.WithWatchCache(false))
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for _, n := range []string{"keep", "change", "gone"} {
		mustCreate(t, c, configMap(ns, n, nil, "x"))
	}
	inf, lw, rec := start(t, srv.Config(), ns, nil)
	inf.Stop()
	rec.reset()
	mustUpdate(t, c, ns, "change", "y")
	mustDelete(t, c, ns, "gone")
	mustCreate(t, c, configMap(ns, "new", nil, "x"))
	if _, err := srv.Compact(); err != nil {
		t.Fatal(err)
	}
	inf.Start()
	eventually(t, 15*time.Second, "3 events", func() bool {
		return len(rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted)) >= 3 && inf.Cache().Len() == 3
	})
	time.Sleep(200 * time.Millisecond) // room for any spurious event
	if got := strings.Join(rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted), ","); got != "ADDED new,DELETED gone,MODIFIED change" {
		t.Fatalf("events after 410: %s", got)
	}
	var expired bool
	for _, e := range rec.all() {
		expired = expired || (e.Type == kinformer.Error && errors.Is(e.Err, kinformer.ErrExpired) && (apierrors.IsResourceExpired(e.Err) || apierrors.IsGone(e.Err)))
	}
	if !expired {
		t.Fatalf("no ERROR event with ErrExpired: %v", rec.all())
	}
	if lists, _ := lw.counts(); lists != 2 {
		t.Fatalf("%d lists, want the initial one and one after 410", lists)
	}
	if got := cacheState(inf.Cache()); !sameState(got, serverState(t, c, ns, metav1.ListOptions{})) {
		t.Fatalf("cache differs from server")
	}
}

// A stopped informer started again resumes its watch from where it was:
// exactly the changes made while it was stopped, no re-list.
func TestRestartResumesFromResourceVersion(t *testing.T) {
	bothWays(t, testRestartResumesFromResourceVersion)
}

func testRestartResumesFromResourceVersion(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(ns, "a", nil, "x"))
	mustCreate(t, c, configMap(ns, "b", nil, "x"))
	inf, lw, rec := start(t, srv.Config(), ns, nil)
	inf.Stop()
	stoppedAt := inf.ResourceVersion()
	rec.reset()
	mustUpdate(t, c, ns, "a", "y")
	mustDelete(t, c, ns, "b")
	mustCreate(t, c, configMap(ns, "c", nil, "x"))
	inf.Start()
	eventually(t, 10*time.Second, "3 events", func() bool { return len(rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted)) == 3 })
	if got := strings.Join(rec.lines(kinformer.Added, kinformer.Modified, kinformer.Deleted), ","); got != "ADDED c,DELETED b,MODIFIED a" {
		t.Fatalf("events after restart: %s", got)
	}
	lists, watches, _ := lw.calls()
	if len(lists) != 1 || watches[len(watches)-1].ResourceVersion != stoppedAt {
		t.Fatalf("restart: %d lists, resumed from %q, want 1 list and %s", len(lists), watches[len(watches)-1].ResourceVersion, stoppedAt)
	}
}

// 7. kill -9 the API server mid-watch and restart it: the informer recovers
// by itself, with backoff, and ends equal to the server's state.
func TestRecoversFromAPIServerKill(t *testing.T) {
	bothWays(t, testRecoversFromAPIServerKill)
}

func testRecoversFromAPIServerKill(t *testing.T) {
	srv := testenv.New(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 10 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	inf, lw, rec := start(t, srv.Config(), ns, nil)
	srv.Kill() // mid-watch: the streaming list's connection is the watch
	killedAt := time.Now()
	_, _, before := lw.calls()
	time.Sleep(3 * time.Second) // down for a while: the informer must back off, not spin
	_, _, during := lw.calls()
	if n := len(during) - len(before); n > 4 {
		t.Fatalf("%d attempts in 3 s while the server was down: no backoff", n)
	}
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	downtime := time.Since(killedAt)
	// Changes after the restart reach the informer without help.
	mustUpdate(t, c, ns, "cm-0", "after")
	mustDelete(t, c, ns, "cm-1")
	mustCreate(t, c, configMap(ns, "new", nil, "x"))
	want := serverState(t, c, ns, metav1.ListOptions{})
	eventually(t, 45*time.Second, "cache equal to server", func() bool { return sameState(cacheState(inf.Cache()), want) })
	eventually(t, 10*time.Second, "handler caught up", func() bool {
		got, err := fold(rec.all())
		return err == nil && sameState(got, want)
	})
	if n := rec.count(kinformer.Error); n == 0 {
		t.Fatal("no ERROR events while the server was down")
	}
	t.Logf("server down %v; %d errors reported", downtime.Round(time.Millisecond), rec.count(kinformer.Error))
}

// 8. The restricted user watching a namespace it may not read: WaitForSync
// returns the 403 at once, the informer retries with backoff, not in a loop.
func TestForbiddenNamespace(t *testing.T) {
	srv := testenv.Shared(t)
	lw := &counting{}
	c := clientset(t, lw.wrap(srv.RestrictedConfig()))
	ns := testenv.NewNamespace(t, srv.Config())
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)
	inf.Start()
	defer inf.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	began := time.Now()
	err := inf.WaitForSync(ctx)
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), testenv.RestrictedUser) || !strings.Contains(err.Error(), "configmaps") {
		t.Fatalf("WaitForSync = %v, want a 403 naming the user and resource", err)
	}
	if time.Since(began) > 3*time.Second {
		t.Fatalf("WaitForSync took %v to report a 403", time.Since(began))
	}
	time.Sleep(4 * time.Second)
	n, _ := lw.counts()
	// Backoff waits ≥0.6, 1.2, 2.4 s: at most 4 attempts in ~4 s.
	if n < 2 || n > 4 {
		t.Fatalf("%d list attempts in 4 s: want retries with backoff (2-4)", n)
	}
	if inf.HasSynced() {
		t.Fatal("synced without permission")
	}

	// The same user in the namespace it may read syncs fine.
	ok := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(testenv.AllowedNamespace), nil)
	ok.Start()
	defer ok.Stop()
	if err := ok.WaitForSync(ctx); err != nil {
		t.Fatalf("allowed namespace: %v", err)
	}
}

// WaitForSync returns at once the errors retrying cannot fix, as the real
// server gives them: 401 for credentials it does not accept, 404 for a
// resource it does not serve. The informer keeps retrying, unsynced.
func TestWaitForSyncReturnsUnauthorizedAndNotFound(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	check := func(t *testing.T, inf interface {
		Start()
		Stop()
		WaitForSync(context.Context) error
		HasSynced() bool
	}, want func(error) bool, what string) {
		t.Helper()
		inf.Start()
		defer inf.Stop()
		// The first list fails so: 10 s is ample, and a WaitForSync that
		// waits on through it returns the context's error instead.
		if err := inf.WaitForSync(bounded(t, 10*time.Second)); !want(err) {
			t.Fatalf("WaitForSync = %v, want %s", err, what)
		}
		if inf.HasSynced() {
			t.Fatal("synced")
		}
	}
	t.Run("401", func(t *testing.T) {
		cfg := rest.AnonymousClientConfig(srv.Config()) // the server's CA, no client certificate
		cfg.BearerToken = "not-a-token-the-server-knows"
		inf := kinformer.New[*corev1.ConfigMap](clientset(t, cfg).CoreV1().ConfigMaps(ns), nil)
		check(t, inf, apierrors.IsUnauthorized, "401 Unauthorized")
	})
	t.Run("404", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(srv.Config())
		if err != nil {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: "kinformer.test", Version: "v1", Resource: "nonexistents"}
		inf := kinformer.New[*unstructured.Unstructured](dyn.Resource(gvr).Namespace(ns), nil)
		check(t, inf, apierrors.IsNotFound, "404 Not Found")
	})
}

// 9. A CRD through the dynamic client, pods and configmaps through the typed
// client, and a metadata-only informer.
func TestClientKinds(t *testing.T) {
	bothWays(t, testClientKinds)
}

func testClientKinds(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	c := clientset(t, cfg)
	ns := testenv.NewNamespace(t, cfg)
	ctx := bounded(t, 2*time.Minute)

	t.Run("typed pods", func(t *testing.T) {
		pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: "p", Namespace: ns},
			Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
		if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		byImage := func(p *corev1.Pod) []string { return []string{p.Spec.Containers[0].Image} }
		inf := kinformer.New[*corev1.Pod](c.CoreV1().Pods(ns), variant(&kinformer.Options[*corev1.Pod]{
			Indexers: map[string]kinformer.IndexFunc[*corev1.Pod]{"image": byImage}}))
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		got, err := inf.Cache().ByIndex("image", "busybox")
		if err != nil || len(got) != 1 || got[0].Name != "p" {
			t.Fatalf("ByIndex = %v, %v", got, err)
		}
	})

	t.Run("dynamic CRD", func(t *testing.T) {
		dyn, err := dynamic.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		group := "kinformer.test"
		crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
		crd := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
			"metadata": map[string]any{"name": "widgets." + group},
			"spec": map[string]any{
				"group": group, "scope": "Namespaced",
				"names": map[string]any{"plural": "widgets", "singular": "widget", "kind": "Widget", "listKind": "WidgetList"},
				"versions": []any{map[string]any{"name": "v1", "served": true, "storage": true,
					"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
			},
		}}
		if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			t.Fatal(err)
		}
		gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "widgets"}
		widget := func(name, size string) *unstructured.Unstructured {
			return &unstructured.Unstructured{Object: map[string]any{
				"apiVersion": group + "/v1", "kind": "Widget",
				"metadata": map[string]any{"name": name, "namespace": ns},
				"spec":     map[string]any{"size": size},
			}}
		}
		// The CRD's endpoint takes a moment to appear.
		eventually(t, 30*time.Second, "CRD served", func() bool {
			_, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, widget("w1", "small"), metav1.CreateOptions{})
			return err == nil || apierrors.IsAlreadyExists(err)
		})
		inf := kinformer.New[*unstructured.Unstructured](dyn.Resource(gvr).Namespace(ns), variant[*unstructured.Unstructured](nil))
		rec := &recorder[*unstructured.Unstructured]{}
		inf.AddHandler(rec.handle)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		if _, err := dyn.Resource(gvr).Namespace(ns).Create(ctx, widget("w2", "large"), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "w2", func() bool { _, ok := inf.Cache().GetByKey(ns + "/w2"); return ok })
		w2, _ := inf.Cache().GetByKey(ns + "/w2")
		if size, _, _ := unstructured.NestedString(w2.Object, "spec", "size"); size != "large" {
			t.Fatalf("w2 spec = %v", w2.Object["spec"])
		}
		// The handler runs after the cache holds w2, on its own goroutine:
		// wait for its second event before checking both.
		eventually(t, 10*time.Second, "the handler's ADDED w2", func() bool { return len(rec.lines(kinformer.Added)) >= 2 })
		if got := strings.Join(rec.lines(kinformer.Added), ","); got != "ADDED w1,ADDED w2" {
			t.Fatalf("events %s", got)
		}
	})

	t.Run("metadata only", func(t *testing.T) {
		mustCreate(t, c, configMap(ns, "meta", map[string]string{"k": "v"}, strings.Repeat("x", 4096)))
		mc, err := metadata.NewForConfig(cfg)
		if err != nil {
			t.Fatal(err)
		}
		gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
		inf := kinformer.New[*metav1.PartialObjectMetadata](mc.Resource(gvr).Namespace(ns), variant[*metav1.PartialObjectMetadata](nil))
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		m, ok := inf.Cache().GetByKey(ns + "/meta")
		if !ok || m.Labels["k"] != "v" || m.ResourceVersion == "" {
			t.Fatalf("metadata object %+v", m)
		}
	})
}

// 10. 2,000 objects created (and some updated and deleted) concurrently while
// the informer runs: the cache ends equal to a fresh list, and every handler
// saw each object's events in order.
func TestConcurrentWritesStayConsistent(t *testing.T) {
	bothWays(t, testConcurrentWritesStayConsistent)
}

func testConcurrentWritesStayConsistent(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	inf, _, first := start(t, srv.Config(), ns, nil)
	second := &recorder[*corev1.ConfigMap]{}
	inf.AddHandler(second.handle)

	const total, workers = 2000, 16
	ctx := bounded(t, 3*time.Minute)
	var wg sync.WaitGroup
	errs := make(chan error, workers)
	for w := range workers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := w; i < total; i += workers {
				name := fmt.Sprintf("cm-%04d", i)
				cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, configMap(ns, name, nil, "0"), metav1.CreateOptions{})
				if err != nil {
					errs <- err
					return
				}
				switch i % 10 {
				case 0:
					cm.Data["v"] = "1"
					if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
						errs <- err
						return
					}
				case 1:
					if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
						errs <- err
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	want := serverState(t, c, ns, metav1.ListOptions{})
	if len(want) != total-total/10 {
		t.Fatalf("server has %d objects", len(want))
	}
	eventually(t, 60*time.Second, "cache equal to a fresh list", func() bool { return sameState(cacheState(inf.Cache()), want) })
	for name, rec := range map[string]*recorder[*corev1.ConfigMap]{"first": first, "second": second} {
		eventually(t, 30*time.Second, name+" handler caught up", func() bool {
			got, err := fold(rec.all())
			return err != nil || sameState(got, want)
		})
		got, err := fold(rec.all())
		if err != nil {
			t.Fatalf("%s handler: %v", name, err)
		}
		if !sameState(got, want) {
			t.Fatalf("%s handler's events fold to %d objects, server has %d", name, len(got), len(want))
		}
	}
}
