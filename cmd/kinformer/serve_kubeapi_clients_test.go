package main

import (
	"context"
	"fmt"
	"maps"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/internal/testenv"
)

// kubeClient is a clientset whose server is serve's --kube-api at base.
func kubeClient(t *testing.T, base string) *kubernetes.Clientset {
	t.Helper()
	return kubernetes.NewForConfigOrDie(&rest.Config{Host: strings.TrimSuffix(base, "/"), QPS: 100, Burst: 100})
}

// cmState is what a store of ConfigMaps holds: name -> resourceVersion.
func cmState(objs []any) map[string]string {
	out := map[string]string{}
	for _, o := range objs {
		cm := o.(*corev1.ConfigMap)
		out[cm.Name] = cm.ResourceVersion
	}
	return out
}

// freePort returns a loopback address free now.
func freePort(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// client-go's own SharedIndexInformer, its clientset's host set to serve
// --kube-api, syncs, follows creates, updates and deletes, and comes back
// after serve restarts (its watch from a version the new serve has no
// history of gets 410 Gone: it lists again), holding what one pointed at
// the API server holds.
func TestServeKubeAPIClientGoInformer(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for _, n := range []string{"a", "b", "c"} {
		newConfigMap(t, real, ns, n, map[string]string{"k": n})
	}
	addr := freePort(t)
	p, base := startServe(t, "configmaps", "-n", ns, "--kube-api", "--listen", addr, kubeconfigArg(srv))
	waitReady(t, base)

	stop := make(chan struct{})
	defer close(stop)
	newInformer := func(c kubernetes.Interface) toolscache.SharedIndexInformer {
		f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
		inf := f.Core().V1().ConfigMaps().Informer()
		f.Start(stop)
		if !toolscache.WaitForCacheSync(stop, inf.HasSynced) {
			t.Fatal("not synced")
		}
		return inf
	}
	// A second client asks for protobuf only, as Kubernetes' own
	// components do: serve answers it in protobuf (the transport checks).
	var mu sync.Mutex
	types := map[string]int{}
	protoCfg := &rest.Config{Host: strings.TrimSuffix(base, "/"), QPS: 100, Burst: 100,
		ContentConfig: rest.ContentConfig{ContentType: "application/vnd.kubernetes.protobuf", AcceptContentTypes: "application/vnd.kubernetes.protobuf"}}
	protoCfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				mu.Lock()
				types[resp.Header.Get("Content-Type")]++
				mu.Unlock()
			}
			return resp, err
		})
	})
	viaServe, viaServeProto, direct := newInformer(kubeClient(t, base)), newInformer(kubernetes.NewForConfigOrDie(protoCfg)), newInformer(real)
	// same waits until the informers through serve hold what the direct
	// one holds, once that has the names want (and only them).
	same := func(what string, want ...string) {
		t.Helper()
		waitFor(t, what, 30*time.Second, func() bool {
			a, p, b := cmState(viaServe.GetStore().List()), cmState(viaServeProto.GetStore().List()), cmState(direct.GetStore().List())
			names := slices.Sorted(maps.Keys(b))
			return slices.Equal(names, want) && fmt.Sprint(a) == fmt.Sprint(b) && fmt.Sprint(p) == fmt.Sprint(b)
		})
	}
	same("synced through serve as directly", "a", "b", "c")

	if _, err := real.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Data: map[string]string{"k": "changed"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := real.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newConfigMap(t, real, ns, "d", nil)
	waitFor(t, "the direct informer has the update", 30*time.Second, func() bool {
		o, ok, _ := direct.GetStore().GetByKey(ns + "/a")
		return ok && o.(*corev1.ConfigMap).Data["k"] == "changed"
	})
	same("an update, a delete and a create followed", "a", "c", "d")

	// serve restarts on the same address, with no history: the informer's
	// watch from where it was gets 410, and it lists again.
	if code := p.interrupt(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, p.stderr)
	}
	if err := real.CoreV1().ConfigMaps(ns).Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newConfigMap(t, real, ns, "e", nil)
	_, base2 := startServe(t, "configmaps", "-n", ns, "--kube-api", "--listen", addr, kubeconfigArg(srv))
	if base2 != base {
		t.Fatalf("serve came back on %s, not %s", base2, base)
	}
	same("what changed while serve was down, after its restart", "a", "d", "e")
	mu.Lock()
	defer mu.Unlock()
	for ct := range types {
		if !strings.HasPrefix(ct, "application/vnd.kubernetes.protobuf") {
			t.Errorf("the protobuf client was answered %q (all: %v)", ct, types)
		}
	}
	if len(types) == 0 {
		t.Error("the protobuf client's answers were not seen")
	}
}

// Many clients watching through serve cost the API server serve's one
// watch-list and watch, not one each: twelve client-go informers sync
// through one serve and follow the same changes, while serve's own
// requests to the API server stay one list and its watches.
func TestServeKubeAPIManyClientsOneWatch(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for i := range 20 {
		newConfigMap(t, real, ns, fmt.Sprintf("cm-%d", i), nil)
	}
	_, base := startServe(t, "configmaps", "-n", ns, "--kube-api", kubeconfigArg(srv))
	waitReady(t, base)
	requests := func() (lists, watches float64) {
		t.Helper()
		_, body := get(t, base+"metrics")
		all := metricSum(body, "kinformer_requests_total", `resource="configmaps"`)
		watches = metricSum(body, "kinformer_requests_total", `resource="configmaps"`, `verb="watch"`)
		return all - watches, watches
	}
	lists0, watches0 := requests()

	stop := make(chan struct{})
	defer close(stop)
	const clients = 12
	var infs []toolscache.SharedIndexInformer
	for range clients {
		f := informers.NewSharedInformerFactoryWithOptions(kubeClient(t, base), 0, informers.WithNamespace(ns))
		infs = append(infs, f.Core().V1().ConfigMaps().Informer())
		f.Start(stop)
	}
	for i, inf := range infs {
		if !toolscache.WaitForCacheSync(stop, inf.HasSynced) {
			t.Fatalf("client %d not synced", i)
		}
	}
	for i := range 3 {
		newConfigMap(t, real, ns, fmt.Sprintf("new-%d", i), nil)
	}
	if err := real.CoreV1().ConfigMaps(ns).Delete(ctx, "cm-0", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	want, err := real.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for i, inf := range infs {
		waitFor(t, fmt.Sprintf("client %d has the changes", i), 30*time.Second, func() bool {
			return len(inf.GetStore().ListKeys()) == len(want.Items)
		})
	}
	lists, watches := requests()
	if lists != lists0 || watches > watches0+1 {
		t.Errorf("serve's requests to the API server for %d clients: %v lists and %v watches, before them %v and %v", clients, lists, watches, lists0, watches0)
	}
	if lists0 < 1 {
		t.Errorf("serve's requests are not counted (%v lists): the check above proves nothing", lists0)
	}
}

// --token-file guards the Kubernetes API as it guards the rest: a client
// with the token (client-go sends its kubeconfig's bearer token) reads,
// one without gets 401. With --state-dir, a restarted serve answers at
// once from its restored caches, and a client's watch from before the
// restart gets 410 and lists again.
func TestServeKubeAPITokenAndRestart(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		newConfigMap(t, real, ns, n, nil)
	}
	tokenFile := filepath.Join(t.TempDir(), "token")
	if err := os.WriteFile(tokenFile, []byte(testToken+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	stateDir, addr := t.TempDir(), freePort(t)
	args := []string{"configmaps", "-n", ns, "--kube-api", "--token-file", tokenFile, "--state-dir", stateDir, "--listen", addr, kubeconfigArg(srv)}
	p, base := startServe(t, args...)
	host := strings.TrimSuffix(base, "/")
	withToken := kubernetes.NewForConfigOrDie(&rest.Config{Host: host, BearerToken: testToken})
	without := kubernetes.NewForConfigOrDie(&rest.Config{Host: host})
	names := func(c kubernetes.Interface) ([]string, error) {
		l, err := c.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err != nil {
			return nil, err
		}
		var out []string
		for _, o := range l.Items {
			out = append(out, o.Name)
		}
		return out, nil
	}
	var got []string
	waitFor(t, "a list with the token", 30*time.Second, func() bool {
		var err error
		got, err = names(withToken)
		return err == nil
	})
	if !slices.Equal(got, []string{"a", "b"}) {
		t.Errorf("with the token: %v", got)
	}
	if _, err := names(without); !apierrors.IsUnauthorized(err) {
		t.Errorf("without the token: %v, want 401 Unauthorized", err)
	}

	if code := p.interrupt(); code != 0 {
		t.Fatalf("serve exited %d: %s", code, p.stderr)
	}
	newConfigMap(t, real, ns, "c", nil)
	_, base2 := startServe(t, args...)
	if base2 != base {
		t.Fatalf("serve came back on %s, not %s", base2, base)
	}
	// At once: the restored caches (a, b), then the change while it was
	// down (c) once caught up.
	waitFor(t, "serve answers after its restart", 10*time.Second, func() bool {
		got, _ = names(withToken)
		return len(got) >= 2
	})
	waitFor(t, "serve has caught up", 30*time.Second, func() bool {
		got, _ = names(withToken)
		return slices.Equal(got, []string{"a", "b", "c"})
	})
}

// apiserverWatches is how many watches of resource the API server is
// serving now (apiserver_longrunning_requests).
func apiserverWatches(t *testing.T, c kubernetes.Interface, resource string) float64 {
	t.Helper()
	b, err := c.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	return metricSum(string(b), "apiserver_longrunning_requests", `resource="`+resource+`"`, `verb="WATCH"`)
}

// metricSum adds up the samples of metric in a Prometheus text
// exposition whose labels hold every one of labels (name="value").
func metricSum(text, metric string, labels ...string) float64 {
	var n float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric+"{") || slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			continue
		}
		var v float64
		fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
		n += v
	}
	return n
}

// Counted at the API server: twelve clients watching LimitRanges (a
// resource no other test watches; the API server's LimitRanger admission
// does, before and after) through serve cost it serve's one watch; three
// watching it directly cost it three more.
func TestServeKubeAPIOneWatchAtTheAPIServer(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for i := range 3 {
		if _, err := real.CoreV1().LimitRanges(ns).Create(ctx, &corev1.LimitRange{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("lr-%d", i)}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// The API server's own: its LimitRanger admission watches them.
	before := apiserverWatches(t, real, "limitranges")
	_, base := startServe(t, "limitranges", "-n", ns, "--kube-api", kubeconfigArg(srv))
	waitReady(t, base)
	stop := make(chan struct{})
	defer close(stop)
	start := func(c kubernetes.Interface, n int) {
		t.Helper()
		var infs []toolscache.SharedIndexInformer
		for range n {
			f := informers.NewSharedInformerFactoryWithOptions(c, 0, informers.WithNamespace(ns))
			infs = append(infs, f.Core().V1().LimitRanges().Informer())
			f.Start(stop)
		}
		for _, inf := range infs {
			if !toolscache.WaitForCacheSync(stop, inf.HasSynced) {
				t.Fatal("not synced")
			}
			if n := len(inf.GetStore().ListKeys()); n != 3 {
				t.Fatalf("%d LimitRanges, want 3", n)
			}
		}
	}
	start(kubeClient(t, base), 12)
	var through float64
	waitFor(t, "serve's watch at the API server", 10*time.Second, func() bool {
		through = apiserverWatches(t, real, "limitranges")
		return through >= before+1
	})
	if through != before+1 {
		t.Errorf("12 clients through serve: %v watches of limitranges at the API server, %v before serve; want serve's 1 more", through, before)
	}
	start(real, 3)
	waitFor(t, "the direct watches at the API server", 10*time.Second, func() bool {
		return apiserverWatches(t, real, "limitranges") == through+3
	})
}
