package clientgo_test

import (
	"context"
	"fmt"
	"os"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
	"github.com/kinformer/kinformer/internal/testenv"
)

// TestMain turns the cache mutation detector on, in "panic" mode, for
// every informer of the tests (unless the environment says otherwise): a
// test, or the library, that changes a cached object kills the run.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(kinformer.EnvMutationDetector); !ok {
		os.Setenv(kinformer.EnvMutationDetector, "panic")
	}
	testenv.Main(m)
}

// call is one call of a client-go handler, rendered.
type call struct {
	kind    string // add, update, delete
	key     string
	initial bool   // OnAdd's isInInitialList
	oldRV   string // OnUpdate's old object's
	rv      string
	final   bool // OnDelete got a DeletedFinalStateUnknown
}

// handler records the calls of a client-go ResourceEventHandler.
type handler struct {
	mu    sync.Mutex
	calls []call
}

func (h *handler) add(c call) {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.calls = append(h.calls, c)
}

func (h *handler) OnAdd(obj any, isInInitialList bool) {
	p := obj.(*corev1.Pod)
	h.add(call{kind: "add", key: p.Namespace + "/" + p.Name, initial: isInInitialList, rv: p.ResourceVersion})
}

func (h *handler) OnUpdate(oldObj, newObj any) {
	o, n := oldObj.(*corev1.Pod), newObj.(*corev1.Pod)
	h.add(call{kind: "update", key: n.Namespace + "/" + n.Name, oldRV: o.ResourceVersion, rv: n.ResourceVersion})
}

func (h *handler) OnDelete(obj any) {
	c := call{kind: "delete"}
	if d, ok := obj.(cache.DeletedFinalStateUnknown); ok {
		c.final, c.key = true, d.Key
		obj = d.Obj
	}
	p := obj.(*corev1.Pod)
	c.key, c.rv = p.Namespace+"/"+p.Name, p.ResourceVersion
	h.add(c)
}

func (h *handler) all() []call {
	h.mu.Lock()
	defer h.mu.Unlock()
	return append([]call(nil), h.calls...)
}

// find returns the calls of kind for key.
func (h *handler) find(kind, key string) []call {
	var out []call
	for _, c := range h.all() {
		if c.kind == kind && c.key == key {
			out = append(out, c)
		}
	}
	return out
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func bounded(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func pod(ns, name, node string, lbls map[string]string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: lbls, Annotations: map[string]string{"note": "n"}},
		Spec: corev1.PodSpec{
			NodeName:   node,
			Containers: []corev1.Container{{Name: "c", Image: "busybox"}},
		},
	}
}

// clients returns the shared server's admin config and clientset and a
// new namespace, and checks when the test ends (after its informers have
// stopped) that it left no goroutine behind but the HTTP client's pooled
// connections.
func clients(t *testing.T) (*rest.Config, kubernetes.Interface, string) {
	t.Helper()
	cfg := testenv.Shared(t).Config()
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(current,
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
			goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
		); err != nil {
			t.Error(err)
		}
	})
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, cs, testenv.NewNamespace(t, cfg)
}

func create(t *testing.T, cs kubernetes.Interface, p *corev1.Pod) *corev1.Pod {
	t.Helper()
	out, err := cs.CoreV1().Pods(p.Namespace).Create(bounded(t), p, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func byNode(obj any) ([]string, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return nil, fmt.Errorf("not a pod: %T", obj)
	}
	return []string{p.Spec.NodeName}, nil
}

// run runs sii until the test ends, and waits for Run to return then.
func run(t *testing.T, sii cache.SharedIndexInformer) context.CancelFunc {
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() {
		defer close(done)
		sii.RunWithContext(ctx)
	}()
	stop := func() {
		cancel()
		<-done
	}
	t.Cleanup(stop)
	return stop
}

// NewSharedIndexInformer over client-go's own ListWatch, against the real
// server: client-go's listers read it, handlers get client-go's calls
// (isInInitialList, OnUpdate's old object), indexes can be added while it
// runs, a handler added later gets the cache as initial adds, and a
// stopped informer refuses handlers and does not run again.
func TestNewSharedIndexInformer(t *testing.T) {
	_, cs, ns := clients(t)
	for i, node := range []string{"n1", "n1", "n2"} {
		create(t, cs, pod(ns, fmt.Sprintf("p%d", i), node, map[string]string{"app": "web", "i": fmt.Sprint(i)}))
	}
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{
		cache.NamespaceIndex: cache.MetaNamespaceIndexFunc, // client-go's factories always add it
		"node":               byNode,
	})
	h := &handler{}
	reg, err := sii.AddEventHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	if sii.HasSynced() || reg.HasSynced() {
		t.Fatal("synced before the start")
	}
	stop := run(t, sii)
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced, reg.HasSynced) {
		t.Fatal("not synced")
	}
	if !cache.WaitFor(bounded(t), "", sii.HasSyncedChecker(), reg.HasSyncedChecker()) {
		t.Fatal("the DoneCheckers did not close")
	}
	if sii.LastSyncResourceVersion() == "" {
		t.Fatal("no LastSyncResourceVersion after the sync")
	}
	for i := range 3 {
		if c := h.find("add", fmt.Sprintf("%s/p%d", ns, i)); len(c) != 1 || !c[0].initial {
			t.Fatalf("p%d: %+v, want one OnAdd in the initial list", i, c)
		}
	}

	lister := corelisters.NewPodLister(sii.GetIndexer())
	if got, err := lister.Pods(ns).List(labels.Everything()); err != nil || len(got) != 3 {
		t.Fatalf("lister.Pods(ns).List = %d pods, %v", len(got), err)
	}
	if got, err := lister.List(labels.SelectorFromSet(labels.Set{"i": "1"})); err != nil || len(got) != 1 || got[0].Name != "p1" {
		t.Fatalf("lister.List(i=1) = %v, %v", got, err)
	}
	if p, err := lister.Pods(ns).Get("p2"); err != nil || p.Spec.NodeName != "n2" {
		t.Fatalf("lister Get(p2) = %v, %v", p, err)
	}
	if _, err := lister.Pods(ns).Get("nope"); !apierrors.IsNotFound(err) {
		t.Fatalf("lister Get(nope): %v, want NotFound", err)
	}
	if got, err := lister.Pods("other").List(labels.Everything()); err != nil || len(got) != 0 {
		t.Fatalf("another namespace: %v, %v", got, err)
	}
	idx := sii.GetIndexer()
	if got, err := idx.ByIndex("node", "n1"); err != nil || len(got) != 2 {
		t.Fatalf("ByIndex(node, n1) = %d, %v", len(got), err)
	}
	if got, err := idx.Index("node", &corev1.Pod{Spec: corev1.PodSpec{NodeName: "n2"}}); err != nil || len(got) != 1 {
		t.Fatalf("Index(node, a pod on n2) = %d, %v", len(got), err)
	}
	vals := idx.ListIndexFuncValues("node")
	sort.Strings(vals)
	if strings.Join(vals, ",") != "n1,n2" {
		t.Fatalf("ListIndexFuncValues(node) = %v", vals)
	}
	if _, ok := idx.GetIndexers()["node"]; !ok {
		t.Fatalf("GetIndexers() = %v", idx.GetIndexers())
	}
	if _, err := idx.ByIndex("nope", "x"); err == nil {
		t.Fatal("ByIndex on an unknown index: no error")
	}
	if err := idx.Add(pod(ns, "x", "", nil)); err == nil {
		t.Fatal("the informer's store accepted a write")
	}
	if _, exists, err := idx.Get(&corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "p0"}}); !exists || err != nil {
		t.Fatalf("Get(p0) = %v, %v", exists, err)
	}

	// An index added while running holds what is cached.
	byApp := func(obj any) ([]string, error) { return []string{obj.(*corev1.Pod).Labels["app"]}, nil }
	if err := sii.AddIndexers(cache.Indexers{"app": byApp}); err != nil {
		t.Fatalf("AddIndexers while running: %v", err)
	}
	if got, err := idx.ByIndex("app", "web"); err != nil || len(got) != 3 {
		t.Fatalf("ByIndex(app, web) after adding it = %d, %v", len(got), err)
	}
	if err := sii.AddIndexers(cache.Indexers{"node": byNode}); err == nil {
		t.Fatal("a second index named node was accepted")
	}

	// Changes: OnAdd not initial, OnUpdate with the old state, OnDelete
	// with the last state.
	p1, err := cs.CoreV1().Pods(ns).Get(bounded(t), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p1.Labels["app"] = "db"
	p1new, err := cs.CoreV1().Pods(ns).Update(bounded(t), p1, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p3 := create(t, cs, pod(ns, "p3", "n2", map[string]string{"app": "web"}))
	if err := cs.CoreV1().Pods(ns).Delete(bounded(t), "p0", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the changes", func() bool {
		return len(h.find("update", ns+"/p1")) == 1 && len(h.find("add", ns+"/p3")) == 1 && len(h.find("delete", ns+"/p0")) == 1
	})
	if c := h.find("update", ns+"/p1")[0]; c.oldRV != p1.ResourceVersion || c.rv != p1new.ResourceVersion {
		t.Fatalf("OnUpdate(p1) %+v, want old %s new %s", c, p1.ResourceVersion, p1new.ResourceVersion)
	}
	if c := h.find("add", ns+"/p3")[0]; c.initial || c.rv != p3.ResourceVersion {
		t.Fatalf("OnAdd(p3) %+v, want isInInitialList false", c)
	}
	if c := h.find("delete", ns+"/p0")[0]; c.final {
		t.Fatalf("OnDelete(p0) %+v: a watched deletion came as DeletedFinalStateUnknown", c)
	}
	eventually(t, "the app index follows", func() bool {
		db, _ := idx.ByIndex("app", "db")
		web, _ := idx.ByIndex("app", "web")
		return len(db) == 1 && len(web) == 2
	})

	// A handler added while running gets the cache as initial adds.
	late := &handler{}
	lateReg, err := sii.AddEventHandler(late)
	if err != nil {
		t.Fatal(err)
	}
	if !cache.WaitFor(bounded(t), "", lateReg.HasSyncedChecker()) {
		t.Fatal("the late handler did not sync")
	}
	if got := late.all(); len(got) != 3 {
		t.Fatalf("the late handler got %d calls, want the 3 cached pods: %+v", len(got), got)
	}
	for _, c := range late.all() {
		if c.kind != "add" || !c.initial {
			t.Fatalf("late handler: %+v, want initial adds", c)
		}
	}
	if err := sii.RemoveEventHandler(lateReg); err != nil {
		t.Fatal(err)
	}

	stop()
	if !sii.IsStopped() {
		t.Fatal("IsStopped false after Run returned")
	}
	if _, err := sii.AddEventHandler(&handler{}); err == nil {
		t.Fatal("a stopped informer accepted a handler")
	}
	if err := sii.AddIndexers(cache.Indexers{"late": byNode}); err == nil {
		t.Fatal("a stopped informer accepted an index")
	}
	ranAgain := make(chan struct{})
	go func() { sii.Run(make(chan struct{})); close(ranAgain) }()
	select {
	case <-ranAgain:
	case <-time.After(10 * time.Second):
		t.Fatal("a second Run did not return at once")
	}
}

// A handler's resync period (client-go's meaning): OnUpdate(obj, obj) for
// every cached object, to that handler alone, periodically; a handler
// added while the informer runs is resynced as well.
func TestHandlerResync(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "a", "n1", nil))
	create(t, cs, pod(ns, "b", "n1", nil))
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	resynced, plain := &handler{}, &handler{}
	if _, err := sii.AddEventHandlerWithResyncPeriod(resynced, time.Second); err != nil {
		t.Fatal(err)
	}
	if _, err := sii.AddEventHandler(plain); err != nil {
		t.Fatal(err)
	}
	run(t, sii)
	eventually(t, "two resyncs of each pod", func() bool {
		return len(resynced.find("update", ns+"/a")) >= 2 && len(resynced.find("update", ns+"/b")) >= 2
	})
	for _, c := range resynced.all() {
		if c.kind == "update" && c.oldRV != c.rv {
			t.Fatalf("resync %+v: old and new differ", c)
		}
	}
	for _, c := range plain.all() {
		if c.kind == "update" {
			t.Fatalf("a handler without resync got %+v", c)
		}
	}

	// A handler added while the informer runs is resynced too.
	late := &handler{}
	if _, err := sii.AddEventHandlerWithResyncPeriod(late, time.Second); err != nil {
		t.Fatal(err)
	}
	eventually(t, "two resyncs of each pod to the handler added while running", func() bool {
		return len(late.find("update", ns+"/a")) >= 2 && len(late.find("update", ns+"/b")) >= 2
	})
}

// Wrap over a kinformer informer with a typed client keeps kinformer's
// decoding; SetTransform applies before the start and not after; watch
// errors reach the watch error handler with a named Reflector.
func TestWrapTransformAndWatchErrors(t *testing.T) {
	cfg, cs, ns := clients(t)
	create(t, cs, pod(ns, "a", "n1", map[string]string{"app": "web"}))
	inf := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), nil)
	sii := clientgo.Wrap(inf)
	if err := sii.SetTransform(func(obj any) (any, error) {
		p := obj.(*corev1.Pod)
		p.Annotations = nil
		return p, nil
	}); err != nil {
		t.Fatal(err)
	}
	h := &handler{}
	if _, err := sii.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	run(t, sii)
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced) {
		t.Fatal("not synced")
	}
	got, ok := inf.Cache().GetNamespaced(ns, "a")
	if !ok || got.Annotations != nil {
		t.Fatalf("cached %v, want it transformed", got)
	}
	if err := sii.SetTransform(nil); err == nil {
		t.Fatal("SetTransform after the start was accepted")
	}
	if err := sii.SetWatchErrorHandler(func(*cache.Reflector, error) {}); err == nil {
		t.Fatal("SetWatchErrorHandler after the start was accepted")
	}

	// A user who may not list pods here: the error handler hears of it.
	rcs, err := kubernetes.NewForConfig(testenv.Shared(t).RestrictedConfig())
	if err != nil {
		t.Fatal(err)
	}
	_ = cfg
	denied := clientgo.Wrap(kinformer.New[*corev1.Pod](rcs.CoreV1().Pods(ns), nil))
	errs := make(chan error, 100)
	if err := denied.SetWatchErrorHandlerWithContext(func(_ context.Context, r *cache.Reflector, err error) {
		if r == nil {
			err = fmt.Errorf("nil Reflector for %w", err)
		}
		select {
		case errs <- err:
		default:
		}
	}); err != nil {
		t.Fatal(err)
	}
	run(t, denied)
	select {
	case err := <-errs:
		if !apierrors.IsForbidden(err) {
			t.Fatalf("watch error handler got %v, want Forbidden", err)
		}
	case <-bounded(t).Done():
		t.Fatal("the watch error handler was not called")
	}
}

// An object deleted while the informer could not watch, found gone by the
// re-list after 410 Gone, reaches OnDelete as DeletedFinalStateUnknown
// with its key and last known state. Its own server: it is compacted.
func TestDeletedFinalStateUnknown(t *testing.T) {
	srv := testenv.New(t, testenv.WithWatchCache(false))
	cfg := srv.Config()
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, cfg)
	gone := create(t, cs, pod(ns, "gone", "n1", nil))
	create(t, cs, pod(ns, "kept", "n1", nil))
	inf := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{DisableStreamingList: true})
	sii := clientgo.Wrap(inf)
	h := &handler{}
	if _, err := sii.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	stop := run(t, sii)
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced) {
		t.Fatal("not synced")
	}
	stop() // the client-go informer is done; the kinformer one resumes below
	if err := cs.CoreV1().Pods(ns).Delete(bounded(t), "gone", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	create(t, cs, pod(ns, "after", "n1", nil)) // moves the revision past the deletion
	if _, err := srv.Compact(); err != nil {
		t.Fatal(err)
	}
	inf.Start()
	defer inf.Stop()
	eventually(t, "the inferred deletion", func() bool { return len(h.find("delete", ns+"/gone")) == 1 })
	c := h.find("delete", ns+"/gone")[0]
	if !c.final || c.rv != gone.ResourceVersion {
		t.Fatalf("OnDelete(gone) %+v, want a DeletedFinalStateUnknown with the last known state (rv %s)", c, gone.ResourceVersion)
	}
	eventually(t, "the re-list's add", func() bool { return len(h.find("add", ns+"/after")) == 1 })
	if c := h.find("add", ns+"/after")[0]; c.initial {
		t.Fatalf("OnAdd(after) from a re-list: %+v, want isInInitialList false", c)
	}
}

// A warm restart from the durable cache (kinformer's Options.StateDir),
// through Wrap: the objects restored from the state file are, to a
// client-go handler, the informer's initial list (OnAdd with
// isInInitialList true), as if listed; what the watch then brings is not.
func TestWrapStateDirRestoreIsInitialList(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "a", "n1", nil))
	create(t, cs, pod(ns, "b", "n1", nil))
	dir := t.TempDir()
	newInf := func() *kinformer.Informer[*corev1.Pod] {
		return kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{StateDir: dir})
	}

	first := clientgo.Wrap(newInf())
	stop := run(t, first)
	if !cache.WaitForCacheSync(bounded(t).Done(), first.HasSynced) {
		t.Fatal("the first informer did not sync")
	}
	stop() // writes the state file

	// The second one starts from the file; kinformer says which objects
	// came from it.
	inf := newInf()
	var mu sync.Mutex
	causes := map[string]kinformer.Cause{}
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{Added: func(e kinformer.Event[*corev1.Pod]) {
		mu.Lock()
		defer mu.Unlock()
		causes[e.Key] = e.Cause
	}})
	second := clientgo.Wrap(inf)
	h := &handler{}
	reg, err := second.AddEventHandler(h)
	if err != nil {
		t.Fatal(err)
	}
	run(t, second)
	if !cache.WaitForCacheSync(bounded(t).Done(), second.HasSynced, reg.HasSynced) {
		t.Fatal("the second informer did not sync")
	}
	for _, name := range []string{"a", "b"} {
		key := ns + "/" + name
		mu.Lock()
		cause := causes[key]
		mu.Unlock()
		if cause != kinformer.CauseRestore {
			t.Fatalf("%s was added by %v, not restored from the state file: the test restarts nothing", key, cause)
		}
		if c := h.find("add", key); len(c) != 1 || !c[0].initial {
			t.Fatalf("%s restored from the state file: %+v, want one OnAdd with isInInitialList true", key, c)
		}
	}
	create(t, cs, pod(ns, "c", "n1", nil))
	eventually(t, "the watched add", func() bool { return len(h.find("add", ns+"/c")) == 1 })
	if c := h.find("add", ns+"/c")[0]; c.initial {
		t.Fatalf("OnAdd(c) from the watch after a warm start: %+v, want isInInitialList false", c)
	}
}

// Index with an index function of several values: an object filed under
// several of the given object's values is returned once.
func TestIndexSeveralValues(t *testing.T) {
	_, cs, ns := clients(t)
	byTags := func(obj any) ([]string, error) {
		p, ok := obj.(*corev1.Pod)
		if !ok {
			return nil, fmt.Errorf("not a pod: %T", obj)
		}
		if p.Labels["tags"] == "" {
			return nil, nil
		}
		return strings.Split(p.Labels["tags"], "."), nil
	}
	create(t, cs, pod(ns, "xy", "n1", map[string]string{"tags": "x.y"}))
	create(t, cs, pod(ns, "y", "n1", map[string]string{"tags": "y"}))
	create(t, cs, pod(ns, "z", "n1", map[string]string{"tags": "z"}))
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{"tags": byTags})
	run(t, sii)
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced) {
		t.Fatal("not synced")
	}
	for _, tc := range []struct{ tags, want string }{
		{"x.y", "xy,y"},
		{"y.x", "xy,y"},
		{"x.y.z", "xy,y,z"},
		{"x", "xy"},
		{"y.y", "xy,y"}, // the same value twice
	} {
		got, err := sii.GetIndexer().Index("tags", &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Labels: map[string]string{"tags": tc.tags}}})
		if err != nil {
			t.Fatalf("Index(tags, %s): %v", tc.tags, err)
		}
		var names []string
		for _, o := range got {
			names = append(names, o.(*corev1.Pod).Name)
		}
		sort.Strings(names)
		if strings.Join(names, ",") != tc.want {
			t.Fatalf("Index(tags, a pod with tags %s) = %v, want %s, each once", tc.tags, names, tc.want)
		}
	}
}
