package testenv_test

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

func TestMain(m *testing.M) { testenv.Main(m) }

func ctxFor(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	return ctx
}

func clientFor(t *testing.T, srv *testenv.Server) kubernetes.Interface {
	t.Helper()
	c, err := kubernetes.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func newConfigMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name},
		Data:       map[string]string{"k": "v"},
	}
}

func TestKillRestartKeepsObjects(t *testing.T) {
	srv := testenv.New(t)
	ctx := ctxFor(t)
	c := clientFor(t, srv)
	ns := testenv.NewNamespace(t, srv.Config())
	created, err := c.CoreV1().ConfigMaps(ns).Create(ctx, newConfigMap("survivor"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	host, pid := srv.Host(), srv.PID()

	srv.Kill()
	if srv.PID() != 0 {
		t.Fatalf("PID after Kill = %d, want 0", srv.PID())
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{}); err == nil {
		t.Fatal("Get succeeded while the server was killed")
	}

	start := time.Now()
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	t.Logf("restart after SIGKILL took %v", time.Since(start).Round(time.Millisecond))
	if srv.Host() != host {
		t.Errorf("Host changed across restart: %s -> %s", host, srv.Host())
	}
	if srv.PID() == pid || srv.PID() == 0 {
		t.Errorf("PID after restart = %d (before %d)", srv.PID(), pid)
	}
	// The old client (same host, same credentials) keeps working.
	got, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{})
	if err != nil {
		t.Fatalf("configmap lost across kill -9 + restart: %v", err)
	}
	if got.UID != created.UID || got.ResourceVersion != created.ResourceVersion {
		t.Errorf("configmap changed: uid %s rv %s, want uid %s rv %s", got.UID, got.ResourceVersion, created.UID, created.ResourceVersion)
	}
	// The restricted user's access survives too.
	rc, err := kubernetes.NewForConfig(srv.RestrictedConfig())
	if err != nil {
		t.Fatal(err)
	}
	if _, err := rc.CoreV1().ConfigMaps(testenv.AllowedNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("restricted list after restart: %v", err)
	}
	// A graceful restart works as well.
	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if _, err := c.CoreV1().ConfigMaps(ns).Get(ctx, "survivor", metav1.GetOptions{}); err != nil {
		t.Fatalf("configmap lost across graceful restart: %v", err)
	}
}

// churn creates a configmap and updates it a few times, returning the
// resourceVersion of the creation.
func churn(t *testing.T, ctx context.Context, c kubernetes.Interface, ns string) string {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Create(ctx, newConfigMap("churn"), metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	first := cm.ResourceVersion
	for i := range 5 {
		cm.Data["k"] = fmt.Sprint(i)
		if cm, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	return first
}

// watchFrom starts a watch on configmaps in ns from rv and returns the HTTP
// status code of the outcome: 0 if the watch was established and delivered
// a normal event, the error code if the request failed or the first event
// was an ERROR. If nothing arrives quickly it creates a configmap so that a
// healthy watch has something to deliver.
func watchFrom(t *testing.T, ctx context.Context, c kubernetes.Interface, ns, rv string) int32 {
	t.Helper()
	w, err := c.CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		if st, ok := err.(apierrors.APIStatus); ok {
			return st.Status().Code
		}
		t.Fatalf("watch: %v", err)
	}
	defer w.Stop()
	poke := time.After(500 * time.Millisecond)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case ev, ok := <-w.ResultChan():
			if !ok {
				t.Fatal("watch closed without an event")
			}
			if ev.Type == watch.Error {
				st, ok := ev.Object.(*metav1.Status)
				if !ok {
					t.Fatalf("ERROR event with %T", ev.Object)
				}
				return st.Code
			}
			return 0
		case <-poke:
			cm := newConfigMap("")
			cm.GenerateName = "poke-"
			if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		case <-timeout:
			t.Fatalf("watch from %s: no event within 30s", rv)
		}
	}
}

// With the watch cache off every watch goes to etcd, so a watch from a
// resourceVersion older than the compaction gets 410 Gone at once.
func TestCompactGivesGoneWithoutWatchCache(t *testing.T) {
	srv := testenv.New(t, testenv.WithWatchCache(false))
	ctx := ctxFor(t)
	c := clientFor(t, srv)
	ns := testenv.NewNamespace(t, srv.Config())
	old := churn(t, ctx, c, ns)

	if code := watchFrom(t, ctx, c, ns, old); code != 0 {
		t.Fatalf("watch from %s before compaction: code %d", old, code)
	}
	rev, err := srv.Compact()
	if err != nil {
		t.Fatal(err)
	}
	cur, err := srv.Revision()
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("compacted at revision %d (current %d), watching from %s", rev, cur, old)
	if cur < rev {
		t.Errorf("Revision() = %d < compacted revision %d", cur, rev)
	}
	if code := watchFrom(t, ctx, c, ns, old); code != http.StatusGone {
		t.Fatalf("watch from compacted rv %s: code %d, want 410", old, code)
	}
	// A watch from the compaction revision itself is still fine.
	if code := watchFrom(t, ctx, c, ns, fmt.Sprint(rev)); code != 0 {
		t.Fatalf("watch from rv %d: code %d, want success", rev, code)
	}
}

// With the watch cache on (the default), the apiserver serves watches from
// its cache, which still holds the recent events after an etcd compaction.
// A restart rebuilds the cache from the compacted store, after which a watch
// from the old resourceVersion gets 410 Gone.
func TestCompactGivesGoneWithWatchCacheAfterRestart(t *testing.T) {
	srv := testenv.New(t)
	ctx := ctxFor(t)
	c := clientFor(t, srv)
	ns := testenv.NewNamespace(t, srv.Config())
	old := churn(t, ctx, c, ns)

	if _, err := srv.Compact(); err != nil {
		t.Fatal(err)
	}
	// Documented, not asserted: whether the cache still serves old.
	t.Logf("watch cache on, after compaction, before restart: watch from %s -> code %d", old, watchFrom(t, ctx, c, ns, old))

	if err := srv.Restart(); err != nil {
		t.Fatal(err)
	}
	if code := watchFrom(t, ctx, c, ns, old); code != http.StatusGone {
		t.Fatalf("after compaction+restart, watch from rv %s: code %d, want 410", old, code)
	}
}

func TestRestrictedUser(t *testing.T) {
	srv := testenv.Shared(t)
	ctx := ctxFor(t)
	rc, err := kubernetes.NewForConfig(srv.RestrictedConfig())
	if err != nil {
		t.Fatal(err)
	}
	ns := testenv.NewNamespace(t, srv.Config())
	for _, other := range []string{ns, metav1.NamespaceDefault} {
		_, err := rc.CoreV1().ConfigMaps(other).List(ctx, metav1.ListOptions{})
		if !apierrors.IsForbidden(err) {
			t.Errorf("restricted list configmaps in %q: err = %v, want 403 Forbidden", other, err)
		}
	}
	if _, err := rc.CoreV1().ConfigMaps("").List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("restricted cluster-wide list: err = %v, want 403 Forbidden", err)
	}
	if _, err := rc.CoreV1().Secrets(testenv.AllowedNamespace).List(ctx, metav1.ListOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("restricted list secrets in allowed: err = %v, want 403 Forbidden", err)
	}
	if _, err := rc.CoreV1().ConfigMaps(testenv.AllowedNamespace).Create(ctx, newConfigMap("nope"), metav1.CreateOptions{}); !apierrors.IsForbidden(err) {
		t.Errorf("restricted create in allowed: err = %v, want 403 Forbidden", err)
	}
	if _, err := rc.CoreV1().ConfigMaps(testenv.AllowedNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("restricted list configmaps in allowed: %v", err)
	}
	if _, err := rc.CoreV1().Pods(testenv.AllowedNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		t.Errorf("restricted list pods in allowed: %v", err)
	}
	w, err := rc.CoreV1().ConfigMaps(testenv.AllowedNamespace).Watch(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatalf("restricted watch in allowed: %v", err)
	}
	w.Stop()
}

func TestCreatePod(t *testing.T) {
	srv := testenv.Shared(t)
	ctx := ctxFor(t)
	c := clientFor(t, srv)
	ns := testenv.NewNamespace(t, srv.Config())
	pod := &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: "p"},
		Spec: corev1.PodSpec{Containers: []corev1.Container{{
			Name:  "c",
			Image: "example.invalid/image:1",
		}}},
	}
	got, err := c.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("creating a pod: %v", err)
	}
	if got.Status.Phase != corev1.PodPending {
		t.Errorf("phase = %q, want Pending", got.Status.Phase)
	}
	if err := c.CoreV1().Pods(ns).Delete(ctx, "p", metav1.DeleteOptions{}); err != nil {
		t.Errorf("deleting the pod: %v", err)
	}
}

func TestNamespacesAreDistinct(t *testing.T) {
	srv := testenv.Shared(t)
	a := testenv.NewNamespace(t, srv.Config())
	b := testenv.NewNamespace(t, srv.Config())
	if a == b {
		t.Fatalf("NewNamespace returned %q twice", a)
	}
}

const helperEnv = "KINFORMER_TESTENV_PANIC_HELPER"

// TestHelperPanics is run as a subprocess by TestServerDiesWithTestProcess.
func TestHelperPanics(t *testing.T) {
	if os.Getenv(helperEnv) != "1" {
		t.Skip("helper for TestServerDiesWithTestProcess")
	}
	srv := testenv.New(t)
	fmt.Printf("SERVER pid=%d datadir=%s\n", srv.PID(), srv.DataDir())
	panic("test panics with a running server")
}

// A test binary that panics skips its cleanups; the server must still die
// with it (parent-death signal), not linger.
func TestServerDiesWithTestProcess(t *testing.T) {
	if runtime.GOOS != "linux" {
		t.Skip("relies on the Linux parent-death signal")
	}
	if testenv.Skipping() {
		t.Skip("testenv: " + testenv.EnvSkip + " is set")
	}
	bin, err := testenv.Build(ctxFor(t))
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperPanics$", "-test.v")
	cmd.Env = append(os.Environ(), helperEnv+"=1", testenv.EnvBinary+"="+bin)
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("helper did not fail:\n%s", out)
	}
	m := regexp.MustCompile(`SERVER pid=(\d+) datadir=(\S+)`).FindSubmatch(out)
	if m == nil {
		t.Fatalf("helper output has no SERVER line:\n%s", out)
	}
	pid, _ := strconv.Atoi(string(m[1]))
	root := filepath.Dir(string(m[2]))
	t.Cleanup(func() { os.RemoveAll(root) })
	deadline := time.Now().Add(15 * time.Second)
	for !processGone(pid) {
		if time.Now().After(deadline) {
			if p, err := os.FindProcess(pid); err == nil {
				_ = p.Kill()
			}
			t.Fatalf("server pid %d still running 15s after its test process panicked", pid)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// processGone reports whether pid has exited (a zombie counts as gone: in a
// container nobody may reap it).
func processGone(pid int) bool {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return true
	}
	s := string(data)
	i := strings.LastIndexByte(s, ')')
	return i < 0 || i+2 >= len(s) || s[i+2] == 'Z' || s[i+2] == 'X'
}

// The server reports the version of k8s.io/kubernetes that tools/localapi
// requires, as a release build of it would (kubectl version reads it), not
// go build's "v0.0.0-master+$Format:%H$".
func TestServerReportsTheModulesVersion(t *testing.T) {
	srv := testenv.Shared(t)
	gomod, err := os.ReadFile(filepath.Join("..", "..", "tools", "localapi", "go.mod"))
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^\s*k8s\.io/kubernetes (v(\d+)\.(\d+)\.\d+\S*)$`).FindSubmatch(gomod)
	if m == nil {
		t.Fatal("tools/localapi/go.mod requires no k8s.io/kubernetes version")
	}
	version, major, minor := string(m[1]), string(m[2]), string(m[3])
	info, err := clientFor(t, srv).Discovery().ServerVersion()
	if err != nil {
		t.Fatal(err)
	}
	if info.GitVersion != version || info.Major != major || info.Minor != minor {
		t.Errorf("GET /version: gitVersion %q, major %q, minor %q; want %q, %q, %q (tools/localapi/go.mod)",
			info.GitVersion, info.Major, info.Minor, version, major, minor)
	}
	if info.GitTreeState != "clean" {
		t.Errorf("GET /version: gitTreeState %q, want clean", info.GitTreeState)
	}
}
