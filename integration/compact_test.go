package integration

import (
	"fmt"
	"reflect"
	"sort"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// The cache of bytes (Options.Compact) against the real API server: what
// readers and handlers get is what a plain informer gives, and each read
// is the caller's own. (The contract, durable, factory, sharding and chaos
// tests also run with Compact on: bothWays.)

// Every read of a compact cache decodes a new object: two reads of one
// object are two objects, and a caller that changes what it read changes
// neither the cache, nor its indexes, nor another read.
func TestCompactReadsAreTheCallers(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 4 {
		mustCreate(t, c, richConfigMap(ns, i))
	}
	byShard := func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["shard"]} }
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{
		Compact: true, Indexers: map[string]kinformer.IndexFunc[*corev1.ConfigMap]{"shard": byShard}})
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	cache := inf.Cache()
	if !cache.Compact() {
		t.Fatal("Options.Compact, and the cache is not compact")
	}
	key := ns + "/cm-002"
	first, ok1 := cache.GetByKey(key)
	second, ok2 := cache.GetByKey(key)
	if !ok1 || !ok2 {
		t.Fatalf("%s not cached", key)
	}
	if first == second {
		t.Fatal("two reads of one object gave the same object: a compact cache's reads are shared")
	}
	if !reflect.DeepEqual(first, second) {
		t.Fatalf("two reads of one object differ:\n%+v\n%+v", first, second)
	}
	want := first.DeepCopy()
	// Every way of reading gives an object of its own, equal to the others.
	reads := map[string]*corev1.ConfigMap{}
	if o, ok := cache.Get(want); ok {
		reads["Get"] = o
	}
	if o, ok := cache.GetNamespaced(ns, "cm-002"); ok {
		reads["GetNamespaced"] = o
	}
	for _, o := range cache.List() {
		if o.Name == "cm-002" {
			reads["List"] = o
		}
	}
	for _, o := range cache.Select(ns, labels.Everything()) {
		if o.Name == "cm-002" {
			reads["Select"] = o
		}
	}
	byIndex, err := cache.ByIndex("shard", "2")
	if err != nil {
		t.Fatal(err)
	}
	for _, o := range byIndex {
		if o.Name == "cm-002" {
			reads["ByIndex"] = o
		}
	}
	if len(reads) != 5 {
		t.Fatalf("cm-002 read by %d of the 5 ways: %v", len(reads), reflect.ValueOf(reads).MapKeys())
	}
	for how, o := range reads {
		if o == first || o == second {
			t.Errorf("%s gave an object already handed out", how)
		}
		if !reflect.DeepEqual(o, want) {
			t.Errorf("%s gave %+v, want %+v", how, o, want)
		}
	}

	// The caller changes what it read, down to the bytes of a map.
	first.Data["config.yaml"] = "changed"
	first.BinaryData["bin"][0] = 42
	first.Labels["shard"] = "changed"
	first.Annotations["note"] = "changed"
	first.ResourceVersion = "1"
	first.UID = "changed"
	if got, _ := cache.GetByKey(key); !reflect.DeepEqual(got, want) {
		t.Fatalf("after the caller changed its read, Get gives %+v, want %+v", got, want)
	}
	if !reflect.DeepEqual(second, want) {
		t.Fatalf("another read changed with the first: %+v", second)
	}
	if keys, _ := cache.IndexKeys("shard", "changed"); len(keys) != 0 {
		t.Fatalf("the index follows the caller's change: %v", keys)
	}
	if keys, _ := cache.IndexKeys("shard", "2"); len(keys) != 1 || keys[0] != key {
		t.Fatalf("index shard=2: %v, want [%s]", keys, key)
	}

	// The cache still follows the server, from the object it holds.
	mustUpdate(t, c, ns, "cm-002", "new")
	eventually(t, 10*time.Second, "the update cached", func() bool {
		o, ok := cache.GetByKey(key)
		return ok && o.Data["v"] == "new"
	})
	got, _ := cache.GetByKey(key)
	if got.UID != want.UID || got.Labels["shard"] != "2" {
		t.Fatalf("after an update: %+v", got)
	}
}

// A Compact informer with a StateDir, restarted, restores the same objects
// and gives its handlers the same Added (CauseRestore) events, then the
// same changes, as a plain informer restarted beside it on its own file;
// only the one-object probe is listed.
func TestCompactWarmRestartEqualsPlain(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	const n = 60
	for i := range n {
		mustCreate(t, c, richConfigMap(ns, i))
	}
	type run struct {
		inf *kinformer.Informer[*corev1.ConfigMap]
		lw  *counting
		rec *recorder[*corev1.ConfigMap]
		// restored counts the restored objects that the cache gave back as
		// the event's own object when read in the handler.
		shared atomic.Int32
	}
	dirs := map[bool]string{false: t.TempDir(), true: t.TempDir()}
	start := func(compact bool) *run {
		r := &run{lw: &counting{}, rec: &recorder[*corev1.ConfigMap]{}}
		r.inf = kinformer.New[*corev1.ConfigMap](clientset(t, r.lw.wrap(srv.Config())).CoreV1().ConfigMaps(ns),
			&kinformer.Options[*corev1.ConfigMap]{StateDir: dirs[compact], StateInterval: 50 * time.Millisecond, Compact: compact})
		if r.inf.Cache().Compact() != compact {
			t.Fatalf("Options.Compact %v, Cache().Compact() %v", compact, r.inf.Cache().Compact())
		}
		reg := r.inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
			if e.Type == kinformer.Added && e.Cause == kinformer.CauseRestore {
				if o, ok := r.inf.Cache().GetByKey(e.Key); ok && o == e.Object {
					r.shared.Add(1)
				}
			}
			r.rec.handle(e)
		})
		r.inf.Start()
		t.Cleanup(r.inf.Stop)
		if err := r.inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatalf("compact=%v: WaitForSync: %v", compact, err)
		}
		eventually(t, 10*time.Second, "the handler to catch up with the sync", reg.HasSynced)
		return r
	}
	plain, compact := start(false), start(true)
	sameCaches(t, n, plain.inf.Cache(), compact.inf.Cache())
	plain.inf.Stop()
	compact.inf.Stop()

	mustUpdate(t, c, ns, "cm-003", "changed") // cm-000 and cm-007 are immutable
	mustDelete(t, c, ns, "cm-002")            // cm-001 and the other odd ones have a finalizer
	mustCreate(t, c, configMap(ns, "new", map[string]string{"app": "web"}, "x"))
	want := serverState(t, c, ns, metav1.ListOptions{})

	plain, compact = start(false), start(true)
	for name, r := range map[string]*run{"plain": plain, "compact": compact} {
		if got := cacheState(r.inf.Cache()); !sameState(got, want) {
			t.Fatalf("%s: at WaitForSync the cache has %d objects, differing from the server's %d", name, len(got), len(want))
		}
		eventually(t, 10*time.Second, name+" handler's events", func() bool { return len(r.rec.all()) >= n+3 })
	}
	time.Sleep(200 * time.Millisecond) // room for any spurious event
	sameCaches(t, len(want), plain.inf.Cache(), compact.inf.Cache())

	restored := func(r *run) map[string]*corev1.ConfigMap {
		out := map[string]*corev1.ConfigMap{}
		for _, e := range r.rec.all() {
			if e.Type == kinformer.Added && e.Cause == kinformer.CauseRestore {
				if _, twice := out[e.Key]; twice {
					t.Fatalf("%s restored twice", e.Key)
				}
				out[e.Key] = e.Object
			}
		}
		return out
	}
	pr, cr := restored(plain), restored(compact)
	if len(pr) != n || len(cr) != n {
		t.Fatalf("restored %d objects plain, %d compact; want %d", len(pr), len(cr), n)
	}
	for k, p := range pr {
		if !reflect.DeepEqual(p, cr[k]) {
			t.Fatalf("%s restored differently:\nplain:   %+v\ncompact: %+v", k, p, cr[k])
		}
	}
	if err := sameEvents(plain.rec, compact.rec); err != nil {
		t.Fatal(err)
	}
	if lists, _, _ := compact.lw.calls(); len(lists) != 1 || lists[0].Limit != 1 {
		t.Fatalf("lists on the compact warm restart: %+v, want only the one-object probe", lists)
	}
	if n := compact.shared.Load(); n > 0 {
		t.Fatalf("%d restored objects were the cache's own: a compact cache hands out objects of the caller's", n)
	}

	// The compact informer's file (its objects compressed against its
	// dictionary, which it keeps beside them) restores an informer with
	// Compact turned off as well.
	compact.inf.Stop()
	lw := &counting{}
	back := kinformer.New[*corev1.ConfigMap](clientset(t, lw.wrap(srv.Config())).CoreV1().ConfigMaps(ns),
		&kinformer.Options[*corev1.ConfigMap]{StateDir: dirs[true], StateInterval: 50 * time.Millisecond})
	backRec := &recorder[*corev1.ConfigMap]{}
	back.AddHandler(backRec.handle)
	back.Start()
	t.Cleanup(back.Stop)
	if err := back.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("plain on the compact file: WaitForSync: %v", err)
	}
	if got := cacheState(back.Cache()); !sameState(got, want) {
		t.Fatalf("plain on the compact file: %d objects, differing from the server's %d", len(got), len(want))
	}
	if lists, _, _ := lw.calls(); len(lists) != 1 || lists[0].Limit != 1 {
		t.Fatalf("lists of a plain informer on the compact file: %+v, want only the one-object probe", lists)
	}
	for _, e := range backRec.all() {
		if e.Type == kinformer.Error {
			t.Fatalf("plain on the compact file: an error: %v", e.Err)
		}
	}
}

// A Compact informer and a plain one, side by side over the same objects,
// give their handlers the same events: Added, Modified with Old, Deleted,
// through a list, creates, patches, an apply, a deletion held by a
// finalizer and deletes; for a built-in type (protobuf) and a custom
// resource (JSON). The compact informer's event objects are not the
// cache's, and its handlers share each event's objects.
func TestCompactEventsEqualPlain(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	c := clientset(t, cfg)
	t.Run("configmaps", func(t *testing.T) {
		ns := testenv.NewNamespace(t, cfg)
		cms := c.CoreV1().ConfigMaps(ns)
		for i := range 6 {
			mustCreate(t, c, richConfigMap(ns, i))
		}
		byShard := func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["shard"]} }
		plain, compact := sideBySide(t, cms, kinformer.Options[*corev1.ConfigMap]{
			Indexers: map[string]kinformer.IndexFunc[*corev1.ConfigMap]{"shard": byShard}}, func() {
			ctx := bounded(t, time.Minute)
			for i := 6; i < 10; i++ {
				mustCreate(t, c, richConfigMap(ns, i))
			}
			for _, i := range []int{0, 3, 5, 9} {
				patch := fmt.Sprintf(`{"data":{"v":"%d"},"metadata":{"labels":{"shard":"moved"}}}`, i)
				if i%7 == 0 { // immutable: its metadata only
					patch = `{"metadata":{"labels":{"shard":"moved"},"annotations":{"note":null}}}`
				}
				if _, err := cms.Patch(ctx, fmt.Sprintf("cm-%03d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			apply := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-004","namespace":%q},"data":{"applied":"yes"}}`, ns)
			if _, err := cms.Patch(ctx, "cm-004", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "kinformer-test", Force: new(true)}); err != nil {
				t.Fatal(err)
			}
			for _, name := range []string{"cm-001", "cm-002", "cm-008"} { // cm-001 has a finalizer: Modified first
				mustDelete(t, c, ns, name)
			}
			if _, err := cms.Patch(ctx, "cm-001", types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
				t.Fatal(err)
			}
		})
		for _, v := range []string{"0", "1", "2", "moved"} {
			p, _ := plain.Cache().ByIndex("shard", v)
			q, _ := compact.Cache().ByIndex("shard", v)
			sortByName(p)
			sortByName(q)
			if !reflect.DeepEqual(p, q) {
				t.Fatalf("ByIndex(shard, %s) differs:\nplain:   %v\ncompact: %v", v, p, q)
			}
		}
		// Remove the finalizers left, so that the namespace can go.
		for _, o := range compact.Cache().List() {
			if len(o.Finalizers) > 0 {
				if _, err := cms.Patch(bounded(t, callTimeout), o.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{}); err != nil {
					t.Error(err)
				}
			}
		}
	})
	t.Run("custom resources", func(t *testing.T) {
		gvr := schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "bolts"}
		res := createCRD(t, cfg, gvr, "Bolt")
		ns := testenv.NewNamespace(t, cfg)
		ctx := bounded(t, time.Minute)
		bolt := func(i int) *unstructured.Unstructured {
			b := sprocket(ns, i)
			b.SetKind("Bolt")
			return b
		}
		for i := range 6 {
			if _, err := res.Namespace(ns).Create(ctx, bolt(i), metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
		sideBySide(t, res.Namespace(ns), kinformer.Options[*unstructured.Unstructured]{KeepManagedFields: true}, func() {
			for i := 6; i < 9; i++ {
				if _, err := res.Namespace(ns).Create(ctx, bolt(i), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 0; i < 9; i += 2 {
				patch := fmt.Sprintf(`{"spec":{"replicas":%d,"ratio":1e-3,"tags":null,"nested":{"deep":[[1,2.5,"x"]]}}}`, i*10)
				if _, err := res.Namespace(ns).Patch(ctx, fmt.Sprintf("sp-%03d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			apply := fmt.Sprintf(`{"apiVersion":%q,"kind":"Bolt","metadata":{"name":"sp-003","namespace":%q},"spec":{"applied":true}}`, gvr.GroupVersion(), ns)
			if _, err := res.Namespace(ns).Patch(ctx, "sp-003", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "kinformer-test", Force: new(true)}); err != nil {
				t.Fatal(err)
			}
			for _, i := range []int{1, 5, 7} {
				if err := res.Namespace(ns).Delete(ctx, fmt.Sprintf("sp-%03d", i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
		})
	})
}

// sideBySide starts a plain and a compact informer with opts over lw, two
// handlers on each, runs change once both have synced, and waits until
// both caches equal the server's objects (names and resourceVersions).
// It requires the same events of both (sameEvents) and deeply equal
// caches; of the compact informer, event objects that are not the
// cache's (read back in a handler) and shared by its two handlers.
func sideBySide[T kinformer.Object, L runtime.Object](t *testing.T, lw kinformer.ListerWatcher[L], opts kinformer.Options[T], change func()) (plain, compact *kinformer.Informer[T]) {
	t.Helper()
	copts := opts
	copts.Compact = true
	plain, compact = kinformer.New[T](lw, &opts), kinformer.New[T](lw, &copts)
	if plain.Cache().Compact() || !compact.Cache().Compact() {
		t.Fatalf("Cache().Compact(): %v without Options.Compact, %v with it", plain.Cache().Compact(), compact.Cache().Compact())
	}
	recs := map[*kinformer.Informer[T]][2]*recorder[T]{}
	var shared atomic.Int32 // compact events whose object a Get returned
	compact.AddHandler(func(e kinformer.Event[T]) {
		if e.Type == kinformer.Added || e.Type == kinformer.Modified {
			if o, ok := compact.Cache().GetByKey(e.Key); ok && any(o) == any(e.Object) {
				shared.Add(1)
			}
		}
	})
	for _, inf := range []*kinformer.Informer[T]{plain, compact} {
		r := [2]*recorder[T]{{}, {}}
		recs[inf] = r
		inf.AddHandler(r[0].handle)
		inf.AddHandler(r[1].handle)
		inf.Start()
		t.Cleanup(inf.Stop)
	}
	for _, inf := range []*kinformer.Informer[T]{plain, compact} {
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
	}
	change()
	// The server's state, as a fresh informer lists it.
	fresh := kinformer.New[T](lw, nil)
	fresh.Start()
	defer fresh.Stop()
	if err := fresh.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	want := cacheState(fresh.Cache())
	for _, inf := range []*kinformer.Informer[T]{plain, compact} {
		for _, rec := range recs[inf] {
			eventually(t, 20*time.Second, "the handlers to reach the server's state", func() bool {
				got, err := fold(rec.all())
				return err != nil || sameState(got, want)
			})
			if got, err := fold(rec.all()); err != nil || !sameState(got, want) {
				t.Fatalf("a handler's events fold to %d objects (%v), the server has %d", len(got), err, len(want))
			}
		}
	}
	sameCaches(t, len(want), plain.Cache(), compact.Cache())
	if err := sameEvents(recs[plain][0], recs[compact][0]); err != nil {
		t.Fatal(err)
	}
	if err := sameEvents(recs[compact][0], recs[compact][1]); err != nil {
		t.Fatalf("the compact informer's two handlers: %v", err)
	}
	a, b := objectEvents(recs[compact][0]), objectEvents(recs[compact][1])
	for i := range a {
		if any(a[i].Object) != any(b[i].Object) || any(a[i].Old) != any(b[i].Old) {
			t.Fatalf("event %d (%s %s): the compact informer's two handlers got objects of their own, want one decode per event", i, a[i].Type, a[i].Key)
		}
	}
	if n := shared.Load(); n > 0 {
		t.Fatalf("%d of the compact informer's event objects were also what its cache's Get returned: want objects of the caller's", n)
	}
	return plain, compact
}

// objectEvents returns the Added, Modified and Deleted events r received,
// in order.
func objectEvents[T kinformer.Object](r *recorder[T]) []kinformer.Event[T] {
	var out []kinformer.Event[T]
	for _, e := range r.all() {
		if e.Type == kinformer.Added || e.Type == kinformer.Modified || e.Type == kinformer.Deleted {
			out = append(out, e)
		}
	}
	return out
}

// sameEvents requires two recorders to have received, object by object,
// the same object events: type, cause, key, and deeply equal Object and
// Old. (The order across objects, and the informer's resourceVersion at
// each event, may differ between informers.)
func sameEvents[T kinformer.Object](a, b *recorder[T]) error {
	perKey := func(r *recorder[T]) map[string][]kinformer.Event[T] {
		out := map[string][]kinformer.Event[T]{}
		for _, e := range objectEvents(r) {
			e.ResourceVersion = ""
			out[e.Key] = append(out[e.Key], e)
		}
		return out
	}
	x, y := perKey(a), perKey(b)
	if len(x) != len(y) {
		return fmt.Errorf("events of %d objects, and of %d", len(x), len(y))
	}
	for k, ex := range x {
		ey := y[k]
		if len(ex) != len(ey) {
			return fmt.Errorf("%s: %d events, and %d: %v / %v", k, len(ex), len(ey), kinds(ex), kinds(ey))
		}
		for i := range ex {
			if !reflect.DeepEqual(ex[i], ey[i]) {
				return fmt.Errorf("%s: event %d differs:\n%+v\n%+v", k, i, ex[i], ey[i])
			}
		}
	}
	return nil
}

func kinds[T kinformer.Object](events []kinformer.Event[T]) []string {
	var out []string
	for _, e := range events {
		out = append(out, fmt.Sprintf("%s(%s)", e.Type, e.Cause))
	}
	return out
}

func sortByName[T kinformer.Object](objs []T) {
	sort.Slice(objs, func(i, j int) bool { return objs[i].GetName() < objs[j].GetName() })
}
