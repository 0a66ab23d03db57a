package integration

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// newFactory returns a factory over cfg whose debug logs are captured,
// stopped at the end of the test.
func newFactory(t *testing.T, cfg *rest.Config) (*kinformer.Factory, logCapture) {
	t.Helper()
	logs := newLogCapture()
	f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Logger: slog.New(logs)})
	t.Cleanup(f.Stop)
	return f, logs
}

func sharedConfigMaps(t *testing.T, f *kinformer.Factory, ns string, opts *kinformer.Options[*corev1.ConfigMap]) *kinformer.Informer[*corev1.ConfigMap] {
	t.Helper()
	inf, err := kinformer.Shared(f, ns, variant(opts))
	if err != nil {
		t.Fatal(err)
	}
	inVariant(t, inf.Cache())
	return inf
}

func waitForSync(t *testing.T, f *kinformer.Factory) {
	t.Helper()
	if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
}

// Three consumers of one resource share one informer: one list and one
// watch on the wire, and each consumer gets every event. Another selector
// is another informer, with its own list and watch. The watches of
// built-in types are decoded by kinformer itself, as through a clientset.
func TestFactorySharesOneListAndWatch(t *testing.T) {
	bothWays(t, testFactorySharesOneListAndWatch)
}

func testFactorySharesOneListAndWatch(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 3 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), map[string]string{"app": "web"}, "x"))
	}
	wire := &counting{}
	f, logs := newFactory(t, wire.wrap(srv.Config()))

	var infs []*kinformer.Informer[*corev1.ConfigMap]
	var recs []*recorder[*corev1.ConfigMap]
	for range 3 {
		inf := sharedConfigMaps(t, f, ns, nil)
		rec := &recorder[*corev1.ConfigMap]{}
		inf.AddHandler(rec.handle)
		infs, recs = append(infs, inf), append(recs, rec)
	}
	if infs[0] != infs[1] || infs[1] != infs[2] {
		t.Fatal("three consumers of configmaps got different informers")
	}
	f.Start()
	waitForSync(t, f)
	mustCreate(t, c, configMap(ns, "late", nil, "y"))
	for i, rec := range recs {
		eventually(t, 10*time.Second, fmt.Sprintf("consumer %d's events", i), func() bool { return rec.count(kinformer.Added) == 4 })
	}
	if lists, watches := wire.counts(); lists != 1 || watches != 1 {
		t.Fatalf("%d lists and %d watches on the wire for three consumers, want 1 and 1", lists, watches)
	}
	for _, a := range wire.watchAccepts() {
		if !strings.Contains(a, "stream=watch") {
			t.Errorf("a watch asked for %q: not decoded by kinformer", a)
		}
	}
	if !logs.has("decoding=direct encoding=protobuf resource=configmaps") {
		t.Errorf("no direct watch of configmaps in the logs: %q", *logs.lines)
	}

	// Another selector: another informer, its own list and watch.
	web := sharedConfigMaps(t, f, ns, &kinformer.Options[*corev1.ConfigMap]{LabelSelector: "app=web"})
	if web == infs[0] {
		t.Fatal("a label selector shares the unfiltered informer")
	}
	if same := sharedConfigMaps(t, f, ns, &kinformer.Options[*corev1.ConfigMap]{LabelSelector: "app = web"}); same != web {
		t.Fatal("the same selector written differently made another informer")
	}
	waitForSync(t, f) // started at once: the factory has started
	if got := web.Cache().Len(); got != 3 {
		t.Fatalf("app=web informer caches %d, want 3", got)
	}
	eventually(t, 10*time.Second, "the second informer's watch", func() bool { _, w := wire.counts(); return w == 2 })
	if lists, _ := wire.counts(); lists != 2 {
		t.Fatalf("%d lists for two informers, want 2", lists)
	}

	// A cluster-scoped resource ignores the namespace.
	nss, err := kinformer.Shared[*corev1.Namespace](f, ns, variant[*corev1.Namespace](nil))
	if err != nil {
		t.Fatal(err)
	}
	waitForSync(t, f)
	if _, ok := nss.Cache().GetByKey(ns); !ok {
		t.Fatalf("namespace %s not cached by the namespaces informer", ns)
	}
}

// A consumer that comes after the sync gets the cache's replay, and its
// registration's HasSynced turns true only once it has handled all of it.
func TestFactoryLateConsumerGetsTheReplay(t *testing.T) {
	bothWays(t, testFactoryLateConsumerGetsTheReplay)
}

func testFactoryLateConsumerGetsTheReplay(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	const n = 5
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	f, _ := newFactory(t, srv.Config())
	first := sharedConfigMaps(t, f, ns, nil)
	f.Start()
	waitForSync(t, f)

	late := sharedConfigMaps(t, f, ns, nil)
	if late != first {
		t.Fatal("the late consumer got another informer")
	}
	entered, release := make(chan struct{}), make(chan struct{})
	var handled atomic.Int32
	reg := late.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: func(e kinformer.Event[*corev1.ConfigMap]) {
		if handled.Load() == 0 {
			close(entered)
			<-release
		}
		if e.Cause != kinformer.CauseReplay {
			t.Errorf("late consumer: %s %s with cause %s, want the replay", e.Type, e.Object.Name, e.Cause)
		}
		handled.Add(1)
	}})
	select {
	case <-entered:
	case <-bounded(t, callTimeout).Done():
		t.Fatal("the replay never came")
	}
	if reg.HasSynced() {
		t.Fatal("HasSynced while the replay's first event is being handled")
	}
	close(release)
	eventually(t, 10*time.Second, "the late registration synced", reg.HasSynced)
	if got := handled.Load(); got != n {
		t.Fatalf("HasSynced after %d replayed events, want %d", got, n)
	}
}

// A handler that takes 200 ms per event does not delay another consumer
// of the same informer.
func TestFactorySlowConsumerDoesNotDelayOthers(t *testing.T) {
	bothWays(t, testFactorySlowConsumerDoesNotDelayOthers)
}

func testFactorySlowConsumerDoesNotDelayOthers(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	f, _ := newFactory(t, srv.Config())
	slow, fast := &recorder[*corev1.ConfigMap]{}, &recorder[*corev1.ConfigMap]{}
	sharedConfigMaps(t, f, ns, nil).AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		slow.handle(e)
		time.Sleep(200 * time.Millisecond) // the slow consumer's work
	})
	sharedConfigMaps(t, f, ns, nil).AddHandler(fast.handle)
	f.Start()
	waitForSync(t, f)

	const n = 40 // 8 s of the slow consumer's work
	began := time.Now()
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%02d", i), nil, "x"))
	}
	eventually(t, 5*time.Second, "the fast consumer's 40 events", func() bool { return fast.count(kinformer.Added) == n })
	if got := slow.count(kinformer.Added); got >= n {
		t.Fatalf("the slow consumer had handled all %d events too: the test proves nothing", got)
	}
	t.Logf("fast consumer: %d events in %v; slow consumer: %d by then", n, time.Since(began).Round(time.Millisecond), slow.count(kinformer.Added))
}

// RemoveEventHandler during a call of the handler returns once the call
// has ended, and the handler is never called again.
func TestFactoryRemoveDuringCall(t *testing.T) {
	bothWays(t, testFactoryRemoveDuringCall)
}

func testFactoryRemoveDuringCall(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	f, _ := newFactory(t, srv.Config())
	inf := sharedConfigMaps(t, f, ns, nil)
	f.Start()
	waitForSync(t, f)

	entered, release := make(chan struct{}), make(chan struct{})
	var calls atomic.Int32
	var ended, removed atomic.Bool
	reg := inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		if removed.Load() {
			t.Errorf("called after RemoveEventHandler returned: %s %s", e.Type, e.Object.Name)
		}
		if calls.Add(1) == 1 {
			close(entered)
			<-release
			ended.Store(true)
		}
	})
	other := &recorder[*corev1.ConfigMap]{}
	inf.AddHandler(other.handle)
	mustCreate(t, c, configMap(ns, "first", nil, "x"))
	select {
	case <-entered:
	case <-bounded(t, callTimeout).Done():
		t.Fatal("the handler was never called")
	}
	returned := make(chan struct{})
	go func() {
		inf.RemoveEventHandler(reg)
		if !ended.Load() {
			t.Error("RemoveEventHandler returned while the handler's call was in progress")
		}
		removed.Store(true)
		close(returned)
	}()
	// Give RemoveEventHandler the chance to return too early (the bug
	// this test would catch); it must not.
	time.Sleep(100 * time.Millisecond)
	select {
	case <-returned:
		t.Fatal("RemoveEventHandler returned during the call")
	default:
	}
	close(release)
	select {
	case <-returned:
	case <-bounded(t, callTimeout).Done():
		t.Fatal("RemoveEventHandler did not return after the call ended")
	}
	// More events: the other consumer gets them, the removed one never.
	for i := range 5 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("after-%d", i), nil, "x"))
	}
	eventually(t, 10*time.Second, "the other consumer's events", func() bool { return other.count(kinformer.Added) == 6 })
	if got := calls.Load(); got != 1 {
		t.Fatalf("the removed handler was called %d times, want 1", got)
	}
}

// Without permission, WaitForSync returns promptly a 403 that names the
// resource, even though another informer of the factory syncs fine.
func TestFactoryForbidden(t *testing.T) {
	bothWays(t, testFactoryForbidden)
}

func testFactoryForbidden(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	f, _ := newFactory(t, srv.RestrictedConfig())
	sharedConfigMaps(t, f, testenv.AllowedNamespace, nil)
	denied := sharedConfigMaps(t, f, ns, nil)
	f.Start()
	began := time.Now()
	err := f.WaitForSync(bounded(t, callTimeout))
	if !apierrors.IsForbidden(err) || !strings.HasPrefix(err.Error(), "configmaps in namespace "+ns+": ") {
		t.Fatalf("WaitForSync = %v, want a 403 prefixed with the resource and namespace", err)
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("WaitForSync took %v to return the 403", d)
	}
	if denied.HasSynced() {
		t.Fatal("synced without permission")
	}
}

// gadgets is a CustomResourceDefinition made for the factory's tests.
var gadgets = schema.GroupVersionResource{Group: "factory.kinformer.test", Version: "v1", Resource: "gadgets"}

// createGadgetCRD creates the CRD (deleted, and waited for, at the end of
// the test) and waits until it is served.
func createGadgetCRD(t *testing.T, cfg *rest.Config) dynamic.NamespaceableResourceInterface {
	t.Helper()
	return createCRD(t, cfg, gadgets, "Gadget")
}

// createCRD creates a namespaced CRD of gvr whose objects are kind and
// hold anything (deleted, and waited for, at the end of the test), and
// waits until it is served.
func createCRD(t *testing.T, cfg *rest.Config, gvr schema.GroupVersionResource, kind string) dynamic.NamespaceableResourceInterface {
	t.Helper()
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	name := gvr.Resource + "." + gvr.Group
	crd := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1", "kind": "CustomResourceDefinition",
		"metadata": map[string]any{"name": name},
		"spec": map[string]any{
			"group": gvr.Group, "scope": "Namespaced",
			"names": map[string]any{"plural": gvr.Resource, "singular": strings.ToLower(kind), "kind": kind, "listKind": kind + "List"},
			"versions": []any{map[string]any{"name": gvr.Version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{"type": "object", "x-kubernetes-preserve-unknown-fields": true}}}},
		},
	}}
	ctx := bounded(t, callTimeout)
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
		defer cancel()
		crds := dyn.Resource(crdGVR)
		_ = crds.Delete(ctx, name, metav1.DeleteOptions{})
		for ctx.Err() == nil {
			if _, err := crds.Get(ctx, name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
			time.Sleep(100 * time.Millisecond)
		}
		t.Errorf("CRD %s not deleted after 60 s", name)
	})
	eventually(t, 30*time.Second, "the CRD served", func() bool {
		_, err := dyn.Resource(gvr).List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	})
	return dyn.Resource(gvr)
}

func gadget(ns, name string) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": gadgets.GroupVersion().String(), "kind": "Gadget",
		"metadata": map[string]any{"name": name, "namespace": ns},
	}}
}

// A typed built-in informer (pods, decoded directly) and a dynamic one for
// a CRD installed after the factory's discovery was cached both work;
// stopping the dynamic one leaves the others running, and a later Dynamic
// makes a new one.
func TestFactoryTypedAndDynamic(t *testing.T) {
	bothWays(t, testFactoryTypedAndDynamic)
}

func testFactoryTypedAndDynamic(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	f, logs := newFactory(t, srv.Config())
	pods, err := kinformer.Shared[*corev1.Pod](f, ns, variant[*corev1.Pod](nil))
	if err != nil {
		t.Fatal(err)
	}
	cms := sharedConfigMaps(t, f, ns, nil)
	if _, err := f.Dynamic(gadgets, ns, variant[*unstructured.Unstructured](nil)); err == nil {
		t.Fatal("Dynamic of a resource the server does not have: no error")
	}
	f.Start()
	waitForSync(t, f)

	res := createGadgetCRD(t, srv.Config()) // after discovery was cached
	ctx := bounded(t, callTimeout)
	if _, err := res.Namespace(ns).Create(ctx, gadget(ns, "g1"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	gs, err := f.Dynamic(gadgets, ns, variant[*unstructured.Unstructured](nil))
	if err != nil {
		t.Fatalf("Dynamic after the CRD was installed: %v", err)
	}
	if again, err := f.Dynamic(gadgets, ns, variant[*unstructured.Unstructured](nil)); err != nil || again != gs {
		t.Fatalf("second Dynamic: %p, %v; want the same informer", again, err)
	}
	waitForSync(t, f)
	if _, ok := gs.Cache().GetByKey(ns + "/g1"); !ok {
		t.Fatal("g1 not cached")
	}

	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "pod p cached", func() bool { _, ok := pods.Cache().GetByKey(ns + "/p"); return ok })
	if !logs.has("decoding=direct encoding=protobuf resource=pods") {
		t.Errorf("pods not decoded directly; logs: %q", *logs.lines)
	}

	// Stop the gadgets alone: the others go on.
	if !kinformer.StopShared(f, gs) {
		t.Fatal("StopShared: not the factory's informer")
	}
	if _, err := res.Namespace(ns).Create(ctx, gadget(ns, "g2"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, configMap(ns, "after-stop", nil, "x"))
	eventually(t, 10*time.Second, "configmap after StopShared", func() bool { _, ok := cms.Cache().GetByKey(ns + "/after-stop"); return ok })
	if _, ok := gs.Cache().GetByKey(ns + "/g2"); ok {
		t.Fatal("the stopped gadgets informer still receives events")
	}
	gs2, err := f.Dynamic(gadgets, ns, variant[*unstructured.Unstructured](nil))
	if err != nil || gs2 == gs {
		t.Fatalf("Dynamic after StopShared: %p, %v; want a new informer", gs2, err)
	}
	waitForSync(t, f)
	if gs2.Cache().Len() != 2 {
		t.Fatalf("new gadgets informer caches %d, want 2", gs2.Cache().Len())
	}
}

// Stop stops every informer and joins their goroutines, from any
// goroutine; a handler that stops the factory does not deadlock.
func TestFactoryStopFromHandler(t *testing.T) {
	bothWays(t, testFactoryStopFromHandler)
}

func testFactoryStopFromHandler(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	f, _ := newFactory(t, srv.Config())
	inf := sharedConfigMaps(t, f, ns, nil)
	var once sync.Once
	stopped := make(chan struct{})
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: func(kinformer.Event[*corev1.ConfigMap]) {
		once.Do(func() { f.Stop(); close(stopped) })
	}})
	f.Start()
	waitForSync(t, f)
	mustCreate(t, c, configMap(ns, "stop", nil, "x"))
	select {
	case <-stopped:
	case <-bounded(t, callTimeout).Done():
		t.Fatal("Stop from a handler did not return")
	}
	f.Stop() // joins
	if _, err := kinformer.Shared[*corev1.ConfigMap](f, ns, variant[*corev1.ConfigMap](nil)); err == nil {
		t.Fatal("Shared after Stop: no error")
	}
}

// The factory's informers report to one Metrics on the Registerer given,
// labelled with their resource; a second factory on the same Registerer
// cannot register its own and says so.
func TestFactoryMetrics(t *testing.T) {
	bothWays(t, testFactoryMetrics)
}

func testFactoryMetrics(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 3 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", i), nil, "x"))
	}
	reg := prometheus.NewRegistry()
	f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{Registerer: reg})
	t.Cleanup(f.Stop)
	inf := sharedConfigMaps(t, f, ns, nil)
	if inf.Name() != "configmaps" {
		t.Fatalf("Name = %q, want configmaps", inf.Name())
	}
	f.Start()
	waitForSync(t, f)
	gauge := func(name string) (float64, bool) {
		mfs, err := reg.Gather()
		if err != nil {
			t.Fatal(err)
		}
		for _, mf := range mfs {
			if mf.GetName() != name {
				continue
			}
			for _, m := range mf.GetMetric() {
				for _, l := range m.GetLabel() {
					if l.GetName() == "resource" && l.GetValue() == "configmaps" {
						return m.GetGauge().GetValue(), true
					}
				}
			}
		}
		return 0, false
	}
	if v, ok := gauge("kinformer_objects"); !ok || v != 3 {
		t.Fatalf("kinformer_objects{resource=configmaps} = %v (found %v), want 3", v, ok)
	}
	if !kinformer.StopShared(f, inf) {
		t.Fatal("StopShared: not the factory's")
	}
	if _, ok := gauge("kinformer_objects"); ok {
		t.Fatal("a stopped and forgotten informer still reports its gauges")
	}

	other := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{Registerer: reg})
	t.Cleanup(other.Stop)
	if _, err := kinformer.Shared[*corev1.ConfigMap](other, ns, variant[*corev1.ConfigMap](nil)); err == nil || !strings.Contains(err.Error(), "metrics") {
		t.Fatalf("a second factory on the same Registerer: %v, want an error about its metrics", err)
	}

	// Two factories given one Metrics (FactoryOptions.Metrics): their
	// informers of a resource add up on its registry.
	reg = prometheus.NewRegistry()
	m, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	ns2 := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(ns2, "cm-0", nil, "x"))
	for _, n := range []string{ns, ns2} {
		g := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{Metrics: m, Registerer: prometheus.NewRegistry()})
		t.Cleanup(g.Stop)
		sharedConfigMaps(t, g, n, nil)
		g.Start()
		waitForSync(t, g)
	}
	if v, ok := gauge("kinformer_objects"); !ok || v != 4 {
		t.Fatalf("kinformer_objects{resource=configmaps} of two factories sharing a Metrics = %v (found %v), want 3+1", v, ok)
	}
}

// Stop joins every goroutine the factory started: none is left after it
// but the HTTP client's pooled connections.
func TestFactoryStopLeavesNoGoroutine(t *testing.T) {
	bothWays(t, testFactoryStopLeavesNoGoroutine)
}

func testFactoryStopLeavesNoGoroutine(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ignore := leakIgnores()
	f := kinformer.NewFactory(srv.Config(), nil)
	cms := sharedConfigMaps(t, f, ns, nil)
	rec := &recorder[*corev1.ConfigMap]{}
	cms.AddHandler(rec.handle)
	if _, err := kinformer.Shared[*corev1.Pod](f, ns, variant[*corev1.Pod](nil)); err != nil {
		t.Fatal(err)
	}
	f.Start()
	waitForSync(t, f)
	mustCreate(t, c, configMap(ns, "cm", nil, "x"))
	eventually(t, 10*time.Second, "event", func() bool { return rec.count(kinformer.Added) == 1 })
	f.Stop()
	if err := goleak.Find(ignore...); err != nil {
		t.Fatal(err)
	}
}

// Typed makes an informer of a type known only at run time, decoded by
// kinformer as Shared's are (protobuf, straight into *corev1.Pod), and
// keeps its state file; Metadata one of metadata only. Each is shared by
// its own rule, and neither is Shared[T]'s.
func TestFactoryTypedAtRunTimeAndMetadata(t *testing.T) {
	bothWays(t, testFactoryTypedAtRunTimeAndMetadata)
}

func testFactoryTypedAtRunTimeAndMetadata(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	dir := t.TempDir()
	f, logs := newFactory(t, srv.Config())
	pods, err := f.Typed(&corev1.Pod{}, ns, variant(&kinformer.Options[kinformer.Object]{StateDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	if again, err := f.Typed(&corev1.Pod{}, ns, variant(&kinformer.Options[kinformer.Object]{StateDir: dir})); err != nil || again != pods {
		t.Fatalf("second Typed: %p, %v; want the same informer", again, err)
	}
	inVariant(t, pods.Cache())
	if _, err := f.Typed(&corev1.PodList{}, ns, variant[kinformer.Object](nil)); err == nil {
		t.Fatal("Typed of a list type: no error")
	}
	typedPods, err := kinformer.Shared[*corev1.Pod](f, ns, variant[*corev1.Pod](nil))
	if err != nil {
		t.Fatal(err)
	}
	podsGVR := corev1.SchemeGroupVersion.WithResource("pods")
	meta, err := f.Metadata(podsGVR, ns, variant[*metav1.PartialObjectMetadata](nil))
	if err != nil {
		t.Fatal(err)
	}
	ctx := bounded(t, callTimeout)
	pod := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p", Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
	if _, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	f.Start()
	waitForSync(t, f)
	got, ok := pods.Cache().GetByKey(ns + "/p")
	if !ok {
		t.Fatal("p not in the Typed informer's cache")
	}
	if p, ok := got.(*corev1.Pod); !ok || p.Spec.Containers[0].Image != "busybox" || p.Labels["app"] != "web" {
		t.Fatalf("Typed cached a %T: %v", got, got)
	}
	if m, ok := meta.Cache().GetByKey(ns + "/p"); !ok || m.Labels["app"] != "web" || m.UID == "" {
		t.Fatalf("Metadata cached %v, %v", m, ok)
	}
	if _, ok := typedPods.Cache().GetByKey(ns + "/p"); !ok {
		t.Fatal("p not in Shared[*corev1.Pod]'s cache")
	}
	if n := logs.count("decoding=direct encoding=protobuf resource=pods"); n < 2 {
		t.Errorf("pods decoded directly by %d informers, want 2 (Shared and Typed)", n)
	}
	kinformer.StopShared(f, pods)

	// A new factory's Typed informer starts warm from the state file.
	f2, _ := newFactory(t, srv.Config())
	warm, err := f2.Typed(&corev1.Pod{}, ns, variant(&kinformer.Options[kinformer.Object]{StateDir: dir}))
	if err != nil {
		t.Fatal(err)
	}
	restored := make(chan kinformer.Object, 1)
	warm.AddHandlerFuncs(kinformer.HandlerFuncs[kinformer.Object]{Added: func(e kinformer.Event[kinformer.Object]) {
		if e.Cause == kinformer.CauseRestore {
			select {
			case restored <- e.Object:
			default:
			}
		}
	}})
	f2.Start()
	waitForSync(t, f2)
	select {
	case obj := <-restored:
		if p, ok := obj.(*corev1.Pod); !ok || p.Name != "p" {
			t.Fatalf("restored %T %v", obj, obj)
		}
	case <-ctx.Done():
		t.Fatal("the Typed informer did not restore from its state file")
	}
}

// count returns how many captured lines contain sub (the informers log
// from their own goroutines: under the lock).
func (l logCapture) count(sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range *l.lines {
		if strings.Contains(s, sub) {
			n++
		}
	}
	return n
}
