package controllerruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/sharding"
)

// logs collects the informers' log lines.
type logs struct {
	mu    *sync.Mutex
	lines *[]string
}

func newLogs() logs { return logs{mu: &sync.Mutex{}, lines: &[]string{}} }

func (l logs) Enabled(context.Context, slog.Level) bool { return true }
func (l logs) WithAttrs(as []slog.Attr) slog.Handler {
	return attrs{l, as}
}
func (l logs) WithGroup(string) slog.Handler                 { return l }
func (l logs) Handle(_ context.Context, r slog.Record) error { l.add(r, nil); return nil }

func (l logs) add(r slog.Record, extra []slog.Attr) {
	s := r.Message
	for _, a := range extra {
		s += " " + a.String()
	}
	r.Attrs(func(a slog.Attr) bool { s += " " + a.String(); return true })
	l.mu.Lock()
	defer l.mu.Unlock()
	*l.lines = append(*l.lines, s)
}

func (l logs) has(sub string) bool {
	l.mu.Lock()
	defer l.mu.Unlock()
	for _, s := range *l.lines {
		if strings.Contains(s, sub) {
			return true
		}
	}
	return false
}

// count returns how many lines hold every one of subs.
func (l logs) count(subs ...string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range *l.lines {
		all := true
		for _, sub := range subs {
			all = all && strings.Contains(s, sub)
		}
		if all {
			n++
		}
	}
	return n
}

func (l logs) all() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(*l.lines)
}

type attrs struct {
	l  logs
	as []slog.Attr
}

func (a attrs) Enabled(context.Context, slog.Level) bool { return true }
func (a attrs) WithAttrs(as []slog.Attr) slog.Handler {
	return attrs{a.l, append(append([]slog.Attr(nil), a.as...), as...)}
}
func (a attrs) WithGroup(string) slog.Handler                 { return a }
func (a attrs) Handle(_ context.Context, r slog.Record) error { a.l.add(r, a.as); return nil }

// runCache starts c until the returned stop is called (or the test ends),
// and waits for its sync.
func runCache(t *testing.T, c cache.Cache) (stop func()) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	var once sync.Once
	stop = func() {
		once.Do(func() {
			cancel()
			if err := <-done; err != nil {
				t.Errorf("Start: %v", err)
			}
		})
	}
	t.Cleanup(stop)
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if !c.WaitForCacheSync(wctx) {
		t.Fatal("the cache did not sync")
	}
	return stop
}

func setup(t *testing.T) (*rest.Config, kubernetes.Interface, string) {
	t.Helper()
	srv := testenv.Shared(t)
	current := goleak.IgnoreCurrent()
	t.Cleanup(func() {
		if err := goleak.Find(current,
			goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
			goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
			goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
			goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
			goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
			// controller-runtime's dynamic RESTMapper and client-go's
			// rate limiters keep these for the life of the process.
			goleak.IgnoreAnyFunction("k8s.io/apimachinery/pkg/util/wait.BackoffUntil"),
		); err != nil {
			t.Error(err)
		}
	})
	cs, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return srv.Config(), cs, testenv.NewNamespace(t, srv.Config())
}

func pod(ns, name string) *corev1.Pod {
	return &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{"app": "web"}},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "c", Image: "busybox"}}}}
}

// kcr.With: the informers decode built-in types themselves (protobuf),
// drop managedFields when asked, and with a state directory a new cache
// starts warm from the last one's file and catches up with what changed
// while it was down.
func TestWithStateDirDirectDecodingAndManagedFields(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	newCache := func(l logs) cache.Cache {
		c, err := kcr.With(kcr.Options{StateDir: dir, DropManagedFields: true, Logger: slog.New(l)})(cfg, cache.Options{
			DefaultNamespaces: map[string]cache.Config{ns: {}},
		})
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	first := newLogs()
	c := newCache(first)
	if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	stop := runCache(t, c)
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &got); err != nil {
		t.Fatal(err)
	}
	if got.ManagedFields != nil {
		t.Fatal("DropManagedFields: the cached pod has managedFields")
	}
	if got.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("Get returned %v", got)
	}
	if !first.has("decoding=direct encoding=protobuf") {
		t.Errorf("pods not decoded by kinformer; logs: %q", *first.lines)
	}
	stop()

	// While it is down: b goes, c comes.
	if err := cs.CoreV1().Pods(ns).Delete(ctx, "b", metav1.DeleteOptions{GracePeriodSeconds: new(int64)}); err != nil {
		t.Fatal(err)
	}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "c"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	second := newLogs()
	c2 := newCache(second)
	if _, err := c2.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c2)
	if !second.has("restored from the state file") || !second.has("objects=2") {
		t.Fatalf("the second cache did not start from the state file; logs: %q", *second.lines)
	}
	var list corev1.PodList
	if err := c2.List(ctx, &list, client.InNamespace(ns)); err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, p := range list.Items {
		names = append(names, p.Name)
	}
	if strings.Join(sorted(names), ",") != "a,c" {
		t.Fatalf("after the warm start the cache lists %v, want a,c", names)
	}
}

func sorted(s []string) []string {
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// kcr.With's Sharding: two managers' caches over one group split every
// kind they cache between them, each object in exactly one.
func TestWithShardingSplitsTheCache(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	const n = 40
	for i := range n {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("cm-%02d", i)}}
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var caches []cache.Cache
	for _, id := range []string{"kcr-a", "kcr-b"} {
		sh := sharding.New(cfg, sharding.Options{Group: "kcr", Namespace: ns, Identity: id,
			LeaseDuration: 4 * time.Second, RenewPeriod: 500 * time.Millisecond})
		shCtx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = sh.Run(shCtx) }()
		t.Cleanup(func() { cancel(); <-done })
		c, err := kcr.With(kcr.Options{Sharding: sh})(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}, cache.BlockUntilSynced(false)); err != nil {
			t.Fatal(err)
		}
		runCache(t, c)
		caches = append(caches, c)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		seen := map[string]int{}
		each := make([]int, len(caches))
		for i, c := range caches {
			var list corev1.ConfigMapList
			if err := c.List(ctx, &list, client.InNamespace(ns)); err != nil {
				t.Fatal(err)
			}
			for _, cm := range list.Items {
				if strings.HasPrefix(cm.Name, "cm-") {
					seen[cm.Name]++
					each[i]++
				}
			}
		}
		split := len(seen) == n && each[0] > 0 && each[1] > 0
		for _, v := range seen {
			split = split && v == 1
		}
		if split {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the ConfigMaps were not split between the two caches: %d and %d of %d, %d distinct", each[0], each[1], n, len(seen))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// List with a Limit returns at most that many items, counting only those
// that match the label selector.
func TestListLimit(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b", "c"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	other := pod(ns, "other")
	other.Labels = map[string]string{"app": "db"}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, other, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	for _, tc := range []struct {
		opts []client.ListOption
		want int
	}{
		{[]client.ListOption{client.InNamespace(ns), client.Limit(1)}, 1},
		{[]client.ListOption{client.InNamespace(ns), client.Limit(3)}, 3},
		{[]client.ListOption{client.InNamespace(ns), client.Limit(10)}, 4},
		{[]client.ListOption{client.Limit(2)}, 2},
		{[]client.ListOption{client.InNamespace(ns), client.MatchingLabels{"app": "web"}, client.Limit(2)}, 2},
		{[]client.ListOption{client.InNamespace(ns), client.MatchingLabels{"app": "db"}, client.Limit(2)}, 1},
	} {
		var list corev1.PodList
		if err := c.List(ctx, &list, tc.opts...); err != nil {
			t.Fatal(err)
		}
		var o client.ListOptions
		o.ApplyOptions(tc.opts)
		if len(list.Items) != tc.want {
			t.Errorf("List(namespace %q, labels %v, limit %d) = %d items, want %d", o.Namespace, o.LabelSelector, o.Limit, len(list.Items), tc.want)
		}
	}
}

// Get of a cluster-scoped object ignores the key's namespace, as
// controller-runtime's cache does: with or without DefaultNamespaces.
func TestGetClusterScopedIgnoresNamespace(t *testing.T) {
	cfg, _, ns := setup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		opts cache.Options
	}{
		{"all namespaces", cache.Options{}},
		{"DefaultNamespaces", cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}}},
	} {
		c, err := kcr.NewCache(cfg, tc.opts)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetInformer(ctx, &corev1.Namespace{}); err != nil {
			t.Fatal(err)
		}
		stop := runCache(t, c)
		for _, keyNS := range []string{"", ns, "elsewhere"} {
			var got corev1.Namespace
			if err := c.Get(ctx, client.ObjectKey{Namespace: keyNS, Name: ns}, &got); err != nil {
				t.Errorf("%s: Get(namespace %s) with %q in the key: %v", tc.name, ns, keyNS, err)
			} else if got.Name != ns {
				t.Errorf("%s: Get(namespace %s) with %q in the key returned %q", tc.name, ns, keyNS, got.Name)
			}
		}
		stop()
	}
}

// An informer the cache removed says it has stopped and refuses new
// handlers and indexes, as controller-runtime's; the kind is acquired
// again from the factory, and the metadata form (whose transform sets the
// kind) shares a factory informer with the one being removed rather than
// failing on a transform that differs.
func TestRemovedInformerRefusesHandlers(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	meta := &metav1.PartialObjectMetadata{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "Pod"}}
	for _, obj := range []client.Object{&corev1.Pod{}, meta} {
		inf, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.Fatal(err)
		}
		if inf.IsStopped() {
			t.Fatalf("%T: stopped before its removal", obj)
		}
		if err := c.RemoveInformer(ctx, obj); err != nil {
			t.Fatal(err)
		}
		if !inf.IsStopped() {
			t.Fatalf("%T: not stopped after its removal", obj)
		}
		if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err == nil {
			t.Fatalf("%T: a handler added to a removed informer", obj)
		}
		if err := inf.AddIndexers(toolscache.Indexers{"x": func(any) ([]string, error) { return nil, nil }}); err == nil {
			t.Fatalf("%T: an index added to a removed informer", obj)
		}
		again, err := c.GetInformer(ctx, obj)
		if err != nil {
			t.Fatalf("%T: acquired again: %v", obj, err)
		}
		if again.IsStopped() {
			t.Fatalf("%T: the new informer says it is stopped", obj)
		}
		if _, err := again.AddEventHandler(toolscache.ResourceEventHandlerFuncs{}); err != nil {
			t.Fatalf("%T: the new informer refuses a handler: %v", obj, err)
		}
	}
	// The same kind and form twice in one cache: one transform value, so
	// the factory's sharing rules hold (a RemoveInformer racing a Get
	// acquires the informer being released).
	list := &metav1.PartialObjectMetadataList{TypeMeta: metav1.TypeMeta{APIVersion: "v1", Kind: "PodList"}}
	if err := c.List(ctx, list, client.InNamespace(ns)); err != nil || len(list.Items) != 1 {
		t.Fatalf("List of metadata: %d items, %v", len(list.Items), err)
	}
}
