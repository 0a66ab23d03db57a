package controllerruntime_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
	"github.com/kinformer/kinformer/internal/testenv"
)

// handlerLog records a handler's calls as "add ns/name", "delete ns/name"
// ("delete? ns/name" for a DeletedFinalStateUnknown).
type handlerLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *handlerLog) add(s string) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, s)
}

func (l *handlerLog) has(want ...string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, w := range want {
		if !slices.Contains(l.lines, w) {
			return false
		}
	}
	return true
}

func (l *handlerLog) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Join(l.lines, "\n")
}

func (l *handlerLog) handler() toolscache.ResourceEventHandler {
	key := func(obj any) string {
		o := obj.(client.Object)
		return o.GetNamespace() + "/" + o.GetName()
	}
	return toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { l.add("add " + key(obj)) },
		DeleteFunc: func(obj any) {
			if t, ok := obj.(toolscache.DeletedFinalStateUnknown); ok {
				l.add("delete? " + key(t.Obj))
				return
			}
			l.add("delete " + key(obj))
		},
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A cache of DefaultNamespaces plus the namespaces a NamespaceSelector
// matches follows them while it runs: a namespace labelled joins (the
// handler gets OnAdd for its objects, List and Get and the indexes cover
// it), one unlabelled or removed by hand leaves (OnDelete with a
// DeletedFinalStateUnknown for each object; Get of it fails as for any
// namespace the cache does not hold), and AddNamespace adds one by hand.
func TestNamespacesChangeWhileTheCacheRuns(t *testing.T) {
	cfg, cs, nsA := setup(t)
	nsB, nsC, nsD := testenv.NewNamespace(t, cfg), testenv.NewNamespace(t, cfg), testenv.NewNamespace(t, cfg)
	label := "kinformer.test/kcr-tenant"
	testenv.LabelNamespace(t, cfg, nsB, label, nsA)
	for _, ns := range []string{nsA, nsB, nsC, nsD} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"owner": ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := kcr.With(kcr.Options{NamespaceSelector: label + "=" + nsA})(cfg, cache.Options{
		DefaultNamespaces: map[string]cache.Config{nsA: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var log handlerLog
	if _, err := inf.AddEventHandler(log.handler()); err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &corev1.ConfigMap{}, "owner", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["owner"]}
	}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)

	names := func() []string {
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cm := range l.Items {
			out = append(out, cm.Namespace)
		}
		slices.Sort(out)
		return out
	}
	// Synced means the selected namespaces too.
	if got, want := names(), sorted([]string{nsA, nsB}); !slices.Equal(got, want) {
		t.Fatalf("List after WaitForCacheSync: namespaces %v, want %v", got, want)
	}
	if got, want := kcr.Namespaces(c), sorted([]string{nsA, nsB}); !slices.Equal(got, want) {
		t.Fatalf("Namespaces = %v, want %v", got, want)
	}
	var cm corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsC, Name: "cm"}, &cm); err == nil || !strings.Contains(err.Error(), "unknown namespace") {
		t.Fatalf("Get in a namespace not held: %v", err)
	}

	// Labelled: joins.
	testenv.LabelNamespace(t, cfg, nsC, label, nsA)
	waitFor(t, "OnAdd of "+nsC+"/cm", func() bool { return log.has("add " + nsC + "/cm") })
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsC, Name: "cm"}, &cm); err != nil {
		t.Fatalf("Get in a namespace that joined: %v", err)
	}
	var byOwner corev1.ConfigMapList
	if err := c.List(ctx, &byOwner, client.MatchingFields{"owner": nsC}); err != nil || len(byOwner.Items) != 1 {
		t.Fatalf("the index of a namespace that joined: %v, %d items", err, len(byOwner.Items))
	}

	// By hand.
	if err := kcr.AddNamespace(ctx, c, nsD); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnAdd of "+nsD+"/cm", func() bool { return log.has("add " + nsD + "/cm") })
	if err := kcr.RemoveNamespace(c, nsA); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnDelete of "+nsA+"/cm", func() bool { return log.has("delete? " + nsA + "/cm") })
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "cm"}, &cm); err == nil {
		t.Fatal("Get in a namespace removed succeeded")
	}

	// Unlabelled: leaves.
	testenv.LabelNamespace(t, cfg, nsB, label, "")
	waitFor(t, "OnDelete of "+nsB+"/cm", func() bool { return log.has("delete? " + nsB + "/cm") })
	if got, want := kcr.Namespaces(c), sorted([]string{nsC, nsD}); !slices.Equal(got, want) {
		t.Fatalf("Namespaces = %v, want %v", got, want)
	}
	if got, want := names(), sorted([]string{nsC, nsD}); !slices.Equal(got, want) {
		t.Fatalf("List: namespaces %v, want %v", got, want)
	}
	// A new object of a namespace that joined reaches the handler.
	if _, err := cs.CoreV1().ConfigMaps(nsC).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "later"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnAdd of "+nsC+"/later", func() bool { return log.has("add " + nsC + "/later") })
	if strings.Contains(log.String(), "delete "+nsA) || strings.Contains(log.String(), "delete "+nsB) {
		t.Fatalf("a namespace that left was told as a real deletion:\n%s", log.String())
	}

	// Removed and added back at once: its objects' OnDelete come before
	// their OnAdd, never after.
	if err := kcr.RemoveNamespace(c, nsD); err != nil {
		t.Fatal(err)
	}
	if err := kcr.AddNamespace(ctx, c, nsD); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnAdd of "+nsD+"/cm again", func() bool {
		n := 0
		for _, l := range strings.Split(log.String(), "\n") {
			if l == "add "+nsD+"/cm" {
				n++
			}
		}
		return n == 2
	})
	var seq []string
	for _, l := range strings.Split(log.String(), "\n") {
		if strings.HasSuffix(l, " "+nsD+"/cm") {
			seq = append(seq, l)
		}
	}
	if want := []string{"add " + nsD + "/cm", "delete? " + nsD + "/cm", "add " + nsD + "/cm"}; !slices.Equal(seq, want) {
		t.Fatalf("events of %s/cm: %v, want %v", nsD, seq, want)
	}

	// A cache of every namespace cannot change them.
	all, err := kcr.NewCache(cfg, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if err := kcr.AddNamespace(context.Background(), all, nsA); !errors.Is(err, kcr.ErrNamespacesFixed) {
		t.Fatalf("AddNamespace on a cache of every namespace: %v, want ErrNamespacesFixed", err)
	}
}

// A kind the manager may not list: Get, List and GetInformer of it return
// the 403, naming the kind, the user and the verb, at once rather than
// after their context (a controller's start fails with it), while the
// kinds it may read sync.
func TestForbiddenKindFailsAtOnce(t *testing.T) {
	_, _, _ = setup(t)
	srv := testenv.Shared(t)
	logs := newLogs()
	c, err := kcr.With(kcr.Options{Logger: slog.New(logs)})(srv.RestrictedConfig(), cache.Options{
		DefaultNamespaces: map[string]cache.Config{testenv.AllowedNamespace: {}}})
	if err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	ctx, cancel := context.WithTimeout(t.Context(), 20*time.Second)
	defer cancel()
	var cms corev1.ConfigMapList
	if err := c.List(ctx, &cms); err != nil {
		t.Fatalf("List of an allowed kind: %v", err)
	}
	began := time.Now()
	var s corev1.Secret
	err = c.Get(ctx, client.ObjectKey{Namespace: testenv.AllowedNamespace, Name: "x"}, &s)
	if !apierrors.IsForbidden(err) {
		t.Fatalf("Get of a forbidden kind = %v, want a 403", err)
	}
	for _, want := range []string{"Secret", testenv.RestrictedUser, "list", `"secrets"`} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("the error %q does not name %s", err, want)
		}
	}
	if d := time.Since(began); d > 5*time.Second {
		t.Fatalf("the 403 took %v", d)
	}
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets); !apierrors.IsForbidden(err) {
		t.Fatalf("List of a forbidden kind = %v, want a 403", err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Secret{}); !apierrors.IsForbidden(err) {
		t.Fatalf("GetInformer of a forbidden kind = %v, want a 403", err)
	}
	// The cache's sync, given up, names the kind that did not sync and why.
	short, cancelShort := context.WithTimeout(ctx, time.Second)
	defer cancelShort()
	if c.WaitForCacheSync(short) {
		t.Fatal("WaitForCacheSync true with a forbidden kind")
	}
	if !logs.has("WaitForCacheSync gave up before this kind synced") || !logs.has("kind=Secret") || !logs.has("forbidden") || !logs.has("objects=0") {
		t.Fatalf("the log does not name the kind that did not sync and why:\n%s", strings.Join(*logs.lines, "\n"))
	}
}

// A kind of ByObject with namespaces of its own (a multi-namespace cache
// without a cache of cluster-scoped kinds) runs until the cache stops:
// its informer takes handlers after the start, and serves what is created
// then. (The namespaces' runs once ended as soon as they began.)
func TestByObjectNamespacesRunUntilStopped(t *testing.T) {
	cfg, cs, ns := setup(t)
	c, err := kcr.NewCache(cfg, cache.Options{ByObject: map[client.Object]cache.ByObject{
		&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{ns: {}}},
	}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	time.Sleep(200 * time.Millisecond)
	if inf.IsStopped() {
		t.Fatal("the informer is stopped right after the start")
	}
	var log handlerLog
	if _, err := inf.AddEventHandler(log.handler()); err != nil {
		t.Fatalf("AddEventHandler after the start: %v", err)
	}
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "OnAdd of "+ns+"/x", func() bool { return log.has("add " + ns + "/x") })
	var got corev1.ConfigMap
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "x"}, &got); err != nil {
		t.Fatalf("Get: %v", err)
	}
}

// A namespace flipped in and out of a NamespaceSelector's cache any number
// of times leaves the heap where one join and leave leave it: what each
// leave's informers held is let go (the heap says so; a leaked informer
// whose cache had been emptied would not show here).
func TestSelectorFlippedNamespaceIsFreed(t *testing.T) {
	cfg, cs, ns := setup(t)
	const objects, size = 8, 900 << 10
	for i := range objects {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprint("big-", i)},
			Data:       map[string]string{"v": strings.Repeat(string(rune('a'+i)), size)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	label, tenant := "kinformer.test/kcr-flip", "flip-"+ns
	c, err := kcr.With(kcr.Options{NamespaceSelector: label + "=" + tenant})(cfg, cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(t.Context(), &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	// Counts, not objects: the handler keeps nothing alive.
	var added, deleted atomic.Int64
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { added.Add(1) },
		DeleteFunc: func(any) { deleted.Add(1) },
	}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	flip := func(round int) {
		t.Helper()
		testenv.LabelNamespace(t, cfg, ns, label, tenant)
		waitFor(t, "the namespace's join", func() bool { return added.Load() == int64(objects*round) })
		testenv.LabelNamespace(t, cfg, ns, label, "")
		waitFor(t, "the namespace's leave", func() bool {
			return deleted.Load() == int64(objects*round) && len(kcr.Namespaces(c)) == 0
		})
	}
	heap := func() int64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return int64(ms.HeapAlloc)
	}
	// The leave's informers are released once its handlers are done:
	// wait (with a collection each time) until the heap is back under
	// limit, or fail after two minutes (a leak never gets there).
	settles := func(limit int64) int64 {
		t.Helper()
		deadline := time.Now().Add(2 * time.Minute)
		for {
			h := heap()
			if h <= limit || time.Now().After(deadline) {
				return h
			}
			time.Sleep(50 * time.Millisecond)
		}
	}
	before := heap()
	flip(1)
	if h := settles(before + objects*size/2); h > before+objects*size/2 {
		t.Fatalf("the heap grew %.1f MB over one join and leave of a namespace of %.1f MB", float64(h-before)/1e6, float64(objects*size)/1e6)
	}
	once := heap()
	const flips = 8
	for round := 2; round <= flips+1; round++ {
		flip(round)
	}
	after := settles(once + objects*size/2)
	t.Logf("heap after one join and leave %.1f MB, after %d more %.1f MB (a namespace holds %.1f MB of data)",
		float64(once)/1e6, flips, float64(after)/1e6, float64(objects*size)/1e6)
	if growth := after - once; growth > objects*size/2 {
		t.Fatalf("the heap grew %.1f MB over %d flips of a namespace of %.1f MB", float64(growth)/1e6, flips, float64(objects*size)/1e6)
	}
}
