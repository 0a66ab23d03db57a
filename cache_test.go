package kinformer

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func TestMetaNamespaceKey(t *testing.T) {
	for _, tc := range []struct {
		obj  *corev1.ConfigMap
		want string
	}{
		{cm("default", "web"), "default/web"},
		{cm("", "cluster-wide"), "cluster-wide"},
	} {
		if got := MetaNamespaceKey(tc.obj); got != tc.want {
			t.Errorf("MetaNamespaceKey(%s/%s) = %q, want %q", tc.obj.Namespace, tc.obj.Name, got, tc.want)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}
	if got := MetaNamespaceKey(ns); got != "kube-system" {
		t.Errorf("cluster-scoped key = %q", got)
	}
}

func TestCachePutRemoveReplace(t *testing.T) {
	c := newCache[*corev1.ConfigMap](nil, nil)
	a, b := cm("ns", "a"), cm("ns", "b")
	a.ResourceVersion, b.ResourceVersion = "1", "2"
	if _, existed := c.put("ns/a", plain(a)); existed {
		t.Fatal("put into empty cache reported an existing object")
	}
	c.put("ns/b", plain(b))
	if got, ok := c.Get(cm("ns", "a")); !ok || got != a {
		t.Fatalf("Get(a) = %v, %v", got, ok)
	}
	if _, ok := c.GetByKey("ns/zzz"); ok {
		t.Fatal("GetByKey found a missing key")
	}
	a2 := cm("ns", "a")
	a2.ResourceVersion = "3"
	if old, existed := c.put("ns/a", plain(a2)); !existed || old.obj != a {
		t.Fatalf("put returned old=%v existed=%v", old, existed)
	}
	if old, existed := c.remove("ns/b"); !existed || old.obj != b {
		t.Fatalf("remove returned %v %v", old, existed)
	}
	if _, existed := c.remove("ns/b"); existed {
		t.Fatal("second remove found the object")
	}
	if c.Len() != 1 || c.ListKeys()[0] != "ns/a" {
		t.Fatalf("keys = %v", c.ListKeys())
	}

	// replace: a unchanged (same rv), x new, a2 stays the cached instance.
	same := cm("ns", "a")
	same.ResourceVersion = "3"
	x := cm("ns", "x")
	x.ResourceVersion = "4"
	var got []string
	w, events := newTestWriter(c)
	items := map[string]ref[*corev1.ConfigMap]{}
	for _, o := range []*corev1.ConfigMap{same, x} {
		w.collect(items, arrivalOf(o), prepared[*corev1.ConfigMap])
	}
	w.replace(items, "4", nil)
	for _, e := range events() {
		got = append(got, string(e.Type)+" "+e.Object.Name)
	}
	if strings.Join(got, ",") != "ADDED x" {
		t.Fatalf("replace events = %v, want only ADDED x", got)
	}
	if o, _ := c.GetByKey("ns/a"); o != a2 {
		t.Fatal("replace swapped an unchanged object instead of keeping the cached one")
	}
	// replace: a changed, x gone.
	changed := cm("ns", "a")
	changed.ResourceVersion = "5"
	got = nil
	var oldSeen *corev1.ConfigMap
	w.replace(plainAll(map[string]*corev1.ConfigMap{"ns/a": changed}), "5", nil)
	for _, e := range events() {
		got = append(got, string(e.Type)+" "+e.Object.Name)
		if e.Type == Modified {
			oldSeen = e.Old
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "DELETED x,MODIFIED a" || oldSeen != a2 {
		t.Fatalf("replace events = %v (old %v)", got, oldSeen)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d", c.Len())
	}
}

func TestCacheCustomKeyFunc(t *testing.T) {
	c := newCache(func(o *corev1.ConfigMap) string { return "k:" + o.Name }, nil)
	c.put(c.Key(cm("ns", "a")), plain(cm("ns", "a")))
	if _, ok := c.GetByKey("k:a"); !ok {
		t.Fatal("custom key not used")
	}
	if _, ok := c.Get(cm("other", "a")); !ok {
		t.Fatal("Get does not use the custom key func")
	}
}

func TestCacheIndexes(t *testing.T) {
	byApp := func(o *corev1.ConfigMap) []string {
		if v, ok := o.Labels["app"]; ok {
			return []string{v}
		}
		return nil
	}
	c := newCache(nil, map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp})
	c.put("a/1", plain(cm("a", "1", "app", "web")))
	c.put("a/2", plain(cm("a", "2", "app", "db")))
	c.put("b/3", plain(cm("b", "3", "app", "web")))
	c.put("b/4", plain(cm("b", "4")))

	names := func(objs []*corev1.ConfigMap, err error) string {
		if err != nil {
			return "error: " + err.Error()
		}
		var s []string
		for _, o := range objs {
			s = append(s, o.Name)
		}
		sort.Strings(s)
		return strings.Join(s, ",")
	}
	for _, tc := range []struct{ index, value, want string }{
		{"app", "web", "1,3"},
		{"app", "db", "2"},
		{"app", "none", ""},
		{IndexNamespace, "a", "1,2"},
		{IndexNamespace, "b", "3,4"},
	} {
		if got := names(c.ByIndex(tc.index, tc.value)); got != tc.want {
			t.Errorf("ByIndex(%s, %s) = %q, want %q", tc.index, tc.value, got, tc.want)
		}
	}
	if _, err := c.ByIndex("nope", "x"); !errors.Is(err, ErrUnknownIndex) {
		t.Errorf("unknown index error = %v", err)
	}

	// Re-indexing on update and removal.
	c.put("a/1", plain(cm("a", "1", "app", "db")))
	c.remove("a/2")
	if got := names(c.ByIndex("app", "web")); got != "3" {
		t.Errorf("after update, web = %q", got)
	}
	if got := names(c.ByIndex("app", "db")); got != "1" {
		t.Errorf("after update, db = %q", got)
	}
	keys, _ := c.IndexKeys(IndexNamespace, "a")
	if len(keys) != 1 || keys[0] != "a/1" {
		t.Errorf("IndexKeys = %v", keys)
	}

	// A replace rebuilds the indexes.
	w, _ := newTestWriter(c)
	w.replace(plainAll(map[string]*corev1.ConfigMap{"c/9": cm("c", "9", "app", "web")}), "9", nil)
	if got := names(c.ByIndex("app", "web")); got != "9" {
		t.Errorf("after replace, web = %q", got)
	}
	if got := names(c.ByIndex(IndexNamespace, "a")); got != "" {
		t.Errorf("after replace, namespace a = %q", got)
	}
}

// The writer writes while readers read: under -race, no read sees a torn
// write, and the indexes end up right.
func TestCacheWriterWithConcurrentReaders(t *testing.T) {
	c := newCache[*corev1.ConfigMap](nil, nil)
	const writers, perWriter = 8, 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the one writer
		defer wg.Done()
		for w := range writers {
			for i := range perWriter {
				key := fmt.Sprintf("ns%d/o%d", w, i)
				c.put(key, plain(cm(fmt.Sprintf("ns%d", w), fmt.Sprintf("o%d", i))))
				if i%3 == 0 {
					c.remove(key)
				}
			}
		}
	}()
	for w := range writers {
		wg.Add(1)
		go func() { // readers alongside
			defer wg.Done()
			for range perWriter {
				c.List()
				c.ByIndex(IndexNamespace, fmt.Sprintf("ns%d", w))
				c.Len()
			}
		}()
	}
	wg.Wait()
	want := writers * (perWriter - perWriter/3)
	if c.Len() != want {
		t.Fatalf("Len = %d, want %d", c.Len(), want)
	}
	for w := range writers {
		objs, _ := c.ByIndex(IndexNamespace, fmt.Sprintf("ns%d", w))
		if len(objs) != perWriter-perWriter/3 {
			t.Fatalf("namespace index for ns%d has %d objects", w, len(objs))
		}
	}
}

// A reader never sees a half-applied replace: every List is all "old-" or
// all "new-" objects.
func TestCacheReplaceIsAtomic(t *testing.T) {
	c := newCache[*corev1.ConfigMap](nil, nil)
	gen := func(prefix string) map[string]*corev1.ConfigMap {
		m := map[string]*corev1.ConfigMap{}
		for i := range 500 {
			o := cm("ns", fmt.Sprintf("%s%d", prefix, i))
			m[MetaNamespaceKey(o)] = o
		}
		return m
	}
	w, _ := newTestWriter(c)
	w.replace(plainAll(gen("old-")), "1", nil)
	done := make(chan struct{})
	var mixed, reads int
	go func() {
		defer close(done)
		for range 2000 {
			var old, nw int
			for _, o := range c.List() {
				if strings.HasPrefix(o.Name, "old-") {
					old++
				} else {
					nw++
				}
			}
			reads++
			if old != 0 && nw != 0 || old+nw != 500 {
				mixed++
			}
		}
	}()
	for i := range 50 {
		if i%2 == 0 {
			w.replace(plainAll(gen("new-")), "1", nil)
		} else {
			w.replace(plainAll(gen("old-")), "1", nil)
		}
	}
	<-done
	if mixed != 0 {
		t.Fatalf("%d of %d reads saw a half-applied replace", mixed, reads)
	}
}

// The namespace index is built only when a query needs it, and kept from
// then on: every namespace query, before and after, through puts, removes
// and swaps, answers what a scan of the objects answers. With a KeyFunc
// of its own, GetNamespaced finds objects through the index too.
func TestCacheLazyNamespaceIndex(t *testing.T) {
	for _, custom := range []bool{false, true} {
		var keyFunc KeyFunc[*corev1.ConfigMap]
		if custom {
			keyFunc = func(o *corev1.ConfigMap) string { return "k:" + o.Namespace + ":" + o.Name }
		}
		c := newCache(keyFunc, nil)
		rng := rand.New(rand.NewPCG(1, uint64(len(fmt.Sprint(custom)))))
		check := func(step int) {
			t.Helper()
			for _, ns := range []string{"a", "b", "c", ""} {
				var want []string
				for _, k := range c.ListKeys() {
					if o, _ := c.GetByKey(k); o.Namespace == ns {
						want = append(want, k)
					}
				}
				sort.Strings(want)
				keys, err := c.IndexKeys(IndexNamespace, ns)
				sort.Strings(keys)
				if err != nil || strings.Join(keys, ",") != strings.Join(want, ",") {
					t.Fatalf("custom key %v, step %d: IndexKeys(%q) = %v, %v; want %v", custom, step, ns, keys, err, want)
				}
				objs, _ := c.ByIndex(IndexNamespace, ns)
				if sel := c.Select(ns, nil); len(objs) != len(want) || ns != "" && len(sel) != len(want) {
					t.Fatalf("step %d: ByIndex(%q) %d objects, Select %d, want %d", step, ns, len(objs), len(sel), len(want))
				}
				for _, name := range []string{"0", "1", "2", "3"} {
					o, ok := c.GetNamespaced(ns, name)
					_, want := c.GetByKey(c.Key(cm(ns, name)))
					if ok != want || ok && (o.Namespace != ns || o.Name != name) {
						t.Fatalf("step %d: GetNamespaced(%q, %q) = %v, %v; want found %v", step, ns, name, o, ok, want)
					}
				}
			}
		}
		w, _ := newTestWriter(c)
		for step := range 600 {
			// Mostly one namespace first (no index needed), then several.
			nss := []string{"a"}
			if step > 100 {
				nss = []string{"a", "b", "c", ""}
			}
			o := cm(nss[rng.IntN(len(nss))], fmt.Sprint(rng.IntN(4)))
			switch r := rng.IntN(20); {
			case r == 0:
				items := map[string]*corev1.ConfigMap{}
				for range rng.IntN(6) {
					o := cm(nss[rng.IntN(len(nss))], fmt.Sprint(rng.IntN(4)))
					items[c.Key(o)] = o
				}
				w.replace(plainAll(items), fmt.Sprint(step), nil)
			case r < 6:
				c.remove(c.Key(o))
			default:
				c.put(c.Key(o), plain(o))
			}
			if step%7 == 0 || step > 300 {
				check(step)
			}
			if step == 100 && c.nsBuilt.Load() {
				t.Fatal("the namespace index was built while all objects were in one namespace")
			}
		}
		if !c.nsBuilt.Load() {
			t.Fatal("the namespace index was never built")
		}
	}
}

// A cache whose index the caller provides as IndexNamespace keeps it
// from the start, as any other.
func TestCacheOwnNamespaceIndex(t *testing.T) {
	byLabel := func(o *corev1.ConfigMap) []string { return []string{o.Labels["ns"]} }
	c := newCache(nil, map[string]IndexFunc[*corev1.ConfigMap]{IndexNamespace: byLabel})
	c.put("a/1", plain(cm("a", "1", "ns", "x")))
	c.put("b/2", plain(cm("b", "2", "ns", "x")))
	if keys, _ := c.IndexKeys(IndexNamespace, "x"); len(keys) != 2 {
		t.Fatalf("own namespace index: %v", keys)
	}
	if objs := c.Select("x", nil); len(objs) != 2 {
		t.Fatalf("Select through the own index: %d objects", len(objs))
	}
}

// Readers building the namespace index race the writer's puts and swaps:
// under -race, nothing torn, and the index right at the end.
func TestCacheLazyNamespaceIndexConcurrent(t *testing.T) {
	for round := range 20 {
		c := newCache[*corev1.ConfigMap](nil, nil)
		w, _ := newTestWriter(c)
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 200 {
				o := cm(fmt.Sprintf("ns%d", i%3), fmt.Sprint(i))
				c.put(c.Key(o), plain(o))
				if i%50 == 49 {
					items := map[string]*corev1.ConfigMap{}
					for j := range i + 1 {
						o := cm(fmt.Sprintf("ns%d", j%3), fmt.Sprint(j))
						items[c.Key(o)] = o
					}
					w.replace(plainAll(items), fmt.Sprint(round*1000+i), nil)
				}
			}
		})
		for r := range 2 {
			wg.Go(func() {
				for i := range 100 {
					c.ByIndex(IndexNamespace, fmt.Sprintf("ns%d", (i+r)%3))
					c.GetNamespaced("ns1", "1")
				}
			})
		}
		wg.Wait()
		total := 0
		for ns := range 3 {
			keys, _ := c.IndexKeys(IndexNamespace, fmt.Sprintf("ns%d", ns))
			for _, k := range keys {
				if !strings.HasPrefix(k, fmt.Sprintf("ns%d/", ns)) {
					t.Fatalf("key %s under ns%d", k, ns)
				}
			}
			total += len(keys)
		}
		if total != c.Len() || c.Len() != 200 {
			t.Fatalf("round %d: %d keys indexed, %d cached, want 200", round, total, c.Len())
		}
	}
}

// With a KeyFunc that leaves the namespace out, a key can move to another
// namespace: deleted in one and created in the other, or updated. The
// namespace queries then answer for the new namespace only, whether the
// lazy namespace index was built before the move or after it.
func TestCacheKeyMovesNamespace(t *testing.T) {
	byName := func(o *corev1.ConfigMap) string { return o.Name }
	keys := func(objs []*corev1.ConfigMap) (out []string) {
		for _, o := range objs {
			out = append(out, MetaNamespaceKey(o))
		}
		return out
	}
	for _, tc := range []struct {
		name        string
		builtBefore bool // the namespace index is built before the move
		deleteFirst bool // the move is a delete and a create, not an update
	}{
		{"delete and create, index built before", true, true},
		{"delete and create, index built after", false, true},
		{"update, index built before", true, false},
		{"update, index built after", false, false},
	} {
		c := newCache(byName, nil)
		c.put("a", plain(cm("one", "a")))
		c.put("b", plain(cm("two", "b")))
		if tc.builtBefore {
			c.Select("one", nil) // two namespaces: the query builds the index
			if !c.nsBuilt.Load() {
				t.Fatalf("%s: the namespace index was not built", tc.name)
			}
		}
		if tc.deleteFirst {
			c.remove("a")
		}
		c.put("a", plain(cm("two", "a")))
		if got := c.Select("one", nil); len(got) != 0 {
			t.Errorf("%s: Select(one) = %v, want nothing", tc.name, keys(got))
		}
		if got, err := c.ByIndex(IndexNamespace, "one"); err != nil || len(got) != 0 {
			t.Errorf("%s: ByIndex(namespace, one) = %v, %v; want nothing", tc.name, keys(got), err)
		}
		if got, err := c.IndexKeys(IndexNamespace, "one"); err != nil || len(got) != 0 {
			t.Errorf("%s: IndexKeys(namespace, one) = %v, %v; want nothing", tc.name, got, err)
		}
		if got, ok := c.GetNamespaced("one", "a"); ok {
			t.Errorf("%s: GetNamespaced(one, a) = %s/%s, want nothing", tc.name, got.Namespace, got.Name)
		}
		if got, ok := c.GetNamespaced("two", "a"); !ok || got.Namespace != "two" {
			t.Errorf("%s: GetNamespaced(two, a) = %v, %v; want two/a", tc.name, got, ok)
		}
		if got, _ := c.IndexKeys(IndexNamespace, "two"); len(got) != 2 {
			t.Errorf("%s: IndexKeys(namespace, two) = %v, want a and b", tc.name, got)
		}
	}
}

// An IndexFunc that is not a pure function of its object (here it reads a
// variable that changes) files a removed object's key under a value the
// removal does not recompute: the stale key is skipped, ByIndex never
// returns a nil object for it.
func TestCacheStaleIndexKeyIsSkipped(t *testing.T) {
	gen := "x"
	impure := func(*corev1.ConfigMap) []string { return []string{gen} }
	c := newCache(nil, map[string]IndexFunc[*corev1.ConfigMap]{"gen": impure})
	c.put("a/1", plain(cm("a", "1")))
	c.put("a/2", plain(cm("a", "2")))
	gen = "y"
	c.remove("a/1") // removed from "y", left under "x"
	got, err := c.ByIndex("gen", "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] == nil || got[0].Name != "2" {
		t.Fatalf("ByIndex(gen, x) after a/1 was removed = %v (%d objects), want a/2 alone, no nil", got, len(got))
	}
}
