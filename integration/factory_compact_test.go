package integration

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

var widgets = schema.GroupVersionResource{Group: "compact.kinformer.test", Version: "v1", Resource: "widgets"}

// createWidget makes the widgets CRD (once) and the Widget w in ns:
// labelled app=web, spec size 3 and colour blue.
func createWidget(t *testing.T, srv *testenv.Server, ns string) {
	t.Helper()
	res := createCRD(t, srv.Config(), widgets, "Widget")
	w := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": widgets.GroupVersion().String(), "kind": "Widget",
		"metadata": map[string]any{"name": "w", "namespace": ns, "labels": map[string]any{"app": "web"}},
		"spec":     map[string]any{"size": int64(3), "colour": "blue"},
	}}
	if _, err := res.Namespace(ns).Create(bounded(t, callTimeout), w, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

func podImage(p *corev1.Pod) []string { return []string{p.Spec.Containers[0].Image} }

// FactoryOptions.Compact reaches every kind of informer a Factory makes
// (Shared, Typed, Metadata, Dynamic): each cache is compact, reads give
// the server's objects (indexes included), each read is the caller's own
// to change, and events carry the objects as they were.
func TestFactoryCompact(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ctx := bounded(t, callTimeout)
	createWidget(t, srv, ns)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{Compact: true, Logger: slog.New(newLogCapture())})
	t.Cleanup(f.Stop)
	c4 := fourInformers(t, f, ns, map[string]kinformer.IndexFunc[*corev1.Pod]{"image": podImage})
	pods, typed, metas, dyn := c4.pods, c4.typed, c4.metas, c4.dyn
	// A consumer whose Options leave Compact false shares it.
	if again, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{}); err != nil || again != pods {
		t.Fatalf("second consumer: %p, %v; want the first informer", again, err)
	}
	updates := make(chan [2]string, 10) // old and new label of every Modified
	pods.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Modified: func(e kinformer.Event[*corev1.Pod]) {
		updates <- [2]string{e.Old.Labels["app"], e.Object.Labels["app"]}
	}})
	f.Start()
	waitForSync(t, f)

	for name, compact := range map[string]bool{"Shared": pods.Cache().Compact(), "Typed": typed.Cache().Compact(),
		"Metadata": metas.Cache().Compact(), "Dynamic": dyn.Cache().Compact()} {
		if !compact {
			t.Errorf("%s: FactoryOptions.Compact did not make its cache compact", name)
		}
	}

	// What a compact cache returns is what a plain one does.
	pf, _ := newFactory(t, srv.Config())
	p4 := fourInformers(t, pf, ns, nil)
	pf.Start()
	waitForSync(t, pf)
	sameObject(t, "Shared", pods.Cache(), p4.pods.Cache(), ns+"/p")
	sameObject(t, "Typed", typed.Cache(), p4.typed.Cache(), ns+"/p")
	sameObject(t, "Metadata", metas.Cache(), p4.metas.Cache(), ns+"/p")
	sameObject(t, "Dynamic", dyn.Cache(), p4.dyn.Cache(), ns+"/w")

	// Shared: Get, List and ByIndex; a changed read is the caller's own.
	p, ok := pods.Cache().GetNamespaced(ns, "p")
	if !ok || p.Spec.Containers[0].Image != "busybox" || p.Labels["app"] != "web" || p.UID == "" {
		t.Fatalf("Shared: Get = %v, %v", p, ok)
	}
	p.Labels["app"], p.Spec.Containers[0].Image = "changed", "changed"
	if byImage, err := pods.Cache().ByIndex("image", "busybox"); err != nil || len(byImage) != 1 || byImage[0].Labels["app"] != "web" {
		t.Fatalf("Shared: ByIndex(image, busybox) = %v, %v after a read was changed", byImage, err)
	}
	if l := pods.Cache().List(); len(l) != 1 || l[0].Spec.Containers[0].Image != "busybox" {
		t.Fatalf("Shared: List = %v after a read was changed", l)
	}

	// Typed: an Object of the Go type.
	obj, ok := typed.Cache().GetByKey(ns + "/p")
	tp, isPod := obj.(*corev1.Pod)
	if !ok || !isPod || tp.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("Typed: Get = %T %v, %v", obj, obj, ok)
	}
	tp.Spec.Containers[0].Image = "changed"
	if again, _ := typed.Cache().GetByKey(ns + "/p"); again.(*corev1.Pod).Spec.Containers[0].Image != "busybox" {
		t.Fatal("Typed: changing a read changed the cache")
	}

	// Metadata: labels and UID, nothing of the spec.
	m, ok := metas.Cache().GetByKey(ns + "/p")
	if !ok || m.Labels["app"] != "web" || m.UID != p.UID {
		t.Fatalf("Metadata: Get = %v, %v", m, ok)
	}
	m.Labels["app"] = "changed"
	if again, _ := metas.Cache().GetByKey(ns + "/p"); again.Labels["app"] != "web" {
		t.Fatal("Metadata: changing a read changed the cache")
	}

	// Dynamic: the custom resource's fields, as JSON gave them.
	u, ok := dyn.Cache().GetByKey(ns + "/w")
	if !ok {
		t.Fatal("Dynamic: w not cached")
	}
	if size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size"); size != 3 || u.GetLabels()["app"] != "web" {
		t.Fatalf("Dynamic: Get = %v", u.Object)
	}
	if err := unstructured.SetNestedField(u.Object, "red", "spec", "colour"); err != nil {
		t.Fatal(err)
	}
	again, _ := dyn.Cache().GetByKey(ns + "/w")
	if colour, _, _ := unstructured.NestedString(again.Object, "spec", "colour"); colour != "blue" {
		t.Fatalf("Dynamic: changing a read changed the cache: colour %q", colour)
	}

	// An update: its event has the old and the new object.
	cur, err := c.CoreV1().Pods(ns).Get(ctx, "p", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels["app"] = "api"
	if _, err := c.CoreV1().Pods(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case u := <-updates:
		if u != [2]string{"web", "api"} {
			t.Fatalf("Modified: old and new app label %q, want web and api", u)
		}
	case <-time.After(callTimeout):
		t.Fatal("no Modified event for the label change")
	}
	eventually(t, 10*time.Second, "the metadata informer's update", func() bool {
		m, _ := metas.Cache().GetByKey(ns + "/p")
		return m.Labels["app"] == "api"
	})
}

// factoryInformers are a factory's four kinds of informer of ns: pods as
// Shared, Typed and Metadata, and widgets as Dynamic.
type factoryInformers struct {
	pods  *kinformer.Informer[*corev1.Pod]
	typed *kinformer.Informer[kinformer.Object]
	metas *kinformer.Informer[*metav1.PartialObjectMetadata]
	dyn   *kinformer.Informer[*unstructured.Unstructured]
}

func fourInformers(t *testing.T, f *kinformer.Factory, ns string, podIndexers map[string]kinformer.IndexFunc[*corev1.Pod]) factoryInformers {
	t.Helper()
	var fi factoryInformers
	var errs [4]error
	fi.pods, errs[0] = kinformer.Shared(f, ns, &kinformer.Options[*corev1.Pod]{Indexers: podIndexers})
	fi.typed, errs[1] = f.Typed(&corev1.Pod{}, ns, nil)
	fi.metas, errs[2] = f.Metadata(corev1.SchemeGroupVersion.WithResource("pods"), ns, nil)
	fi.dyn, errs[3] = f.Dynamic(widgets, ns, nil)
	for _, err := range errs {
		if err != nil {
			t.Fatal(err)
		}
	}
	return fi
}

// sameObject checks that the compact cache holds key as the plain one
// does.
func sameObject[T kinformer.Object](t *testing.T, name string, compact, plain *kinformer.Cache[T], key string) {
	t.Helper()
	got, okGot := compact.GetByKey(key)
	want, okWant := plain.GetByKey(key)
	if !okGot || !okWant || !equality.Semantic.DeepEqual(got, want) {
		t.Errorf("%s: the compact cache's %s differs from the plain cache's:\n%#v\n%#v", name, key, got, want)
	}
}

// Without FactoryOptions.Compact, the first consumer's Compact is the
// informer's; a later consumer that asks otherwise is refused, naming
// Compact, as for StateDir.
func TestFactoryCompactFromTheFirstConsumer(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	f, _ := newFactory(t, srv.Config())
	cms, err := kinformer.Shared(f, ns, &kinformer.Options[*corev1.ConfigMap]{Compact: true})
	if err != nil {
		t.Fatal(err)
	}
	if !cms.Cache().Compact() {
		t.Fatal("the first consumer's Compact did not make the cache compact")
	}
	if _, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil); err == nil || !containsAll(err.Error(), "Compact", "configmaps") {
		t.Fatalf("a consumer without Compact: %v; want an error naming Compact", err)
	}
	plain, err := f.Typed(&corev1.ConfigMap{}, ns, nil)
	if err != nil {
		t.Fatal(err)
	}
	if plain.Cache().Compact() {
		t.Fatal("Typed without Compact, in a factory without it: compact")
	}
	if _, err := f.Typed(&corev1.ConfigMap{}, ns, &kinformer.Options[kinformer.Object]{Compact: true}); err == nil || !containsAll(err.Error(), "Compact") {
		t.Fatalf("Compact asked of a plain informer: %v; want an error naming Compact", err)
	}
}

func containsAll(s string, subs ...string) bool {
	for _, sub := range subs {
		if !strings.Contains(s, sub) {
			return false
		}
	}
	return true
}
