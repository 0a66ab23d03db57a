package integration

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"

	"github.com/kinformer/kinformer"
	kclientgo "github.com/kinformer/kinformer/clientgo"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Options.Fields against the real API server: every way an object reaches
// the cache (protobuf watch-list, paged list through the clientset, the
// client's own Watch, JSON for unstructured objects), plain and compact,
// gives Get, List, ByIndex and events the projected object, and nothing
// else of it.

var podFields = []string{"metadata.labels", "metadata.ownerReferences", "spec.nodeName", "spec.containers.image", "status.phase"}

// projectPod is what podFields keep of p, written out by hand.
func projectPod(p *corev1.Pod) *corev1.Pod {
	out := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID,
		ResourceVersion: p.ResourceVersion, Labels: p.Labels, OwnerReferences: p.OwnerReferences}}
	out.Spec.NodeName = p.Spec.NodeName
	for _, c := range p.Spec.Containers {
		out.Spec.Containers = append(out.Spec.Containers, corev1.Container{Image: c.Image})
	}
	out.Status.Phase = p.Status.Phase
	return out
}

func projPod(ns string, i int) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("p-%03d", i),
			Labels:      map[string]string{"app": "web", "i": fmt.Sprint(i)},
			Annotations: map[string]string{"note": strings.Repeat("a", 200)}},
		Spec: corev1.PodSpec{
			NodeName: fmt.Sprintf("node-%d", i%3),
			Containers: []corev1.Container{
				{Name: "main", Image: fmt.Sprintf("registry.example/web:%d", i), Args: []string{"--port", "8080"},
					Env: []corev1.EnvVar{{Name: "A", Value: strings.Repeat("v", 100)}}},
				{Name: "side", Image: "registry.example/side:1"},
			},
		},
	}
}

// withPods makes a namespace holding projPod 0 to n-1 (from first).
func withPods(t *testing.T, first, n int) (srv *testenv.Server, c *kubernetes.Clientset, ns string) {
	t.Helper()
	srv = testenv.Shared(t)
	c = clientset(t, srv.Config())
	ns = testenv.NewNamespace(t, srv.Config())
	ctx := bounded(t, callTimeout)
	for i := first; i < first+n; i++ {
		if _, err := c.CoreV1().Pods(ns).Create(ctx, projPod(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return srv, c, ns
}

func TestProjectionTyped(t *testing.T) {
	_, c, ns := withPods(t, 0, 5)
	byNode := func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }
	for _, m := range []struct {
		name string
		opts kinformer.Options[*corev1.Pod]
	}{
		{"watch-list", kinformer.Options[*corev1.Pod]{}},
		{"paged", kinformer.Options[*corev1.Pod]{DisableStreamingList: true}},
		{"client", kinformer.Options[*corev1.Pod]{DisableDirectDecoding: true}},
		{"compact", kinformer.Options[*corev1.Pod]{Compact: true}},
		{"compact-paged", kinformer.Options[*corev1.Pod]{Compact: true, DisableStreamingList: true}},
		{"transform", kinformer.Options[*corev1.Pod]{Transform: func(p *corev1.Pod) (*corev1.Pod, error) { return p, nil }}},
	} {
		t.Run(m.name, func(t *testing.T) {
			ctx := bounded(t, callTimeout)
			o := m.opts
			o.Fields = podFields
			o.Indexers = map[string]kinformer.IndexFunc[*corev1.Pod]{"node": byNode}
			inf := kinformer.New[*corev1.Pod](c.CoreV1().Pods(ns), &o)
			events := make(chan kinformer.Event[*corev1.Pod], 100)
			inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{
				Added:    func(e kinformer.Event[*corev1.Pod]) { events <- e },
				Modified: func(e kinformer.Event[*corev1.Pod]) { events <- e },
			})
			inf.Start()
			t.Cleanup(inf.Stop)
			if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
				t.Fatal(err)
			}
			if got := inf.Fields(); len(got) != len(podFields)+6 {
				t.Fatalf("Fields() = %v", got)
			}
			server, err := c.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cache := inf.Cache()
			if cache.Len() != len(server.Items) {
				t.Fatalf("%d cached, the server has %d", cache.Len(), len(server.Items))
			}
			for i := range server.Items {
				want := projectPod(&server.Items[i])
				got, ok := cache.GetNamespaced(ns, want.Name)
				if !ok || !equality.Semantic.DeepEqual(got, want) {
					t.Fatalf("Get(%s) = %+v\nwant %+v", want.Name, got, want)
				}
			}
			for _, p := range cache.List() {
				if len(p.Annotations) != 0 || p.Spec.Containers[0].Name != "" || len(p.Spec.Containers[0].Args) != 0 {
					t.Fatalf("List gave %s with fields left out: %+v", p.Name, p)
				}
			}
			if got, err := cache.ByIndex("node", "node-1"); err != nil || len(got) != 2 {
				t.Fatalf("ByIndex(node-1) = %d pods, want 2", len(got))
			}
			for range server.Items {
				e := <-events
				if e.Object.Spec.Containers[0].Name != "" || e.Object.Annotations != nil || e.Object.Spec.NodeName == "" {
					t.Fatalf("Added %s not projected: %+v", e.Object.Name, e.Object)
				}
			}
			// A change arrives projected, Old too.
			p, err := c.CoreV1().Pods(ns).Get(ctx, "p-001", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			p.Labels["round"] = m.name
			p.Annotations["note"] = "changed"
			if p, err = c.CoreV1().Pods(ns).Update(ctx, p, metav1.UpdateOptions{}); err != nil {
				t.Fatal(err)
			}
			for {
				e := <-events
				if e.Type != kinformer.Modified || e.Object.ResourceVersion != p.ResourceVersion {
					continue
				}
				if want := projectPod(p); !equality.Semantic.DeepEqual(e.Object, want) {
					t.Fatalf("Modified = %+v\nwant %+v", e.Object, want)
				}
				if e.Old.Annotations != nil || e.Old.Labels["round"] == m.name {
					t.Fatalf("Old = %+v", e.Old)
				}
				break
			}
		})
	}
}

// Unstructured objects over JSON (client-go's dynamic client): the paths
// are taken as they are, members left out skipped unread.
func TestProjectionDynamic(t *testing.T) {
	srv, _, ns := withPods(t, 0, 3)
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprint("compact=", compact), func(t *testing.T) {
			inf := kinformer.New[*unstructured.Unstructured](dyn.Resource(corev1.SchemeGroupVersion.WithResource("pods")).Namespace(ns),
				&kinformer.Options[*unstructured.Unstructured]{Fields: podFields, Compact: compact})
			inf.Start()
			t.Cleanup(inf.Stop)
			if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
				t.Fatal(err)
			}
			u, ok := inf.Cache().GetNamespaced(ns, "p-002")
			if !ok {
				t.Fatal("p-002 not cached")
			}
			want := map[string]any{
				"apiVersion": "v1", "kind": "Pod",
				"metadata": map[string]any{"name": "p-002", "namespace": ns, "uid": string(u.GetUID()),
					"resourceVersion": u.GetResourceVersion(), "labels": map[string]any{"app": "web", "i": "2"}},
				"spec": map[string]any{"nodeName": "node-2", "containers": []any{
					map[string]any{"image": "registry.example/web:2"}, map[string]any{"image": "registry.example/side:1"}}},
				"status": map[string]any{"phase": "Pending"},
			}
			if !equality.Semantic.DeepEqual(u.Object, want) {
				t.Fatalf("got %v\nwant %v", u.Object, want)
			}
		})
	}
}

// A path that is not a field of the type: the informer does not start,
// and says why everywhere one looks.
func TestProjectionUnknownPath(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	inf := kinformer.New[*corev1.Pod](c.CoreV1().Pods("default"), &kinformer.Options[*corev1.Pod]{Fields: []string{"spec.nodename"}})
	if err := inf.Run(bounded(t, callTimeout)); !errors.Is(err, kinformer.ErrFields) || !strings.Contains(err.Error(), `"nodename"`) {
		t.Fatalf("Run: %v, want ErrFields naming nodename", err)
	}
	inf.Start()
	if err := inf.WaitForSync(bounded(t, callTimeout)); !errors.Is(err, kinformer.ErrFields) {
		t.Fatalf("WaitForSync: %v", err)
	}
	if err, _ := inf.LastError(); !errors.Is(err, kinformer.ErrFields) {
		t.Fatalf("LastError: %v", err)
	}
	f, _ := newFactory(t, srv.Config())
	if _, err := kinformer.Shared[*corev1.Pod](f, "default", &kinformer.Options[*corev1.Pod]{Fields: []string{"status.phase.x"}}); !errors.Is(err, kinformer.ErrFields) {
		t.Fatalf("Shared: %v, want ErrFields", err)
	}
}

// A Factory's consumers with different fields share one watch holding the
// union; one without Fields makes it whole; after the start a consumer
// wanting more than the cache holds makes the running informer re-list to
// keep it, and WaitForSync waits for that list.
func TestProjectionFactoryUnion(t *testing.T) {
	srv, _, ns := withPods(t, 1, 1)
	f, _ := newFactory(t, srv.Config())
	a, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"spec.nodeName"}})
	if err != nil {
		t.Fatal(err)
	}
	b, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"status.phase", "spec.nodeName"}})
	if err != nil || b != a {
		t.Fatalf("second consumer: %p, %v; want the first informer", b, err)
	}
	f.Start()
	waitForSync(t, f)
	p, _ := a.Cache().GetNamespaced(ns, "p-001")
	if p == nil || p.Spec.NodeName != "node-1" || p.Status.Phase != corev1.PodPending || p.Labels != nil {
		t.Fatalf("union of spec.nodeName and status.phase: %+v", p)
	}
	// Narrower or the same after the start: shared.
	if again, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"status.phase"}}); err != nil || again != a {
		t.Fatalf("narrower consumer: %v", err)
	}
	// Wider: the running informer keeps the union from a re-list on, and
	// tells its handlers with Modified for every object it held.
	widened := make(chan *corev1.Pod, 10)
	a.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Modified: func(e kinformer.Event[*corev1.Pod]) {
		if e.Cause == kinformer.CauseRelist && e.Object.Labels != nil && e.Old.Labels == nil {
			widened <- e.Object
		}
	}})
	wider, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"metadata.labels"}})
	if err != nil || wider != a {
		t.Fatalf("wider consumer after the start: %p, %v; want the running informer", wider, err)
	}
	if got := a.Fields(); !slices.Contains(got, "metadata.labels") || !slices.Contains(got, "spec.nodeName") {
		t.Fatalf("fields after the wider consumer: %v", got)
	}
	if err := a.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if p, _ := a.Cache().GetNamespaced(ns, "p-001"); p == nil || p.Labels["app"] != "web" || p.Spec.NodeName != "node-1" || p.Annotations != nil {
		t.Fatalf("after WaitForSync, the cache does not hold the union with metadata.labels: %+v", p)
	}
	select {
	case p := <-widened:
		if p.Name != "p-001" || p.Labels["app"] != "web" {
			t.Fatalf("Modified for the widening: %+v", p)
		}
	case <-time.After(callTimeout):
		t.Fatal("no Modified with the new fields for the object held before")
	}
	// It goes on watching with the new fields.
	c := clientset(t, srv.Config())
	live, err := c.CoreV1().Pods(ns).Get(bounded(t, callTimeout), "p-001", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	live.Labels["app"] = "db"
	if _, err := c.CoreV1().Pods(ns).Update(bounded(t, callTimeout), live, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, "the watch after the widening keeps the new labels", func() bool {
		p, _ := a.Cache().GetNamespaced(ns, "p-001")
		return p != nil && p.Labels["app"] == "db"
	})
	// And whole objects, for a consumer without Fields.
	if whole, err := kinformer.Shared[*corev1.Pod](f, ns, nil); err != nil || whole != a {
		t.Fatalf("whole-object consumer after the start: %v", err)
	}
	if err := a.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if p, _ := a.Cache().GetNamespaced(ns, "p-001"); p == nil || p.Annotations["note"] == "" || a.Fields() != nil {
		t.Fatalf("a consumer without Fields after the start did not make the cache whole: %+v, fields %v", p, a.Fields())
	}

	// Before the start, a consumer without Fields makes it whole.
	g, _ := newFactory(t, srv.Config())
	x, _ := kinformer.Shared[*corev1.Pod](g, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"spec.nodeName"}})
	if y, err := kinformer.Shared[*corev1.Pod](g, ns, nil); err != nil || y != x {
		t.Fatalf("whole consumer: %v", err)
	}
	g.Start()
	waitForSync(t, g)
	if whole, _ := x.Cache().GetNamespaced(ns, "p-001"); whole == nil || whole.Annotations["note"] == "" || x.Fields() != nil {
		t.Fatalf("a consumer without Fields did not make the cache whole: %+v", whole)
	}
}

// With StateDir, the projection is part of the state file's identity: the
// same fields start warm from the file, other fields start from a list,
// never from objects projected otherwise.
func TestProjectionStateDir(t *testing.T) {
	_, c, ns := withPods(t, 0, 3)
	dir := t.TempDir()
	run := func(fields []string) (restored int, p *corev1.Pod) {
		inf := kinformer.New[*corev1.Pod](c.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{
			Fields: fields, StateDir: dir, StateInterval: 10 * time.Millisecond})
		var n atomic.Int32
		inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Added: func(e kinformer.Event[*corev1.Pod]) {
			if e.Cause == kinformer.CauseRestore {
				n.Add(1)
			}
		}})
		ictx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = inf.Run(ictx) }()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		time.Sleep(100 * time.Millisecond) // a commit of the state file
		p, _ = inf.Cache().GetNamespaced(ns, "p-001")
		cancel()
		<-done
		return int(n.Load()), p
	}
	if n, p := run([]string{"spec.nodeName"}); n != 0 || p.Spec.NodeName != "node-1" || p.Labels != nil {
		t.Fatalf("first run: %d restored, %+v", n, p)
	}
	if n, p := run([]string{"spec.nodeName"}); n != 3 || p.Spec.NodeName != "node-1" || p.Labels != nil {
		t.Fatalf("the same fields: %d restored (want 3), %+v", n, p)
	}
	if n, p := run([]string{"metadata.labels"}); n != 0 || p.Spec.NodeName != "" || p.Labels["app"] != "web" {
		t.Fatalf("other fields: %d restored (want 0, a list), %+v", n, p)
	}
}

// A projection widened while the informer runs, with StateDir: the re-list
// writes the file named for the new fields whole, and the next process
// asking for those fields starts warm from it, with the fields; the file
// of the narrower fields stays as it was.
func TestProjectionWidenedWithStateDir(t *testing.T) {
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprint("compact=", compact), func(t *testing.T) { testProjectionWidenedWithStateDir(t, compact) })
	}
}

func testProjectionWidenedWithStateDir(t *testing.T, compact bool) {
	const pods = 30 // compact: more than it takes to make a dictionary (DictSamples)
	srv, _, ns := withPods(t, 0, pods)
	dir := t.TempDir()
	narrow, wide := []string{"spec.nodeName"}, []string{"spec.nodeName", "metadata.labels"}
	f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{StateDir: dir, Compact: compact})
	a, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: narrow, StateInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	waitForSync(t, f)
	if _, err := kinformer.Shared[*corev1.Pod](f, ns, &kinformer.Options[*corev1.Pod]{Fields: []string{"metadata.labels"}, StateInterval: 10 * time.Millisecond}); err != nil {
		t.Fatal(err)
	}
	waitForSync(t, f) // the re-list under the union
	if p, _ := a.Cache().GetNamespaced(ns, "p-001"); p == nil || p.Labels["app"] != "web" {
		t.Fatalf("after the widening: %+v", p)
	}
	time.Sleep(200 * time.Millisecond) // a commit of the state file
	f.Stop()

	run := func(fields []string) (restored int, p *corev1.Pod) {
		g := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{StateDir: dir, Compact: compact})
		defer g.Stop()
		inf, err := kinformer.Shared[*corev1.Pod](g, ns, &kinformer.Options[*corev1.Pod]{Fields: fields, StateInterval: 10 * time.Millisecond})
		if err != nil {
			t.Fatal(err)
		}
		var n atomic.Int32
		var first atomic.Pointer[corev1.Pod]
		inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Added: func(e kinformer.Event[*corev1.Pod]) {
			if e.Cause == kinformer.CauseRestore {
				n.Add(1)
				if e.Key == ns+"/p-001" {
					first.Store(e.Object)
				}
			}
		}})
		g.Start()
		waitForSync(t, g)
		time.Sleep(100 * time.Millisecond) // the handler's events
		return int(n.Load()), first.Load()
	}
	if n, p := run(wide); n != pods || p == nil || p.Labels["app"] != "web" || p.Spec.NodeName != "node-1" {
		t.Fatalf("the widened fields: %d restored (want %d), p-001 restored as %+v", n, pods, p)
	}
	if n, p := run(narrow); n != pods || p == nil || p.Labels != nil || p.Spec.NodeName != "node-1" {
		t.Fatalf("the narrower fields: %d restored (want %d), p-001 restored as %+v", n, pods, p)
	}
}

// Every kind of informer a Factory makes (Typed, Metadata, Dynamic of a
// custom resource) keeps only its fields, compact or not, and client-go's
// listers over clientgo.Wrap read the projected objects.
func TestProjectionFactoryKinds(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ctx := bounded(t, callTimeout)
	createWidget(t, srv, ns)
	if _, err := c.CoreV1().Pods(ns).Create(ctx, projPod(ns, 1), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprint("compact=", compact), func(t *testing.T) {
			f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{Compact: compact})
			t.Cleanup(f.Stop)
			typed, err := f.Typed(&corev1.Pod{}, ns, &kinformer.Options[kinformer.Object]{Fields: []string{"spec.nodeName"}})
			if err != nil {
				t.Fatal(err)
			}
			metas, err := f.Metadata(corev1.SchemeGroupVersion.WithResource("pods"), ns,
				&kinformer.Options[*metav1.PartialObjectMetadata]{Fields: []string{"metadata.labels"}})
			if err != nil {
				t.Fatal(err)
			}
			dyn, err := f.Dynamic(widgets, ns, &kinformer.Options[*unstructured.Unstructured]{Fields: []string{"spec.size"}})
			if err != nil {
				t.Fatal(err)
			}
			lister := corelisters.NewPodLister(kclientgo.Wrap(typed).GetIndexer())
			f.Start()
			waitForSync(t, f)
			if o, _ := typed.Cache().GetByKey(ns + "/p-001"); o == nil || o.(*corev1.Pod).Spec.NodeName != "node-1" || o.(*corev1.Pod).Labels != nil {
				t.Fatalf("Typed: %+v", o)
			}
			if m, _ := metas.Cache().GetByKey(ns + "/p-001"); m == nil || m.Labels["app"] != "web" || m.Annotations != nil || !m.CreationTimestamp.IsZero() {
				t.Fatalf("Metadata: %+v", m)
			}
			u, _ := dyn.Cache().GetByKey(ns + "/w")
			if u == nil || u.GetLabels() != nil {
				t.Fatalf("Dynamic: %v", u)
			}
			if size, _, _ := unstructured.NestedInt64(u.Object, "spec", "size"); size != 3 || u.Object["spec"].(map[string]any)["colour"] != nil {
				t.Fatalf("Dynamic spec: %v", u.Object["spec"])
			}
			p, err := lister.Pods(ns).Get("p-001")
			if err != nil || p.Spec.NodeName != "node-1" || p.Spec.Containers != nil {
				t.Fatalf("lister: %+v, %v", p, err)
			}
		})
	}
}
