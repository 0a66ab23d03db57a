package kinformer

import (
	"bytes"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/protowatch"
)

// Tests of the compact cache (Options.Compact) that hold in it alone; the
// contract's tests run on it too (KINFORMER_TEST_COMPACT=1, make test).

func compactOpts(indexers map[string]IndexFunc[*corev1.ConfigMap]) *Options[*corev1.ConfigMap] {
	return &Options[*corev1.ConfigMap]{Backoff: fastBackoff, Compact: true, Indexers: indexers}
}

// Every read decodes a new object: changing it changes neither the cache
// nor another reader's copy.
func TestCompactReadsAreTheCallersOwn(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	byApp := func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} }
	inf, _ := contractStart(t, s, compactOpts(map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp}))
	c := inf.Cache()
	if !c.Compact() {
		t.Fatal("Compact() = false with Options.Compact")
	}
	reads := map[string]func() *corev1.ConfigMap{
		"GetByKey":      func() *corev1.ConfigMap { o, _ := c.GetByKey("ns/a"); return o },
		"GetNamespaced": func() *corev1.ConfigMap { o, _ := c.GetNamespaced("ns", "a"); return o },
		"List":          func() *corev1.ConfigMap { return one(t, c.List()) },
		"Select":        func() *corev1.ConfigMap { return one(t, c.Select("ns", labels.Everything())) },
		"ByIndex": func() *corev1.ConfigMap {
			l, err := c.ByIndex("app", "web")
			if err != nil {
				t.Fatal(err)
			}
			return one(t, l)
		},
		"ByIndex namespace": func() *corev1.ConfigMap {
			l, err := c.ByIndex(IndexNamespace, "ns")
			if err != nil {
				t.Fatal(err)
			}
			return one(t, l)
		},
	}
	for name, read := range reads {
		a, b := read(), read()
		if a == nil || b == nil {
			t.Fatalf("%s: nothing read", name)
		}
		if a == b {
			t.Fatalf("%s: two reads returned the same object", name)
		}
		a.Labels["app"] = "changed"
		a.Data = map[string]string{"changed": "yes"}
		if b.Labels["app"] != "web" {
			t.Fatalf("%s: changing one read's labels changed another's", name)
		}
		if o, _ := c.GetByKey("ns/a"); o.Labels["app"] != "web" || o.Data["changed"] != "" {
			t.Fatalf("%s: changing a read object changed the cache: %v", name, o)
		}
	}
}

func one[T any](t *testing.T, l []T) T {
	t.Helper()
	if len(l) != 1 {
		t.Fatalf("read %d objects, want 1", len(l))
	}
	return l[0]
}

// An event's objects are decoded once, on the handlers' side: its handlers
// share them (as without Compact); Old is the state the cache held.
func TestCompactEventsDecodedOncePerEvent(t *testing.T) {
	s := newFakeServer()
	inf := New[*corev1.ConfigMap](s, compactOpts(nil))
	var mu sync.Mutex
	got := map[int][]cmEvent{}
	for i := range 2 {
		inf.AddHandler(func(e cmEvent) {
			if e.Type == Error {
				return // the 410 below: no object
			}
			mu.Lock()
			got[i] = append(got[i], e)
			mu.Unlock()
		})
	}
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	s.put(cm("ns", "a", "v", "1"))
	s.put(cm("ns", "a", "v", "2"))
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus}) // a re-list: its events are packed
	s.put(cm("ns", "a", "v", "3"))
	eventually(t, "events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(got[0]) >= 3 && len(got[1]) == len(got[0]) && got[0][len(got[0])-1].Object.Labels["v"] == "3"
	})
	mu.Lock()
	defer mu.Unlock()
	for i, e := range got[0] {
		f := got[1][i]
		if e.Object != f.Object || e.Old != f.Old {
			t.Fatalf("event %d (%s): the handlers got different objects: decoded per handler", i, e.Type)
		}
		if e.Type == Modified && e.Old.Labels["v"] == e.Object.Labels["v"] && e.Cause != CauseRelist {
			t.Fatalf("event %d: Modified with Old %v equal to Object", i, e.Old.Labels)
		}
	}
	if first := got[0][1]; first.Type != Modified || first.Old.Labels["v"] != "1" || first.Object.Labels["v"] != "2" {
		t.Fatalf("second event %s %v -> %v, want Modified v=1 -> v=2", first.Type, first.Old.Labels, first.Object.Labels)
	}
}

// Index values are computed once, as the object arrives: the IndexFunc is
// not called again to take it out of the index.
func TestCompactIndexValuesComputedOnce(t *testing.T) {
	s := newFakeServer()
	var calls atomic.Int32
	byApp := func(o *corev1.ConfigMap) []string { calls.Add(1); return []string{o.Labels["app"]} }
	inf, _ := contractStart(t, s, compactOpts(map[string]IndexFunc[*corev1.ConfigMap]{"app": byApp}))
	s.put(cm("ns", "a", "app", "web"))
	eventually(t, "a cached", func() bool { return inf.Cache().Len() == 1 })
	s.put(cm("ns", "a", "app", "db"))
	eventually(t, "a moved", func() bool { l, _ := inf.Cache().ByIndex("app", "db"); return len(l) == 1 })
	s.del("ns", "a")
	eventually(t, "a deleted", func() bool { return inf.Cache().Len() == 0 })
	if l, _ := inf.Cache().ByIndex("app", "db"); len(l) != 0 {
		t.Fatalf("deleted object still indexed: %v", l)
	}
	if n := calls.Load(); n != 2 {
		t.Fatalf("IndexFunc called %d times for two states, want 2", n)
	}
	// An index added later is computed from the packed objects.
	s.put(cm("ns", "b", "app", "web"))
	eventually(t, "b cached", func() bool { return inf.Cache().Len() == 1 })
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"name": func(o *corev1.ConfigMap) []string { return []string{o.Name} }}); err != nil {
		t.Fatal(err)
	}
	if l, err := inf.Cache().ByIndex("name", "b"); err != nil || len(l) != 1 {
		t.Fatalf("ByIndex(name, b) = %v, %v", l, err)
	}
	s.del("ns", "b")
	eventually(t, "b deleted", func() bool { return inf.Cache().Len() == 0 })
	if l, _ := inf.Cache().ByIndex("name", "b"); len(l) != 0 {
		t.Fatalf("deleted object still in the added index: %v", l)
	}
}

// Objects from a protobuf stream are kept as the bytes they came in
// (managedFields cut), neither decoded nor encoded again; with a
// Transform, the object is decoded, and encoded after it.
func TestCompactKeepsTheWireBytes(t *testing.T) {
	for _, transform := range []bool{false, true} {
		a, b := managedCM("a"), managedCM("b")
		var script bytes.Buffer
		script.Write(wireEvent(t, "ADDED", a))
		script.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
		b.ResourceVersion = "11"
		script.Write(wireEvent(t, "ADDED", b))
		srv := &protoServer{t: t, resources: watchableConfigMaps(), scripts: [][]byte{script.Bytes()}}
		opts := &Options[*corev1.ConfigMap]{Backoff: fastBackoff, Compact: true}
		if transform {
			opts.Transform = func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
				o.Labels = map[string]string{"t": "1"}
				return o, nil
			}
		}
		inf := New[*corev1.ConfigMap](clientFor(t, srv).CoreV1().ConfigMaps("ns"), opts)
		var made atomic.Int32 // objects the stream decoded (bookmarks included)
		mk := inf.loop.direct.Proto.New
		inf.loop.direct.Proto.New = func() protowatch.Object { made.Add(1); return mk() }
		inf.Start()
		contractSync(t, inf)
		eventually(t, "b cached", func() bool { return inf.Cache().Len() == 2 })
		inf.Stop()
		// Without a Transform nothing is decoded but the bookmarks (one
		// per watch: two), with one every object too. (The second watch
		// replays the script: a again, then b.)
		if n := made.Load(); (n > 2) != transform {
			t.Fatalf("transform %v: the stream decoded %d objects", transform, n)
		}
		// Nothing is encoded either without one; with one, the cache
		// encodes what the Transform made.
		if n := inf.Cache().s.Encodes(); (n == 0) == transform {
			t.Fatalf("transform %v: %d objects encoded", transform, n)
		}
		got, _ := inf.Cache().GetByKey("ns/b")
		if got.ManagedFields != nil || got.Data["k"] != b.Data["k"] || got.ResourceVersion != "11" || transform != (got.Labels["t"] == "1") {
			t.Fatalf("transform %v: cached %+v", transform, got)
		}
	}
}

// An informer of an interface type has no type to decode bytes into: it
// runs with a plain cache, and says so.
func TestCompactNeedsAConcreteType(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf := New[Object](s, &Options[Object]{Backoff: fastBackoff, Compact: true})
	if inf.Cache().Compact() {
		t.Fatal("a compact cache of an interface type")
	}
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(t.Context()); err != nil {
		t.Fatal(err)
	}
	if o, ok := inf.Cache().GetByKey("ns/a"); !ok || o.GetName() != "a" {
		t.Fatalf("GetByKey: %v %v", o, ok)
	}
}

// apiVersion and kind, which protobuf does not hold, are what they were:
// set by a Transform here.
func TestCompactKeepsTypeMeta(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	opts := compactOpts(nil)
	opts.Transform = func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		o.APIVersion, o.Kind = "v1", "ConfigMap"
		return o, nil
	}
	inf, rec := contractStart(t, s, opts)
	s.put(cm("ns", "a", "v", "2"))
	eventually(t, "the update", func() bool { return len(rec.lines(false, Modified)) == 1 })
	o, _ := inf.Cache().GetByKey("ns/a")
	if o.Kind != "ConfigMap" || o.APIVersion != "v1" {
		t.Fatalf("read %q %q, want v1 ConfigMap", o.APIVersion, o.Kind)
	}
	for _, e := range rec.all() {
		if e.Type == Modified && (e.Old.Kind != "ConfigMap" || e.Object.Kind != "ConfigMap") {
			t.Fatalf("Modified: Old kind %q, Object kind %q", e.Old.Kind, e.Object.Kind)
		}
	}
}

// GetNamespaced finds an object by namespace and name whatever the
// KeyFunc, decoding to compare names where the key is not namespace/name.
func TestCompactGetNamespacedOtherKey(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	s.put(cm("ns", "b"))
	opts := compactOpts(nil)
	opts.KeyFunc = func(o *corev1.ConfigMap) string { return "k-" + o.Name }
	inf, _ := contractStart(t, s, opts)
	for _, name := range []string{"a", "b"} {
		if o, ok := inf.Cache().GetNamespaced("ns", name); !ok || o.Name != name {
			t.Fatalf("GetNamespaced(ns, %s) = %v, %v", name, o, ok)
		}
	}
	if o, ok := inf.Cache().GetNamespaced("ns", "c"); ok {
		t.Fatalf("GetNamespaced(ns, c) = %v", o)
	}
	if o, ok := inf.Cache().GetByKey("k-b"); !ok || o.Name != "b" {
		t.Fatalf("GetByKey(k-b) = %v, %v", o, ok)
	}
}

// GetNamespaced with a KeyFunc of its own returns an object only if its
// namespace and name are the ones asked for: an object whose key happens
// to be namespace/name of another name is not that object (the KeyFunc
// here keys an object by its "alias" label).
func TestCacheGetNamespacedKeyOfAnotherName(t *testing.T) {
	for _, compact := range []bool{false, true} {
		s := newFakeServer()
		s.put(cm("ns", "x", "alias", "a")) // key ns/a
		s.put(cm("ns", "a", "alias", "z")) // key ns/z
		s.put(cm("other", "y", "alias", "b"))
		opts := &Options[*corev1.ConfigMap]{Compact: compact,
			KeyFunc: func(o *corev1.ConfigMap) string { return o.Namespace + "/" + o.Labels["alias"] }}
		inf, _ := contractStart(t, s, opts)
		c := inf.Cache()
		for _, tc := range []struct{ ns, name, want string }{
			{"ns", "a", "ns/a"},       // under key ns/z; key ns/a is x's
			{"ns", "x", "ns/x"},       // under key ns/a
			{"ns", "z", ""},           // key ns/z is a's
			{"ns", "b", ""},           // no object: no key either
			{"other", "b", ""},        // key other/b is y's
			{"other", "y", "other/y"}, // under key other/b
		} {
			o, ok := c.GetNamespaced(tc.ns, tc.name)
			got := ""
			if ok {
				got = o.Namespace + "/" + o.Name
			}
			if got != tc.want {
				t.Errorf("compact %v: GetNamespaced(%q, %q) = %q, want %q", compact, tc.ns, tc.name, got, tc.want)
			}
		}
	}
}

// nearCopies puts n ConfigMaps that differ as the objects of one kind in
// a cluster do (names, a few values) on s.
func nearCopies(s *fakeServer, n int) {
	for i := range n {
		o := cm("ns", fmt.Sprintf("frontend-%04d", i), "app", "frontend", "tier", "web", "release", fmt.Sprint("r", i%7))
		o.Data["config.yaml"] = fmt.Sprintf("server:\n  listen: 0.0.0.0:%d\n  workers: %d\n  upstream: http://backend-%d.ns.svc.cluster.local:8080\n"+
			"logging:\n  level: info\n  format: json\n  sampling: {initial: 100, thereafter: 100}\n"+
			"features:\n  checkout: true\n  recommendations: %v\n  experiments: [a%d, b%d]\n", 8000+i, 1+i%8, i%13, i%2 == 0, i%5, i%3)
		s.put(o)
	}
}
