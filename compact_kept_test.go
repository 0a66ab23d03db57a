package kinformer

import (
	"errors"
	"runtime"
	"testing"
	"weak"

	corev1 "k8s.io/api/core/v1"
)

// The kept reads (GetKept, ListKept, ByIndexKept) of a compact cache
// return the cache's own object: decoded by the first, the same object
// for every other until it changes, through an index added meanwhile; a
// change made to it is seen by the next kept read and not by the copy
// reads; a new version is decoded anew, and the old kept object is freed.
func TestCompactKeptReads(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	s.put(cm("ns", "b", "app", "db"))
	byApp := func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} }
	inf, _ := contractStart(t, s, compactOpts(map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp}))
	c := inf.Cache()
	kept, ok := c.GetKept("ns/a")
	if !ok || kept.Labels["app"] != "web" {
		t.Fatalf("GetKept(ns/a) = %v, %v", kept, ok)
	}
	byKey := func(l []*corev1.ConfigMap) *corev1.ConfigMap {
		for _, o := range l {
			if o.Name == "a" {
				return o
			}
		}
		t.Fatalf("a not among %d objects", len(l))
		return nil
	}
	reads := map[string]func() *corev1.ConfigMap{
		"GetKept":  func() *corev1.ConfigMap { o, _ := c.GetKept("ns/a"); return o },
		"ListKept": func() *corev1.ConfigMap { return byKey(c.ListKept()) },
		"ByIndexKept": func() *corev1.ConfigMap {
			l, err := c.ByIndexKept("app", "web")
			if err != nil {
				t.Fatal(err)
			}
			return one(t, l)
		},
		"ByIndexKept namespace": func() *corev1.ConfigMap {
			l, err := c.ByIndexKept(IndexNamespace, "ns")
			if err != nil {
				t.Fatal(err)
			}
			return byKey(l)
		},
	}
	for name, read := range reads {
		if got := read(); got != kept {
			t.Fatalf("%s: another object than GetKept's", name)
		}
	}
	if _, err := c.ByIndexKept("nope", "x"); !errors.Is(err, ErrUnknownIndex) {
		t.Fatalf("ByIndexKept of no index: %v, want ErrUnknownIndex", err)
	}
	kept.Labels["seen"] = "yes"
	if o, _ := c.GetKept("ns/a"); o.Labels["seen"] != "yes" {
		t.Fatal("a change to the kept object is not seen by the next kept read")
	}
	if o, _ := c.GetByKey("ns/a"); o == kept || o.Labels["seen"] != "" {
		t.Fatal("a copy read returned the kept object, or saw the change made to it")
	}
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"name": func(o *corev1.ConfigMap) []string { return []string{o.Name} }}); err != nil {
		t.Fatal(err)
	}
	if o, _ := c.GetKept("ns/a"); o != kept {
		t.Fatal("after AddIndexers, GetKept returned another object")
	}
	// A new version: decoded anew; the old one's kept object is let go.
	old := weak.Make(kept)
	kept = nil
	s.put(cm("ns", "a", "app", "web", "v", "2"))
	eventually(t, "a's new version", func() bool { o, _ := c.GetByKey("ns/a"); return o.Labels["v"] == "2" })
	o, _ := c.GetKept("ns/a")
	if o.Labels["v"] != "2" || o.Labels["seen"] != "" {
		t.Fatalf("GetKept after an update: labels %v", o.Labels)
	}
	eventuallyCollected(t, "the old version's kept object", []weak.Pointer[corev1.ConfigMap]{old})
	eventually(t, "two kept objects (b's, from ListKept, and a's new version)", func() bool {
		runtime.GC()
		return c.s.KeptObjects() == 2
	})
}

// In a cache of objects the kept reads are the plain ones.
func TestKeptReadsOfACacheOfObjects(t *testing.T) {
	plainOnly(t)
	ps := newFakeServer()
	ps.put(cm("ns", "a"))
	plain, _ := contractStart(t, ps, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	got, _ := plain.Cache().GetByKey("ns/a")
	if k, _ := plain.Cache().GetKept("ns/a"); k != got || one(t, plain.Cache().ListKept()) != got {
		t.Fatal("a cache of objects: the kept reads returned another object than GetByKey")
	}
}
