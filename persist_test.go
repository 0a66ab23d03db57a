package kinformer

import (
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/snapshot"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// codecRoundTrip encodes and decodes obj with T's codec.
func codecRoundTrip[T Object](t *testing.T, obj T) T {
	t.Helper()
	c := newCodec[T]()
	b, err := c.encode(obj)
	if err != nil {
		t.Fatalf("encode: %v", err)
	}
	got, err := c.decode(b)
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
	c := newCodec[*jsonOnlyObj]()
	obj := &jsonOnlyObj{ObjectMeta: metav1.ObjectMeta{Name: "j", Namespace: "n", Labels: map[string]string{"a": "b"}}, Value: 42}
	b, err := c.encode(obj)
	if err != nil {
		t.Fatal(err)
	}
	got, err := c.decode(b)
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

// typedClient returns a clientset's ConfigMaps client for ns on host; no
// request is made.
func typedClient(t *testing.T, host, ns string) any {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoreV1().ConfigMaps(ns)
}

func keyA(c *corev1.ConfigMap) string { return "a/" + c.Name }
func keyB(c *corev1.ConfigMap) string { return "b/" + c.Name }

func dropLabels(c *corev1.ConfigMap) (*corev1.ConfigMap, error) { c.Labels = nil; return c, nil }

func TestStateIdentity(t *testing.T) {
	const host = "https://cluster-1.example:6443"
	identity := func(lw any, change func(*Options[*corev1.ConfigMap])) string {
		o := &Options[*corev1.ConfigMap]{}
		if change != nil {
			change(o)
		}
		d := o.withDefaults()
		return stateIdentity(lw, &d)
	}
	base := identity(typedClient(t, host, "ns1"), nil)
	if base == "" {
		t.Fatal("no identity for a typed client")
	}
	if again := identity(typedClient(t, host, "ns1"), nil); again != base {
		t.Fatalf("equal options, other identities:\n%s\n%s", base, again)
	}
	if again := identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = MetaNamespaceKey[*corev1.ConfigMap] }); again != base {
		t.Errorf("KeyFunc MetaNamespaceKey given or defaulted, other identities:\n%s\n%s", base, again)
	}
	if again := identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }); again != identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }) {
		t.Errorf("the same KeyFunc, other identities")
	}

	differ := map[string]string{
		"namespace":         identity(typedClient(t, host, "ns2"), nil),
		"all namespaces":    identity(typedClient(t, host, ""), nil),
		"server":            identity(typedClient(t, "https://cluster-2.example:6443", "ns1"), nil),
		"labelSelector":     identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.LabelSelector = "app=web" }),
		"fieldSelector":     identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.FieldSelector = "metadata.name=x" }),
		"KeyFunc":           identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }),
		"Transform":         identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.Transform = dropLabels }),
		"KeepManagedFields": identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeepManagedFields = true }),
		"Name":              identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.Name = "other" }),
	}
	seen := map[string]string{base: "base"}
	for what, id := range differ {
		if id == "" {
			t.Errorf("%s: no identity", what)
			continue
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s changed, same identity as %s:\n%s", what, other, id)
		}
		seen[id] = what
	}
	// Two KeyFuncs are told apart by name.
	if a, b := identity(nil, func(o *Options[*corev1.ConfigMap]) { o.StateKey = "k"; o.KeyFunc = keyA }),
		identity(nil, func(o *Options[*corev1.ConfigMap]) { o.StateKey = "k"; o.KeyFunc = keyB }); a == b {
		t.Errorf("keyA and keyB, same identity:\n%s", a)
	}

	// A source that does not say what it watches needs a StateKey.
	if id := identity(newFakeServer(), nil); id != "" {
		t.Errorf("a ListerWatcher of our own and no StateKey: identity %q, want none", id)
	}
	if id := identity(nil, nil); id != "" {
		t.Errorf("no source and no StateKey: identity %q, want none", id)
	}
	withKey := identity(newFakeServer(), func(o *Options[*corev1.ConfigMap]) { o.StateKey = "https://h configmaps ns1" })
	if withKey == "" || !strings.Contains(withKey, "https://h configmaps ns1") {
		t.Errorf("with a StateKey: identity %q", withKey)
	}
	if other := identity(newFakeServer(), func(o *Options[*corev1.ConfigMap]) { o.StateKey = "https://h configmaps ns2" }); other == withKey {
		t.Errorf("another StateKey, same identity")
	}
}

func TestStatePath(t *testing.T) {
	dir := t.TempDir()
	names := []string{"", ".", "..", "../../etc", "/etc/passwd", `a\b`, "a/b", "con:nul", "pods", "deployments.apps",
		strings.Repeat("x", 10000), strings.Repeat("../", 100), "名前", "a\x00b", "-rf", " spaces "}
	for _, name := range names {
		p := statePath(dir, name, "identity")
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
	if statePath(dir, "pods", "a") == statePath(dir, "pods", "b") {
		t.Error("two identities, one file")
	}
	if statePath(dir, "pods", "a") != statePath(dir, "pods", "a") {
		t.Error("one identity, two files")
	}
}

// testPersister returns a persister of ConfigMaps in dir, with its reports.
func testPersister(t *testing.T, dir string) (*persister[*corev1.ConfigMap], func() []error) {
	t.Helper()
	o := (&Options[*corev1.ConfigMap]{StateDir: dir, StateKey: "test configmaps", StateNoSync: true, StateInterval: time.Hour}).withDefaults()
	var mu sync.Mutex // guards errs
	var errs []error
	p := newPersister[*corev1.ConfigMap](nil, &o, slog.New(slog.DiscardHandler), func(err error) {
		mu.Lock()
		errs = append(errs, err)
		mu.Unlock()
	})
	p.opts.LockTimeout = 100 * time.Millisecond
	return p, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
}

func openPersister(t *testing.T, p *persister[*corev1.ConfigMap]) (map[string]*corev1.ConfigMap, string) {
	t.Helper()
	items, rv, ok := p.open(true, MetaNamespaceKey[*corev1.ConfigMap], &intern.Sharer{})
	if !ok {
		t.Fatal("open: persistence off")
	}
	return items, rv
}

func labelled(ns, name, v string) *corev1.ConfigMap {
	c := cm(ns, name, "v", v)
	c.Labels = map[string]string{"app": "x"}
	c.ResourceVersion = v
	return c
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
		p.record(MetaNamespaceKey(c), c, false, rv)
		want[MetaNamespaceKey(c)] = c
	}
	del := func(c *corev1.ConfigMap, rv string) {
		p.record(MetaNamespaceKey(c), c, true, rv)
		delete(want, MetaNamespaceKey(c))
	}
	put(labelled("a", "one", "1"), "1")
	put(labelled("a", "two", "2"), "2")
	put(labelled("b", "three", "3"), "3")
	p.flush() // the flusher is not running: this goroutine may
	del(labelled("a", "two", "2"), "4")
	put(labelled("a", "one", "5"), "5")
	put(labelled("", "cluster", "6"), "6")
	p.advance("9") // a bookmark
	p.start()
	p.stop() // commits what is pending
	if errs := reports(); len(errs) > 0 {
		t.Fatalf("reports: %v", errs)
	}
	if p.committed != "9" {
		t.Fatalf("committed %q, want 9", p.committed)
	}

	// A later run of the same informer finds what it left.
	if _, rv, ok := p.open(false, MetaNamespaceKey[*corev1.ConfigMap], &intern.Sharer{}); !ok || rv != "9" {
		t.Fatalf("open(false) = %q, %t; want 9", rv, ok)
	}
	p.start()
	p.stop()

	// A new informer restores it.
	p2, reports2 := testPersister(t, dir)
	if p2.path != p.path {
		t.Fatalf("another path for the same options: %s, %s", p2.path, p.path)
	}
	got, rv := openPersister(t, p2)
	p2.start()
	p2.stop()
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

// An object that cannot be encoded drops the snapshot: the next start
// restores nothing and lists.
func TestPersisterEncodeFailure(t *testing.T) {
	dir := t.TempDir()
	p, reports := testPersister(t, dir)
	openPersister(t, p)
	p.record("a/one", labelled("a", "one", "1"), false, "1")
	p.flush()
	if p.committed != "1" {
		t.Fatalf("committed %q, want 1", p.committed)
	}
	good := p.codec.encode
	p.codec.encode = func(c *corev1.ConfigMap) ([]byte, error) {
		if c.Name == "bad" {
			return nil, errors.New("cannot encode")
		}
		return good(c)
	}
	p.record("a/bad", labelled("a", "bad", "2"), false, "2")
	p.record("a/three", labelled("a", "three", "3"), false, "3")
	p.start()
	p.stop()
	errs := reports()
	if len(errs) == 0 || !errors.Is(errs[0], ErrSnapshot) || !strings.Contains(errs[0].Error(), "cannot encode") {
		t.Fatalf("reports %v, want ErrSnapshot for the encoding", errs)
	}

	p2, _ := testPersister(t, dir)
	items, rv := openPersister(t, p2)
	p2.start()
	p2.stop()
	if rv != "" || len(items) != 0 {
		t.Fatalf("after an encoding failure: restored %d objects at %q, want none", len(items), rv)
	}
}

// A damaged file is reported, set aside, and replaced by an empty one.
func TestPersisterDamagedFile(t *testing.T) {
	dir := t.TempDir()
	p, reports := testPersister(t, dir)
	if err := os.WriteFile(p.path, []byte(strings.Repeat("not a snapshot ", 2000)), 0o600); err != nil {
		t.Fatal(err)
	}
	items, rv := openPersister(t, p)
	p.record("a/one", labelled("a", "one", "1"), false, "1")
	p.start()
	p.stop()
	if len(items) != 0 || rv != "" {
		t.Fatalf("a damaged file: %d objects at %q", len(items), rv)
	}
	if errs := reports(); len(errs) != 1 || !errors.Is(errs[0], ErrSnapshot) {
		t.Fatalf("reports %v, want one ErrSnapshot", errs)
	}
	if _, err := os.Stat(p.path + ".bad"); err != nil {
		t.Fatalf("not set aside: %v", err)
	}
	p2, _ := testPersister(t, dir)
	items, rv = openPersister(t, p2)
	p2.start()
	p2.stop()
	if rv != "1" || len(items) != 1 {
		t.Fatalf("the new file: %d objects at %q, want 1 at 1", len(items), rv)
	}
}

// One informer at a time: a second one runs without the file.
func TestPersisterInUse(t *testing.T) {
	dir := t.TempDir()
	p, _ := testPersister(t, dir)
	openPersister(t, p)
	p.start()
	defer p.stop()
	p2, reports := testPersister(t, dir)
	if _, _, ok := p2.open(true, MetaNamespaceKey[*corev1.ConfigMap], &intern.Sharer{}); ok {
		t.Fatal("a second persister opened a file in use")
	}
	if errs := reports(); len(errs) != 1 || !errors.Is(errs[0], snapshot.ErrInUse) || !errors.Is(errs[0], ErrSnapshot) {
		t.Fatalf("reports %v, want ErrSnapshot and ErrInUse", errs)
	}
}

// Without a StateKey, a source that does not say what it watches runs
// without a file, and says so.
func TestPersisterNoIdentity(t *testing.T) {
	o := (&Options[*corev1.ConfigMap]{StateDir: t.TempDir()}).withDefaults()
	var errs []error
	p := newPersister[*corev1.ConfigMap](newFakeServer(), &o, slog.New(slog.DiscardHandler), func(err error) { errs = append(errs, err) })
	if _, _, ok := p.open(true, o.KeyFunc, &intern.Sharer{}); ok {
		t.Fatal("persistence on without an identity")
	}
	if len(errs) != 1 || !errors.Is(errs[0], ErrSnapshot) || !strings.Contains(errs[0].Error(), "StateKey") {
		t.Fatalf("reports %v", errs)
	}
}

// FuzzDecodeObject: the snapshot's object codec never panics on bytes a
// damaged file may hold (the file's checksum catches most damage first),
// and what it decodes encodes again.
func FuzzDecodeObject(f *testing.F) {
	pod := &corev1.Pod{ObjectMeta: testMeta("p"), Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "i"}}}}
	pb, err := newCodec[*corev1.Pod]().encode(pod)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(pb)
	f.Add([]byte(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"a","namespace":"b"},"data":{"k":"v"},"n":[1,2.5,{"x":null}]}`))
	f.Add([]byte{})
	podCodec, uCodec := newCodec[*corev1.Pod](), newCodec[*unstructured.Unstructured]()
	f.Fuzz(func(t *testing.T, b []byte) {
		if obj, err := podCodec.decode(b); err == nil {
			if _, err := podCodec.encode(obj); err != nil {
				t.Fatalf("a decoded Pod does not encode: %v", err)
			}
		}
		if obj, err := uCodec.decode(b); err == nil {
			if _, err := uCodec.encode(obj); err != nil {
				t.Fatalf("a decoded object does not encode: %v", err)
			}
		}
	})
}
