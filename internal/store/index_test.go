package store

import (
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"sort"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// The cache's reads and its index engine, written to as the informer's
// writer writes (Put, Remove, Swap).

func TestCacheCustomKeyFunc(t *testing.T) {
	c := New(func(o *corev1.ConfigMap) string { return "k:" + o.Name }, nil)
	c.Put(c.Key(cm("ns", "a")), plain(cm("ns", "a")))
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
	c := New(nil, map[string]func(*corev1.ConfigMap) []string{"app": byApp})
	c.Put("a/1", plain(cm("a", "1", "app", "web")))
	c.Put("a/2", plain(cm("a", "2", "app", "db")))
	c.Put("b/3", plain(cm("b", "3", "app", "web")))
	c.Put("b/4", plain(cm("b", "4")))

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
	c.Put("a/1", plain(cm("a", "1", "app", "db")))
	c.Remove("a/2")
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

	// A swap (a re-list) rebuilds the indexes.
	c.Swap(plainAll(map[string]*corev1.ConfigMap{"c/9": cm("c", "9", "app", "web")}))
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
	c := New[*corev1.ConfigMap](nil, nil)
	const writers, perWriter = 8, 300
	var wg sync.WaitGroup
	wg.Add(1)
	go func() { // the one writer
		defer wg.Done()
		for w := range writers {
			for i := range perWriter {
				key := fmt.Sprintf("ns%d/o%d", w, i)
				c.Put(key, plain(cm(fmt.Sprintf("ns%d", w), fmt.Sprintf("o%d", i))))
				if i%3 == 0 {
					c.Remove(key)
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

// A reader never sees a half-applied swap (a re-list): every List is all "old-" or
// all "new-" objects.
func TestCacheReplaceIsAtomic(t *testing.T) {
	c := New[*corev1.ConfigMap](nil, nil)
	gen := func(prefix string) map[string]*corev1.ConfigMap {
		m := map[string]*corev1.ConfigMap{}
		for i := range 500 {
			o := cm("ns", fmt.Sprintf("%s%d", prefix, i))
			m[MetaNamespaceKey(o)] = o
		}
		return m
	}
	c.Swap(plainAll(gen("old-")))
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
			c.Swap(plainAll(gen("new-")))
		} else {
			c.Swap(plainAll(gen("old-")))
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
		var keyFunc func(*corev1.ConfigMap) string
		if custom {
			keyFunc = func(o *corev1.ConfigMap) string { return "k:" + o.Namespace + ":" + o.Name }
		}
		c := New(keyFunc, nil)
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
				c.Swap(plainAll(items))
			case r < 6:
				c.Remove(c.Key(o))
			default:
				c.Put(c.Key(o), plain(o))
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
	c := New(nil, map[string]func(*corev1.ConfigMap) []string{IndexNamespace: byLabel})
	c.Put("a/1", plain(cm("a", "1", "ns", "x")))
	c.Put("b/2", plain(cm("b", "2", "ns", "x")))
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
		c := New[*corev1.ConfigMap](nil, nil)
		var wg sync.WaitGroup
		wg.Go(func() {
			for i := range 200 {
				o := cm(fmt.Sprintf("ns%d", i%3), fmt.Sprint(i))
				c.Put(c.Key(o), plain(o))
				if i%50 == 49 {
					items := map[string]*corev1.ConfigMap{}
					for j := range i + 1 {
						o := cm(fmt.Sprintf("ns%d", j%3), fmt.Sprint(j))
						items[c.Key(o)] = o
					}
					c.Swap(plainAll(items))
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
		c := New(byName, nil)
		c.Put("a", plain(cm("one", "a")))
		c.Put("b", plain(cm("two", "b")))
		if tc.builtBefore {
			c.Select("one", nil) // two namespaces: the query builds the index
			if !c.nsBuilt.Load() {
				t.Fatalf("%s: the namespace index was not built", tc.name)
			}
		}
		if tc.deleteFirst {
			c.Remove("a")
		}
		c.Put("a", plain(cm("two", "a")))
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
	c := New(nil, map[string]func(*corev1.ConfigMap) []string{"gen": impure})
	c.Put("a/1", plain(cm("a", "1")))
	c.Put("a/2", plain(cm("a", "2")))
	gen = "y"
	c.Remove("a/1") // removed from "y", left under "x"
	got, err := c.ByIndex("gen", "x")
	if err != nil {
		t.Fatal(err)
	}
	if len(got) != 1 || got[0] == nil || got[0].Name != "2" {
		t.Fatalf("ByIndex(gen, x) after a/1 was removed = %v (%d objects), want a/2 alone, no nil", got, len(got))
	}
}

// A key set keeps its keys in a slice up to maxFew and in a map beyond:
// either way each key once, removable, counted, and every one read.
func TestKeySet(t *testing.T) {
	for _, n := range []int{1, maxFew, maxFew + 1, 3 * maxFew} {
		for _, start := range []int{0, n} { // grown key by key, or made for n
			s := newKeys(start)
			want := map[string]bool{}
			for i := range n {
				k := fmt.Sprint("ns/k", i)
				s.add(k)
				s.add(k) // once
				want[k] = true
			}
			check := func(when string) {
				t.Helper()
				got := map[string]bool{}
				s.each(func(k string) {
					if got[k] {
						t.Fatalf("n=%d %s: %s read twice", n, when, k)
					}
					got[k] = true
				})
				if !maps.Equal(got, want) || s.len() != len(want) {
					t.Fatalf("n=%d %s: %d keys read, len %d, want %d", n, when, len(got), s.len(), len(want))
				}
				for k := range want {
					if !s.has(k) {
						t.Fatalf("n=%d %s: %s not filed", n, when, k)
					}
				}
				if s.has("ns/absent") {
					t.Fatalf("n=%d %s: an absent key is filed", n, when)
				}
			}
			check("filled")
			if (n > maxFew) != (s.many != nil) {
				t.Fatalf("n=%d: a map is %v", n, s.many != nil)
			}
			for i := 0; i < n; i += 2 {
				k := fmt.Sprint("ns/k", i)
				s.remove(k)
				delete(want, k)
			}
			s.remove("ns/absent")
			check("half removed")
		}
	}
	var none keySet
	if none.len() != 0 || none.has("x") {
		t.Fatal("the nil set is not empty")
	}
	none.remove("x")
	none.each(func(string) { t.Fatal("the nil set has a key") })
}
