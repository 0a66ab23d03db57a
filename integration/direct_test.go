package integration

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// logCapture is a slog.Handler that keeps every record's message and
// attributes as one line.
type logCapture struct {
	mu    *sync.Mutex
	lines *[]string
}

func newLogCapture() logCapture { return logCapture{mu: &sync.Mutex{}, lines: &[]string{}} }

func (l logCapture) Enabled(context.Context, slog.Level) bool { return true }
func (l logCapture) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l logCapture) WithGroup(string) slog.Handler            { return l }
func (l logCapture) Handle(_ context.Context, r slog.Record) error {
	s := r.Message
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, s)
	return nil
}

func (l logCapture) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range *l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// both runs the same informer twice over the same collection: with the
// default direct decoding, which must be in use, and through the client's
// own Watch. It returns them once both have synced.
func both[T kinformer.Object, L runtime.Object](t *testing.T, lw kinformer.ListerWatcher[L], opts kinformer.Options[T]) (direct, client *kinformer.Informer[T], directRec, clientRec *recorder[T]) {
	t.Helper()
	direct, client, directRec, clientRec, _ = bothLogged(t, lw, opts)
	return direct, client, directRec, clientRec
}

// bothLogged is both, also returning the direct informer's logs.
func bothLogged[T kinformer.Object, L runtime.Object](t *testing.T, lw kinformer.ListerWatcher[L], opts kinformer.Options[T]) (direct, client *kinformer.Informer[T], directRec, clientRec *recorder[T], logs logCapture) {
	t.Helper()
	logs = newLogCapture()
	opts = *variant(&opts)
	dOpts, cOpts := opts, opts
	dOpts.Logger = slog.New(logs)
	cOpts.DisableDirectDecoding = true
	direct, client = kinformer.New[T](lw, &dOpts), kinformer.New[T](lw, &cOpts)
	inVariant(t, direct.Cache())
	inVariant(t, client.Cache())
	directRec, clientRec = &recorder[T]{}, &recorder[T]{}
	direct.AddHandler(directRec.handle)
	client.AddHandler(clientRec.handle)
	for _, inf := range []*kinformer.Informer[T]{direct, client} {
		inf.Start()
		t.Cleanup(inf.Stop)
		ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
		err := inf.WaitForSync(ctx)
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
	if !logs.has("decoding=direct") {
		t.Fatalf("the default informer did not decode its watch itself; its logs: %q", *logs.lines)
	}
	return direct, client, directRec, clientRec, logs
}

// sameCaches waits until both caches hold n objects and the same
// resourceVersions, then requires every object to be deeply equal.
func sameCaches[T kinformer.Object](t *testing.T, n int, a, b *kinformer.Cache[T]) {
	t.Helper()
	eventually(t, 20*time.Second, fmt.Sprintf("both caches at the same %d objects", n), func() bool {
		return a.Len() == n && equalStates(cacheState(a), cacheState(b))
	})
	for _, x := range a.List() {
		key := kinformer.MetaNamespaceKey(x)
		y, ok := b.GetByKey(key)
		if !ok || !reflect.DeepEqual(x, y) {
			t.Fatalf("%s decoded differently:\ndirect: %+v\nclient: %+v", key, x, y)
		}
	}
}

func equalStates(a, b map[string]string) bool { return reflect.DeepEqual(a, b) }

// perObject renders a recorder's events as "name: TYPE@rv TYPE@rv …".
func perObject[T kinformer.Object](r *recorder[T]) map[string]string {
	out := map[string]string{}
	for _, e := range r.all() {
		if e.Type == kinformer.Added || e.Type == kinformer.Modified || e.Type == kinformer.Deleted {
			out[e.Object.GetName()] += fmt.Sprintf(" %s@%s", e.Type, e.Object.GetResourceVersion())
		}
	}
	return out
}

func richConfigMap(ns string, i int) *corev1.ConfigMap {
	immutable := i%7 == 0
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("cm-%03d", i),
			Labels:      map[string]string{"app": "web", "shard": fmt.Sprint(i % 3)},
			Annotations: map[string]string{"note": strings.Repeat("n", i), "owner": "team-a"},
			Finalizers:  []string{"example.com/keep"}[:i%2],
		},
		Data:       map[string]string{"config.yaml": fmt.Sprintf("id: %d\n", i), "empty": ""},
		BinaryData: map[string][]byte{"bin": {byte(i), 0, 255}},
		Immutable:  &immutable,
	}
}

func richPod(ns string, i int) *corev1.Pod {
	grace := int64(30)
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{
			Namespace: ns, Name: fmt.Sprintf("pod-%02d", i),
			Labels:       map[string]string{"app": "shop", "pod-template-hash": "abc123"},
			GenerateName: "shop-abc123-",
		},
		Spec: corev1.PodSpec{
			Containers: []corev1.Container{{
				Name: "app", Image: "registry.example/shop:1.2.3",
				Env:   []corev1.EnvVar{{Name: "ID", Value: fmt.Sprint(i)}, {Name: "POD", ValueFrom: &corev1.EnvVarSource{FieldRef: &corev1.ObjectFieldSelector{FieldPath: "metadata.name"}}}},
				Ports: []corev1.ContainerPort{{Name: "http", ContainerPort: 8080}},
				Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m"), corev1.ResourceMemory: resource.MustParse("64Mi")},
				},
				VolumeMounts: []corev1.VolumeMount{{Name: "cfg", MountPath: "/etc/shop"}},
			}},
			Volumes:                       []corev1.Volume{{Name: "cfg", VolumeSource: corev1.VolumeSource{ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "shop"}}}}},
			Tolerations:                   []corev1.Toleration{{Key: "dedicated", Operator: corev1.TolerationOpEqual, Value: "shop", Effect: corev1.TaintEffectNoSchedule}},
			TerminationGracePeriodSeconds: &grace,
		},
	}
}

// The direct decoder and client-go's decoding give deeply equal objects and
// the same events, through a streaming list, creates, updates (including a
// server-side apply, which adds a managedFields entry), deletes and
// deletions of objects with finalizers.
func TestDirectDecodingMatchesClient(t *testing.T) {
	bothWays(t, testDirectDecodingMatchesClient)
}

func testDirectDecodingMatchesClient(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ctx := bounded(t, 2*time.Minute)
	for i := range 40 {
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, richConfigMap(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	direct, client, dRec, cRec := both(t, c.CoreV1().ConfigMaps(ns), kinformer.Options[*corev1.ConfigMap]{})
	sameCaches(t, 40, direct.Cache(), client.Cache())
	for _, o := range direct.Cache().List() {
		if o.ManagedFields != nil {
			t.Fatalf("%s kept managedFields", o.Name)
		}
	}

	for i := 40; i < 50; i++ {
		if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, richConfigMap(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	for i := 1; i < 50; i += 5 {
		if i%7 == 0 {
			continue // immutable
		}
		patch := fmt.Sprintf(`{"data":{"config.yaml":"id: %d\nv: 2\n"},"metadata":{"labels":{"app":"api"}}}`, i)
		if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, fmt.Sprintf("cm-%03d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	apply := fmt.Sprintf(`{"apiVersion":"v1","kind":"ConfigMap","metadata":{"name":"cm-002","namespace":%q},"data":{"applied":"yes"}}`, ns)
	if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "cm-002", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "kinformer-test"}); err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 50; i += 3 {
		if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, fmt.Sprintf("cm-%03d", i), metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// Those with a finalizer are only marked for deletion: MODIFIED with
	// deletionTimestamp, not DELETED.
	want := serverState(t, c, ns, metav1.ListOptions{})
	sameCaches(t, len(want), direct.Cache(), client.Cache())
	if got := cacheState(direct.Cache()); !equalStates(got, want) {
		t.Fatalf("direct cache %v, server %v", got, want)
	}
	eventually(t, 10*time.Second, "the same events", func() bool { return reflect.DeepEqual(perObject(dRec), perObject(cRec)) })
	if a, _ := direct.Cache().GetByKey(ns + "/cm-002"); a.Data["applied"] != "yes" {
		t.Fatalf("applied object: %+v", a)
	}
	if m, _ := direct.Cache().GetByKey(ns + "/cm-003"); m.DeletionTimestamp == nil {
		t.Fatalf("cm-003 (with a finalizer, deleted) has no deletionTimestamp")
	}
	// Remove the finalizers so the namespace can go.
	for _, o := range direct.Cache().List() {
		if len(o.Finalizers) > 0 {
			c.CoreV1().ConfigMaps(ns).Patch(ctx, o.Name, types.MergePatchType, []byte(`{"metadata":{"finalizers":null}}`), metav1.PatchOptions{})
		}
	}
}

func TestDirectDecodingPodsAndManagedFields(t *testing.T) {
	bothWays(t, testDirectDecodingPodsAndManagedFields)
}

func testDirectDecodingPodsAndManagedFields(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ctx := bounded(t, 2*time.Minute)
	for i := range 20 {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, richPod(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	direct, client, _, _ := both(t, c.CoreV1().Pods(ns), kinformer.Options[*corev1.Pod]{KeepManagedFields: true})
	sameCaches(t, 20, direct.Cache(), client.Cache())
	status := `{"status":{"phase":"Running","conditions":[{"type":"Ready","status":"True"}],"hostIP":"10.0.0.1"}}`
	if _, err := c.CoreV1().Pods(ns).Patch(ctx, "pod-03", types.MergePatchType, []byte(status), metav1.PatchOptions{}, "status"); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "pod-04", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 20*time.Second, "status and deletion seen", func() bool {
		p, ok := direct.Cache().GetByKey(ns + "/pod-03")
		_, gone := direct.Cache().GetByKey(ns + "/pod-04")
		return ok && p.Status.Phase == corev1.PodRunning && !gone
	})
	sameCaches(t, 19, direct.Cache(), client.Cache())
	// Kept managedFields are the server's, as a GET returns them.
	got, _ := direct.Cache().GetByKey(ns + "/pod-03")
	fresh, err := c.CoreV1().Pods(ns).Get(ctx, "pod-03", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(got.ManagedFields) == 0 || !reflect.DeepEqual(got.ManagedFields, fresh.ManagedFields) {
		t.Fatalf("managedFields kept %+v, server has %+v", got.ManagedFields, fresh.ManagedFields)
	}
}

// A clientset that asks for JSON still gets direct protobuf decoding (the
// informer chooses the watch's encoding itself), and one with
// DisableDirectDecoding watches through the client, in JSON as configured.
// The Accept headers of their watch requests (streaming lists and plain
// watches) show who decoded them.
func TestDirectDecodingWithAJSONClient(t *testing.T) {
	bothWays(t, testDirectDecodingWithAJSONClient)
}

func testDirectDecodingWithAJSONClient(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	cfg.ContentType = "application/json"
	cfg.AcceptContentTypes = "application/json"
	ns := testenv.NewNamespace(t, srv.Config())
	c := clientset(t, cfg)
	for i := range 5 {
		mustCreate(t, c, richConfigMap(ns, i))
	}
	dCount, cCount := &counting{}, &counting{}
	direct := kinformer.New[*corev1.ConfigMap](clientset(t, dCount.wrap(cfg)).CoreV1().ConfigMaps(ns), variant[*corev1.ConfigMap](nil))
	client := kinformer.New[*corev1.ConfigMap](clientset(t, cCount.wrap(cfg)).CoreV1().ConfigMaps(ns),
		variant(&kinformer.Options[*corev1.ConfigMap]{DisableDirectDecoding: true}))
	for _, inf := range []*kinformer.Informer[*corev1.ConfigMap]{direct, client} {
		inf.Start()
		t.Cleanup(inf.Stop)
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
	}
	// Objects created now come through the plain watches that follow the
	// streaming lists.
	for i := 5; i < 8; i++ {
		mustCreate(t, c, richConfigMap(ns, i))
	}
	sameCaches(t, 8, direct.Cache(), client.Cache())

	const protobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	dAccepts, cAccepts := dCount.watchAccepts(), cCount.watchAccepts()
	if len(dAccepts) < 2 || len(cAccepts) < 2 {
		t.Fatalf("watch requests: %d direct, %d through the client; want a streaming list and a watch each", len(dAccepts), len(cAccepts))
	}
	for _, a := range dAccepts {
		if a != protobufWatch {
			t.Fatalf("direct decoding: a watch asked for %q, want %q (all: %q)", a, protobufWatch, dAccepts)
		}
	}
	for _, a := range cAccepts {
		if !strings.Contains(a, "application/json") || strings.Contains(a, "protobuf") {
			t.Fatalf("DisableDirectDecoding: a watch asked for %q, want the client's JSON (all: %q)", a, cAccepts)
		}
	}
}
