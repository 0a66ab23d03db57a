package persist

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/kinformer/kinformer/internal/snapshot"
	"github.com/kinformer/kinformer/internal/squash"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
)

// codecRoundTrip encodes and decodes obj with T's codec.
func codecRoundTrip[T runtime.Object](t *testing.T, obj T) T {
	t.Helper()
	c := NewCodec[T](nil)
	b, err := c.Encode(obj)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := c.Decode(b)
	if err != nil {
		t.Fatalf("decode: %v", err)
	}
	return got
}

// testMeta is metadata as a typed client delivers it (no TypeMeta; times
// in whole seconds, as the server sends them).
func testMeta(name string) metav1.ObjectMeta {
	yes := true
	return metav1.ObjectMeta{
		Name: name, Namespace: "team-a", UID: types.UID("uid-" + name), ResourceVersion: "12345", Generation: 3,
		CreationTimestamp: metav1.NewTime(time.Date(2024, 5, 6, 7, 8, 9, 0, time.UTC)),
		Labels:            map[string]string{"app": "web", "tier": "front"},
		Annotations:       map[string]string{"note": "héllo\nworld", "empty": ""},
		OwnerReferences: []metav1.OwnerReference{{
			APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "web-7d9", UID: "rs-uid", Controller: &yes, BlockOwnerDeletion: &yes,
		}},
		Finalizers: []string{"example.com/keep"},
	}
}

func TestCodecPod(t *testing.T) {
	pod := &corev1.Pod{
		ObjectMeta: testMeta("web-1"),
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{{
				Name: "web", Image: "nginx:1.27", Args: []string{"-g", "daemon off;"},
				Env: []corev1.EnvVar{{Name: "A", Value: "1"}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("250m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				Ports: []corev1.ContainerPort{{ContainerPort: 8080, Protocol: corev1.ProtocolTCP}},
			}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, PodIP: "10.0.0.7", Conditions: []corev1.PodCondition{{
			Type: corev1.PodReady, Status: corev1.ConditionTrue, LastTransitionTime: metav1.NewTime(time.Date(2024, 5, 6, 7, 9, 0, 0, time.UTC)),
		}}},
	}
	got := codecRoundTrip(t, pod)
	if !equality.Semantic.DeepEqual(got, pod) {
		t.Fatalf("Pod after the codec:\n%+v\nwant\n%+v", got, pod)
	}
	if got == pod {
		t.Fatal("decode returned the same pointer")
	}
}

func TestCodecConfigMap(t *testing.T) {
	c := &corev1.ConfigMap{
		ObjectMeta: testMeta("settings"),
		Data:       map[string]string{"a.yaml": "x: 1\n", "b": ""},
		BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
	}
	got := codecRoundTrip(t, c)
	if !equality.Semantic.DeepEqual(got, c) {
		t.Fatalf("ConfigMap after the codec:\n%+v\nwant\n%+v", got, c)
	}
	// Nothing in it that Semantic forgives (times are UTC, no empty maps):
	// exactly equal but for the time's location.
	got.CreationTimestamp = metav1.NewTime(got.CreationTimestamp.UTC())
	if !reflect.DeepEqual(got, c) {
		t.Fatalf("ConfigMap after the codec is not reflect.DeepEqual:\n%+v\nwant\n%+v", got, c)
	}
}

func TestCodecUnstructured(t *testing.T) {
	u := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1",
		"kind":       "Widget",
		"metadata": map[string]any{
			"name": "w", "namespace": "team-a", "resourceVersion": "77",
			"labels": map[string]any{"app": "web"},
		},
		"spec": map[string]any{
			"replicas": int64(3),
			"big":      int64(1) << 60,
			"negative": int64(-7),
			"ratio":    1.5,
			"tiny":     1e-300,
			"enabled":  true,
			"nothing":  nil,
			"nested":   map[string]any{"deeper": map[string]any{"list": []any{int64(1), "two", 3.25, false, map[string]any{"k": "v"}, []any{}}}},
			"empty":    map[string]any{},
		},
	}}
	got := codecRoundTrip(t, u)
	if !reflect.DeepEqual(got, u) {
		t.Fatalf("Unstructured after the codec:\n%#v\nwant\n%#v", got.Object, u.Object)
	}
}

// A type of neither kind goes through encoding/json.
func TestCodecPlainJSON(t *testing.T) {
	c := NewCodec[*jsonOnlyObj](nil)
	obj := &jsonOnlyObj{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "n", Labels: map[string]string{"a": "b"}}, Value: 42}
	b, err := c.Encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.Decode(b)
	if err != nil || !reflect.DeepEqual(got, obj) {
		t.Fatalf("decode = %+v, %v; want %+v", got, err, obj)
	}
}

// jsonOnlyObj is an Object with no protobuf and no JSON methods of its own.
type jsonOnlyObj struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata"`
	Value             int `json:"value"`
}

func (j *jsonOnlyObj) DeepCopyObject() runtime.Object { c := *j; return &c }

func TestStatePath(t *testing.T) {
	dir := t.TempDir()
	names := []string{"", ".", "..", "../../etc", "/etc/passwd", `a\b`, "a/b", "con:nul", "pods", "deployments.apps",
		strings.Repeat("x", 10000), strings.Repeat("../", 100), "名前", "a\x00b", "-rf", " spaces "}
	key := []byte("0123456789abcdef0123456789abcdef")
	for _, name := range names {
		p := Path(dir, name, key, "identity")
		base := filepath.Base(p)
		if filepath.Dir(p) != dir || filepath.Join(dir, base) != p {
			t.Errorf("name %q: %q is not a file in %s", name, p, dir)
		}
		if strings.ContainsAny(base, `/\`+"\x00") || base == "." || base == ".." || len(base) > 255 {
			t.Errorf("name %q: file name %q", name, base)
		}
		if !strings.HasSuffix(base, ".kinformer") {
			t.Errorf("name %q: file name %q", name, base)
		}
		if err := os.WriteFile(p, nil, 0o600); err != nil {
			t.Errorf("name %q: %v", name, err)
		}
	}
	if Path(dir, "pods", key, "a") == Path(dir, "pods", key, "b") {
		t.Error("two identities, one file")
	}
	if Path(dir, "pods", key, "a") != Path(dir, "pods", key, "a") {
		t.Error("one identity, two files")
	}
	if Path(dir, "pods", key, "a") == Path(dir, "pods", []byte("another key"), "a") {
		t.Error("two keys, one file")
	}
}

// testPersister returns a persister of ConfigMaps in dir, with its reports.
func testPersister(t *testing.T, dir string) (*Persister[*corev1.ConfigMap], func() []error) {
	t.Helper()
	var mu sync.Mutex // guards errs
	var errs []error
	p := New(Config[*corev1.ConfigMap]{
		Dir:      dir,
		Name:     "configmaps",
		Identity: Identity{Source: "test configmaps"},
		Snapshot: snapshot.Options{NoSync: true, LockTimeout: 100 * time.Millisecond},
		Interval: time.Hour,
		Codec:    NewCodec[*corev1.ConfigMap](nil),
		Report: func(err error) {
			mu.Lock()
			errs = append(errs, fmt.Errorf("%w: %w", errReported, err))
			mu.Unlock()
		},
	})
	return p, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

// errReported marks what a Persister reported (the informer wraps it in
// its ErrSnapshot).
var errReported = errors.New("reported")

// key is the informer's default key of c.
func key(c *corev1.ConfigMap) string {
	if c.Namespace == "" {
		return c.Name
	}
	return c.Namespace + "/" + c.Name
}

// checkKey is what the informer checks of a restored object: its key.
func checkKey(k string, c *corev1.ConfigMap) error {
	if got := key(c); got != k {
		return fmt.Errorf("it has key %q", got)
	}
	return nil
}

func openPersister(t *testing.T, p *Persister[*corev1.ConfigMap]) (map[string]*corev1.ConfigMap, string) {
	t.Helper()
	items, rv, ok := p.Open(true, checkKey)
	if !ok {
		t.Fatal("open: persistence off")
	}
	return items, rv
}

// reload opens dir's file as a new informer would, and closes it.
func reload(t *testing.T, dir string) (map[string]*corev1.ConfigMap, string) {
	t.Helper()
	p, _ := testPersister(t, dir)
	items, rv := openPersister(t, p)
	p.Start()
	p.Stop()
	return items, rv
}

func labelled(ns, name, v string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, ResourceVersion: v, Labels: map[string]string{"app": "x"}},
		Data:       map[string]string{"v": v},
	}
}

func TestPersisterRestores(t *testing.T) {
	dir := t.TempDir()
	p, reports := testPersister(t, dir)
	items, rv := openPersister(t, p)
	if len(items) != 0 || rv != "" {
		t.Fatalf("a fresh file: %d objects at %q", len(items), rv)
	}
	want := map[string]*corev1.ConfigMap{}
	put := func(c *corev1.ConfigMap, rv string) {
		p.Record(key(c), c, false, rv)
		want[key(c)] = c
	}
	del := func(c *corev1.ConfigMap, rv string) {
		p.Record(key(c), c, true, rv)
		delete(want, key(c))
	}
	put(labelled("a", "one", "1"), "1")
	put(labelled("a", "two", "2"), "2")
	put(labelled("b", "three", "3"), "3")
	p.Flush() // the flusher is not running: this goroutine may
	del(labelled("a", "two", "2"), "4")
	put(labelled("a", "one", "5"), "5")
	put(labelled("", "cluster", "6"), "6")
	p.Advance("9") // a bookmark
	p.Start()
	p.Stop() // commits what is pending
	if errs := reports(); len(errs) > 0 {
		t.Fatalf("reports: %v", errs)
	}
	if p.Committed() != "9" {
		t.Fatalf("committed %q, want 9", p.Committed())
	}

	// A later run of the same informer finds what it left.
	if _, rv, ok := p.Open(false, checkKey); !ok || rv != "9" {
		t.Fatalf("open(false) = %q, %t; want 9", rv, ok)
	}
	p.Start()
	p.Stop()

	// A new informer restores it.
	p2, reports2 := testPersister(t, dir)
	got, rv := openPersister(t, p2)
	if p2.Path() != p.Path() {
		t.Fatalf("another path for the same options: %s, %s", p2.Path(), p.Path())
	}
	p2.Start()
	p2.Stop()
	if rv != "9" {
		t.Errorf("restored rv %q, want 9", rv)
	}
	if len(got) != len(want) {
		t.Errorf("restored %d objects, want %d", len(got), len(want))
	}
	for k, w := range want {
		if !equality.Semantic.DeepEqual(got[k], w) {
			t.Errorf("%s restored as %+v, want %+v", k, got[k], w)
		}
	}
	if errs := reports2(); len(errs) > 0 {
		t.Fatalf("reports: %v", errs)
	}
}

// committedOne returns an open persister of dir whose file holds one
// object, a/one, at resourceVersion 1, and its reports.
func committedOne(t *testing.T, dir string) (*Persister[*corev1.ConfigMap], func() []error) {
	t.Helper()
	p, reports := testPersister(t, dir)
	openPersister(t, p)
	p.Record("a/one", labelled("a", "one", "1"), false, "1")
	p.Flush()
	if p.Committed() != "1" {
		t.Fatalf("committed %q, want 1", p.Committed())
	}
	return p, reports
}

// An object that cannot be encoded drops the snapshot: the next start
// restores nothing and lists.
func TestPersisterEncodeFailure(t *testing.T) {
	dir := t.TempDir()
	p, reports := committedOne(t, dir)
	good := p.cfg.Codec.Encode
	p.cfg.Codec.Encode = func(c *corev1.ConfigMap) ([]byte, error) {
		if c.Name == "bad" {
			return nil, errors.New("cannot encode")
		}
		return good(c)
	}
	p.Record("a/bad", labelled("a", "bad", "2"), false, "2")
	p.Record("a/three", labelled("a", "three", "3"), false, "3")
	p.Start()
	p.Stop()
	errs := reports()
	if len(errs) == 0 || !errors.Is(errs[0], errReported) || !strings.Contains(errs[0].Error(), "cannot encode") {
		t.Fatalf("reports %v, want errReported for the encoding", errs)
	}

	items, rv := reload(t, dir)
	if rv != "" || len(items) != 0 {
		t.Fatalf("after an encoding failure: restored %d objects at %q, want none", len(items), rv)
	}
}

// An object that cannot be written (RecordLost, Batch.Lost: a compact
// cache's damaged bytes) drops the snapshot as one that cannot be encoded
// does: the next start lists rather than restore without it.
func TestPersisterLostObject(t *testing.T) {
	for _, batch := range []bool{false, true} {
		dir := t.TempDir()
		p, reports := committedOne(t, dir)
		if batch {
			b := p.Batch()
			b.Lost("a/one", errors.New("damaged bytes"))
			b.End("2")
		} else {
			p.RecordLost("a/one", errors.New("damaged bytes"), "2")
		}
		p.Start()
		p.Stop()
		if errs := reports(); len(errs) == 0 || !strings.Contains(errs[0].Error(), "damaged bytes") {
			t.Fatalf("batch %v: reports %v, want the loss", batch, errs)
		}
		if items, rv := reload(t, dir); rv != "" || len(items) != 0 {
			t.Fatalf("batch %v: after a lost object: restored %d objects at %q, want none", batch, len(items), rv)
		}
	}
}

// A damaged file is reported, set aside, and replaced by an empty one.
func TestPersisterDamagedFile(t *testing.T) {
	dir := t.TempDir()
	p, reports := testPersister(t, dir)
	openPersister(t, p) // to learn its path
	p.Start()
	p.Stop()
	if err := os.WriteFile(p.Path(), []byte(strings.Repeat("not a snapshot ", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	p, reports = testPersister(t, dir)
	items, rv := openPersister(t, p)
	p.Record("a/one", labelled("a", "one", "1"), false, "1")
	p.Start()
	p.Stop()
	if len(items) != 0 || rv != "" {
		t.Fatalf("a damaged file: %d objects at %q", len(items), rv)
	}
	if errs := reports(); len(errs) != 1 || !errors.Is(errs[0], errReported) {
		t.Fatalf("reports %v, want one errReported", errs)
	}
	if _, err := os.Stat(p.Path() + ".bad"); err != nil {
		t.Fatalf("not set aside: %v", err)
	}
	items, rv = reload(t, dir)
	if rv != "1" || len(items) != 1 {
		t.Fatalf("the new file: %d objects at %q, want 1 at 1", len(items), rv)
	}
}

// One informer at a time: a second one runs without the file.
func TestPersisterInUse(t *testing.T) {
	dir := t.TempDir()
	p, _ := testPersister(t, dir)
	openPersister(t, p)
	p.Start()
	defer p.Stop()
	p2, reports := testPersister(t, dir)
	if _, _, ok := p2.Open(true, checkKey); ok {
		t.Fatal("a second persister opened a file in use")
	}
	if errs := reports(); len(errs) != 1 || !errors.Is(errs[0], snapshot.ErrInUse) || !errors.Is(errs[0], errReported) {
		t.Fatalf("reports %v, want errReported and ErrInUse", errs)
	}
}

// FuzzDecodeObject: the snapshot's object codec never panics on bytes a
// damaged file may hold (the file's checksum catches most damage first),
// and what it decodes encodes again.
func FuzzDecodeObject(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: testMeta("p"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	pb, err := NewCodec[*corev1.Pod](nil).Encode(pod)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pb)
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"b"},"data":{"k":"v"},"n":[1,2.5,{"x":null}]}`))
	f.Add([]byte{})
	podCodec, uCodec := NewCodec[*corev1.Pod](nil), NewCodec[*unstructured.Unstructured](nil)
	f.Fuzz(func(t *testing.T, b []byte) {
		if obj, err := podCodec.Decode(b); err == nil {
			if _, err := podCodec.Encode(obj); err != nil {
				t.Fatalf("a decoded Pod does not encode: %v", err)
			}
		}
		if obj, err := uCodec.Decode(b); err == nil {
			if _, err := uCodec.Encode(obj); err != nil {
				t.Fatalf("a decoded object does not encode: %v", err)
			}
		}
	})
}

// The compact cache's codec of unstructured objects gives back what
// it was given, as the JSON decoder of watches makes it: int64s and
// float64s, nested maps and lists, empty ones, nulls, any string.
func TestReadCodecUnstructuredRoundTrip(t *testing.T) {
	c := NewReadCodec[*unstructured.Unstructured](nil)
	in := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "example.com/v1", "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": "ns", "labels": map[string]any{"a": "<b>&\u2028"}},
		"spec": map[string]any{
			"ints":   []any{int64(0), int64(-1), int64(1) << 62},
			"floats": []any{1.5, 1e-7, 1e21, -0.25},
			"empty":  map[string]any{}, "none": []any{}, "null": nil, "yes": true,
			"deep": []any{map[string]any{"x": []any{"y", int64(2)}}},
			"text": "é\t\"quoted\"\\",
		},
	}}
	b, err := c.Encode(in)
	if err != nil {
		t.Fatal(err)
	}
	out, err := c.Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(in.Object, out.Object) {
		t.Fatalf("decoded %#v\nwant %#v\nfrom %s", out.Object, in.Object, b)
	}
}

// OpenEncoded gives add a copy of each object's bytes, never bbolt's
// mapping of the file, which a compact cache would keep for as long as
// the object is cached: the mapping is gone once the file closes (or is
// remapped as it grows), and later commits reuse its pages.
func TestOpenEncodedCopies(t *testing.T) {
	dir := t.TempDir()
	p, _ := testPersister(t, dir)
	openPersister(t, p)
	want := map[string]string{}
	for i := range 50 {
		c := labelled("a", fmt.Sprintf("cm-%02d", i), "1")
		p.Record(key(c), c, false, "1")
		b, err := p.cfg.Codec.Encode(c)
		if err != nil {
			t.Fatal(err)
		}
		want[key(c)] = string(b)
	}
	p.Start()
	p.Stop()

	p2, reports := testPersister(t, dir)
	got := map[string][]byte{}
	rv, ok := p2.OpenEncoded(true, func([]*squash.Dict) {}, func(e Entry) error {
		got[e.Key] = e.Data
		return nil
	})
	if !ok || rv != "1" || len(got) != len(want) {
		t.Fatalf("OpenEncoded = %q, %t with %d objects; want 1, true with %d (reports %v)", rv, ok, len(got), len(want), reports())
	}
	// While the file is open: no object's bytes lie in its mapping.
	mapped := mappingsOf(t, p2.Path())
	for k, b := range got {
		at := uintptr(unsafe.Pointer(unsafe.SliceData(b)))
		for _, m := range mapped {
			if at >= m[0] && at < m[1] {
				t.Errorf("%s: OpenEncoded gave bbolt's mapping of the file (%#x in %#x-%#x), not a copy", k, at, m[0], m[1])
			}
		}
	}
	// Once it is closed: every object's bytes are still there, unchanged.
	p2.Start()
	p2.Stop()
	for k, b := range got {
		if s, err := readFaulting(b); err != nil {
			t.Errorf("%s: reading the bytes OpenEncoded gave, after the file closed: %v", k, err)
		} else if s != want[k] {
			t.Errorf("%s: after the file closed, the bytes OpenEncoded gave are %q, want %q", k, s, want[k])
		}
	}
	if errs := reports(); len(errs) > 0 {
		t.Fatalf("reports: %v", errs)
	}
}

// mappingsOf returns the address ranges where this process maps the file
// at path (from /proc/self/maps); none where there is no such file.
func mappingsOf(t *testing.T, path string) [][2]uintptr {
	t.Helper()
	b, err := os.ReadFile("/proc/self/maps")
	if err != nil {
		t.Logf("not checking the mapping: %v", err)
		return nil
	}
	var ranges [][2]uintptr
	for line := range strings.Lines(string(b)) {
		// start-end perms offset dev inode path
		f := strings.Fields(line)
		if len(f) < 6 || strings.Join(f[5:], " ") != path {
			continue
		}
		var m [2]uintptr
		if _, err := fmt.Sscanf(f[0], "%x-%x", &m[0], &m[1]); err != nil {
			t.Fatalf("/proc/self/maps: %q: %v", line, err)
		}
		ranges = append(ranges, m)
	}
	if len(ranges) == 0 {
		t.Fatalf("%s is not mapped while open", path)
	}
	return ranges
}

// readFaulting copies b, turning a fault (b was in a mapping since
// unmapped) into an error.
func readFaulting(b []byte) (s string, err error) {
	defer debug.SetPanicOnFault(debug.SetPanicOnFault(true))
	defer func() {
		if r := recover(); r != nil {
			err = fmt.Errorf("a fault, the memory is gone: %v", r)
		}
	}()
	return string(b), nil
}
