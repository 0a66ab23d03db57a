package controllerruntime_test

import (
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	toolscache "k8s.io/client-go/tools/cache"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
	"github.com/kinformer/kinformer/internal/testenv"
)

// managerLog receives what is logged through controller-runtime's
// logger (the manager's: TestMain sets it), and klogLog what is logged
// through klog.
var managerLog, klogLog = &recorder{}, &recorder{}

// logLine is one line a recorder received.
type logLine struct {
	name  string // the logger's name ("kinformer")
	level int    // logr's V level; -1 for Error
	msg   string
	kv    map[string]string
}

func (l logLine) String() string {
	return fmt.Sprintf("%s V(%d) %q %v", l.name, l.level, l.msg, l.kv)
}

// recorder is a logr.LogSink that keeps every line, at every level.
type recorder struct {
	mu    sync.Mutex
	lines []logLine
}

// where returns the lines for which keep is true.
func (r *recorder) where(keep func(logLine) bool) []logLine {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []logLine
	for _, l := range r.lines {
		if keep(l) {
			out = append(out, l)
		}
	}
	return out
}

func (r *recorder) sink() logr.LogSink { return &recSink{rec: r} }

type recSink struct {
	rec  *recorder
	name string
	kv   []any
}

func (s *recSink) Init(logr.RuntimeInfo)  {}
func (s *recSink) Enabled(level int) bool { return true }
func (s *recSink) Info(level int, msg string, kv ...any) {
	s.add(level, msg, kv)
}
func (s *recSink) Error(err error, msg string, kv ...any) {
	if err != nil {
		kv = append(kv, "error", err)
	}
	s.add(-1, msg, kv)
}
func (s *recSink) WithValues(kv ...any) logr.LogSink {
	return &recSink{rec: s.rec, name: s.name, kv: append(append([]any(nil), s.kv...), kv...)}
}
func (s *recSink) WithName(name string) logr.LogSink {
	if s.name != "" {
		name = s.name + "/" + name
	}
	return &recSink{rec: s.rec, name: name, kv: s.kv}
}

func (s *recSink) add(level int, msg string, kv []any) {
	l := logLine{name: s.name, level: level, msg: msg, kv: map[string]string{}}
	all := append(append([]any(nil), s.kv...), kv...)
	for i := 0; i+1 < len(all); i += 2 {
		l.kv[fmt.Sprint(all[i])] = fmt.Sprint(all[i+1])
	}
	s.rec.mu.Lock()
	s.rec.lines = append(s.rec.lines, l)
	s.rec.mu.Unlock()
}

// inNamespace selects the kinformer lines of informers in namespace ns.
func inNamespace(ns string) func(logLine) bool {
	return func(l logLine) bool { return l.name == "kinformer" && l.kv["namespace"] == ns }
}

// Without Options.Logger, a StateDir restore shows in the manager's log:
// one Info line (V(0)) for the informer restored, naming its kind and
// namespace, with the number of objects.
func TestDefaultLoggerIsTheManagers(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	for range 2 {
		c, err := kcr.With(kcr.Options{StateDir: dir})(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
			t.Fatal(err)
		}
		runCache(t, c)()
	}
	restored := managerLog.where(func(l logLine) bool {
		return inNamespace(ns)(l) && strings.Contains(l.msg, "restored from the state file")
	})
	if len(restored) != 1 {
		t.Fatalf("%d restore lines in the manager's log, want 1: %v", len(restored), managerLog.where(inNamespace(ns)))
	}
	if l := restored[0]; l.level != 0 || l.kv["kind"] != "Pod" || l.kv["resource"] != "pods" || l.kv["objects"] != "2" {
		t.Errorf("restore line %v: want V(0), kind=Pod, resource=pods, objects=2", l)
	}
}

// A 2 s connection cut under a cache without a Logger or a
// DefaultWatchErrorHandler: what the informer met goes to the manager's
// log, naming the kind and the failure (down), below error level (at
// Debug while routine), and nothing to klog; the cache catches up once
// the server is back.
func TestWatchErrorsGoToTheManagersLog(t *testing.T) {
	admin, cs, ns := setup(t)
	ctx := t.Context()
	p, cfg := testenv.NewCutProxy(t, admin)
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	klogBefore := len(klogLog.where(func(logLine) bool { return true }))

	p.Down()
	time.Sleep(2 * time.Second)
	p.Up()

	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "after"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(time.Minute)
	for {
		var got corev1.Pod
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "after"}, &got)
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the cache did not catch up after the cut: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}

	lines := managerLog.where(inNamespace(ns))
	var failures, errs []logLine
	for _, l := range lines {
		switch {
		case l.level < 0:
			errs = append(errs, l)
		case l.kv["kind"] == "Pod" && l.kv["resource"] == "pods" && l.kv["failure"] == "down" && strings.HasPrefix(l.msg, "kinformer: watch"):
			// At Debug (a V level above 0) while reconnecting is routine,
			// at V(0) once the backoff has grown.
			failures = append(failures, l)
		}
	}
	if len(failures) == 0 {
		t.Errorf("the watch's failure (failure=down) is not in the manager's log with kind=Pod; its lines: %v", lines)
	}
	if len(errs) > 0 {
		t.Errorf("a connection cut logged at error level: %v", errs)
	}
	if k := klogLog.where(func(logLine) bool { return true }); len(k) > klogBefore {
		t.Errorf("the cut logged through klog: %v", k[klogBefore:])
	}
}

// A list the server forbids is logged at error level through the manager's
// logger, naming the kind: retrying cannot help.
func TestForbiddenIsAnErrorInTheManagersLog(t *testing.T) {
	_, _, ns := setup(t)
	cfg := testenv.Shared(t).RestrictedConfig() // may list pods in "allowed" only
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(t.Context(), &corev1.Pod{}, cache.BlockUntilSynced(false)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	forbidden := func(l logLine) bool {
		return inNamespace(ns)(l) && l.level < 0 && l.kv["kind"] == "Pod" && strings.Contains(l.kv["error"], "forbidden")
	}
	deadline := time.Now().Add(30 * time.Second)
	for len(managerLog.where(forbidden)) == 0 {
		if time.Now().After(deadline) {
			t.Fatalf("no error line for the forbidden list in the manager's log: %v", managerLog.where(inNamespace(ns)))
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// Each informer kcr starts says so in one Info line naming its kind,
// resource, form and mode (compact, decoded or projected), whether made
// before the start or after; IsKinformer tells kcr's informers from those
// of cache.Options.NewInformer.
func TestInformerStartLineAndIsKinformer(t *testing.T) {
	cfg, _, ns := setup(t)
	ctx := t.Context()
	lines := newLogs()
	c, err := kcr.With(kcr.Options{Logger: slog.New(lines), ByObject: map[client.Object]kcr.ByObject{&corev1.ConfigMap{}: {Fields: []string{"data"}}}})(cfg,
		cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}},
			ByObject: map[client.Object]cache.ByObject{&corev1.Secret{}: {UnsafeDisableDeepCopy: ptr.To(true)}}})
	if err != nil {
		t.Fatal(err)
	}
	var infs []cache.Informer
	for _, obj := range []client.Object{&corev1.Pod{}, &corev1.ConfigMap{}, &corev1.Secret{}} {
		inf, err := c.GetInformer(ctx, obj, cache.BlockUntilSynced(false))
		if err != nil {
			t.Fatal(err)
		}
		infs = append(infs, inf)
	}
	runCache(t, c)
	svc := &unstructured.Unstructured{}
	svc.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Service"))
	inf, err := c.GetInformer(ctx, svc)
	if err != nil {
		t.Fatal(err)
	}
	infs = append(infs, inf)
	for i, inf := range infs {
		if !kcr.IsKinformer(inf) {
			t.Errorf("informer %d: IsKinformer = false", i)
		}
	}
	for _, want := range [][]string{
		{"kind=Pod", "resource=pods", "form=typed", "mode=compact"},
		{"kind=ConfigMap", "resource=configmaps", "form=typed", "mode=compact+projected", "fields=data,metadata.labels,metadata.ownerReferences,metadata.generation"},
		{"kind=Secret", "resource=secrets", "form=typed", "mode=plain"},
		{"kind=Service", "resource=services", "form=unstructured", "mode=compact"},
	} {
		if n := lines.count(append([]string{"kinformer: informer started", "namespace=" + ns}, want...)...); n != 1 {
			t.Errorf("%d start lines with %v, want 1; the lines: %v", n, want, lines.all())
		}
	}
	if n := lines.count("kinformer: informer started"); n != 4 {
		t.Errorf("%d start lines, want 4: %v", n, lines.all())
	}

	// cache.Options.NewInformer's informers are not kinformer's.
	own, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}, NewInformer: toolscache.NewSharedIndexInformer})
	if err != nil {
		t.Fatal(err)
	}
	inf, err = own.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
	if err != nil {
		t.Fatal(err)
	}
	if kcr.IsKinformer(inf) {
		t.Error("IsKinformer of NewInformer's informer = true")
	}
}

// An informer whose first list fails (forbidden) before the cache has set
// its watch error handler: the handler still gets that error, at once,
// not only the next attempt's after the backoff (800 ms less at most a
// quarter).
func TestWatchErrorBeforeTheHandlerIsSet(t *testing.T) {
	_, _, ns := setup(t)
	cfg := testenv.Shared(t).RestrictedConfig() // may list pods in "allowed" only
	errs := make(chan error, 16)
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}},
		DefaultWatchErrorHandler: func(_ context.Context, _ *toolscache.Reflector, err error) {
			select {
			case errs <- err:
			default:
			}
		}})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(ctx) }()
	defer func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	}()
	if !c.WaitForCacheSync(ctx) {
		t.Fatal("no sync")
	}
	// The factory starts the informer as it hands it out: hold the cache
	// there until its first list has failed.
	defer kcr.SetAcquiredHook(func(lastError func() (error, time.Time)) {
		deadline := time.Now().Add(30 * time.Second)
		for {
			if err, _ := lastError(); err != nil || time.Now().After(deadline) {
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	})()
	if _, err := c.GetInformer(t.Context(), &corev1.Pod{}, cache.BlockUntilSynced(false)); err != nil {
		t.Fatal(err)
	}
	select {
	case err := <-errs:
		if !apierrors.IsForbidden(err) {
			t.Fatalf("the watch error handler got %v, want the list's 403", err)
		}
	case <-time.After(400 * time.Millisecond):
		t.Fatal("the first list's 403 did not reach the watch error handler")
	}
}
