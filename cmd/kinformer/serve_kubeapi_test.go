package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
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

// kubeDo makes a request of serve's --kube-api and returns the status and
// the body.
func kubeDo(t *testing.T, method, u string, header map[string]string) (int, []byte) {
	t.Helper()
	req, err := http.NewRequest(method, u, nil)
	if err != nil {
		t.Fatal(err)
	}
	for k, v := range header {
		req.Header.Set(k, v)
	}
	resp, err := httpClient.Do(req)
	if err != nil {
		t.Fatalf("%s %s: %v", method, u, err)
	}
	defer resp.Body.Close()
	var b []byte
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 16<<20)
	for sc.Scan() {
		b = append(append(b, sc.Bytes()...), '\n')
	}
	return resp.StatusCode, b
}

// kubeStatusOf decodes a Status body, failing unless it is one with code.
func kubeStatusOf(t *testing.T, what string, code int, body []byte, wantCode int, wantReason metav1.StatusReason) metav1.Status {
	t.Helper()
	var st metav1.Status
	if err := json.Unmarshal(body, &st); err != nil || st.Kind != "Status" || code != wantCode || int(st.Code) != wantCode || st.Reason != wantReason {
		t.Errorf("%s: %d %s; want a Status %d %s", what, code, body, wantCode, wantReason)
	}
	return st
}

// The requests a client makes, one by one: discovery, get, list with
// selectors and pages, the resourceVersion rules, watches from a version,
// with a selector and as a watch-list; and what is refused, with the API
// server's Status.
func TestServeKubeAPIRequests(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for i := range 7 {
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%d", i), Labels: map[string]string{"tier": []string{"web", "db"}[i%2]}}}
		if _, err := real.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	_, base := startServe(t, "configmaps", "-n", ns, "--kube-api", "--kube-api-history", "1", kubeconfigArg(srv))
	waitReady(t, base)
	api := base + "api/v1/namespaces/" + ns + "/configmaps"

	// Discovery: what is served, with get, list and watch.
	code, body := kubeDo(t, "GET", base+"api/v1", nil)
	var rl metav1.APIResourceList
	if err := json.Unmarshal(body, &rl); err != nil || code != 200 || len(rl.APIResources) != 1 || rl.APIResources[0].Name != "configmaps" ||
		!rl.APIResources[0].Namespaced || rl.APIResources[0].Kind != "ConfigMap" || !slices.Equal(rl.APIResources[0].Verbs, metav1.Verbs{"get", "list", "watch"}) {
		t.Errorf("/api/v1: %d %s", code, body)
	}
	if code, body := kubeDo(t, "GET", base+"apis/apps/v1", nil); code != 404 {
		t.Errorf("/apis/apps/v1, not served: %d %s", code, body)
	}
	code, body = kubeDo(t, "GET", base+"api/v1/namespaces/"+ns+"/pods", nil)
	kubeStatusOf(t, "pods, not served", code, body, 404, metav1.StatusReasonNotFound)

	// Get.
	code, body = kubeDo(t, "GET", api+"/cm-3", nil)
	var cm corev1.ConfigMap
	if err := json.Unmarshal(body, &cm); err != nil || code != 200 || cm.Name != "cm-3" || cm.Labels["tier"] != "db" {
		t.Errorf("get cm-3: %d %s", code, body)
	}
	code, body = kubeDo(t, "GET", api+"/nope", nil)
	kubeStatusOf(t, "get a missing object", code, body, 404, metav1.StatusReasonNotFound)

	// Lists: selectors, and pages that cover the list once.
	list := func(query string) (corev1.ConfigMapList, []string) {
		t.Helper()
		code, body := kubeDo(t, "GET", api+"?"+query, nil)
		var l corev1.ConfigMapList
		if err := json.Unmarshal(body, &l); err != nil || code != 200 || l.ResourceVersion == "" {
			t.Fatalf("list ?%s: %d %s", query, code, body)
		}
		var got []string
		for _, o := range l.Items {
			got = append(got, o.Name)
		}
		return l, got
	}
	if _, got := list("labelSelector=" + url.QueryEscape("tier=db")); !slices.Equal(got, []string{"cm-1", "cm-3", "cm-5"}) {
		t.Errorf("tier=db: %v", got)
	}
	if _, got := list("fieldSelector=" + url.QueryEscape("metadata.name=cm-4")); !slices.Equal(got, []string{"cm-4"}) {
		t.Errorf("metadata.name=cm-4: %v", got)
	}
	_, all := list("")
	var paged []string
	l, got := list("limit=3")
	first := l.ResourceVersion
	// A change between pages: the next pages are still served (kubectl
	// fails on a 410 there), at the first page's version.
	if _, err := real.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm-6", Namespace: ns, Labels: map[string]string{"tier": "web"}}, Data: map[string]string{"x": "y"}}, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "serve has the change", 10*time.Second, func() bool {
		code, body := kubeDo(t, "GET", api+"/cm-6", nil)
		return code == 200 && strings.Contains(string(body), `"x":"y"`)
	})
	for paged = got; l.Continue != ""; {
		l, got = list("limit=3&continue=" + url.QueryEscape(l.Continue))
		paged = append(paged, got...)
		if l.ResourceVersion != first {
			t.Errorf("a later page at %s, the first at %s", l.ResourceVersion, first)
		}
	}
	if !sort.StringsAreSorted(paged) || !slices.Equal(paged, all) || len(all) < 7 {
		t.Errorf("pages of 3: %v; the whole list: %v", paged, all)
	}
	for _, bad := range []string{"labelSelector=" + url.QueryEscape("a=b=c"), "limit=-1", "continue=garbage", "resourceVersion=x", "resourceVersionMatch=Sometimes&resourceVersion=1"} {
		code, body := kubeDo(t, "GET", api+"?"+bad, nil)
		kubeStatusOf(t, bad, code, body, 400, metav1.StatusReasonBadRequest)
	}
	code, body = kubeDo(t, "GET", api+"?resourceVersionMatch=Exact&resourceVersion=1", nil)
	kubeStatusOf(t, "an Exact version older than the cache", code, body, 410, metav1.StatusReasonExpired)
	code, body = kubeDo(t, "POST", api, nil)
	kubeStatusOf(t, "a create", code, body, 405, metav1.StatusReasonMethodNotAllowed)
	code, body = kubeDo(t, "DELETE", api+"/cm-1", nil)
	kubeStatusOf(t, "a delete", code, body, 405, metav1.StatusReasonMethodNotAllowed)
	code, body = kubeDo(t, "GET", api, map[string]string{"Accept": "application/json;as=Table;v=v1;g=meta.k8s.io"})
	kubeStatusOf(t, "a Table", code, body, 406, metav1.StatusReasonNotAcceptable)
	code, body = kubeDo(t, "GET", api+"/cm-3", map[string]string{"Accept": "application/vnd.kubernetes.protobuf"})
	if code != 200 || !bytes.HasPrefix(body, []byte("k8s\x00")) {
		t.Errorf("protobuf: %d %q", code, body[:min(len(body), 40)])
	}

	// Watches, through the dynamic client (its decoding checks the stream).
	dyn := dynamic.NewForConfigOrDie(&rest.Config{Host: strings.TrimSuffix(base, "/")}).Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace(ns)
	now, _ := list("")
	rv := now.ResourceVersion
	w, err := dyn.Watch(ctx, metav1.ListOptions{ResourceVersion: rv, LabelSelector: "tier=web"})
	if err != nil {
		t.Fatal(err)
	}
	defer w.Stop()
	wl, err := dyn.Watch(ctx, metav1.ListOptions{SendInitialEvents: ptrTo(true), ResourceVersionMatch: metav1.ResourceVersionMatchNotOlderThan, AllowWatchBookmarks: true})
	if err != nil {
		t.Fatal(err)
	}
	defer wl.Stop()
	// cm-0 leaves tier=web (DELETED for w), cm-1 comes to it (ADDED).
	for name, tier := range map[string]string{"cm-0": "db", "cm-1": "web"} {
		if _, err := real.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: ns, Labels: map[string]string{"tier": tier}}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	seen := map[string]string{}
	for len(seen) < 2 {
		select {
		case e, ok := <-w.ResultChan():
			if !ok {
				t.Fatalf("the watch ended; seen %v", seen)
			}
			if e.Type == "BOOKMARK" {
				continue
			}
			seen[e.Object.(*unstructured.Unstructured).GetName()] = string(e.Type)
		case <-time.After(30 * time.Second):
			t.Fatalf("watch with tier=web: seen %v after 30s", seen)
		}
	}
	if seen["cm-0"] != "DELETED" || seen["cm-1"] != "ADDED" {
		t.Errorf("watch with tier=web: %v; want cm-0 DELETED (it left), cm-1 ADDED (it came)", seen)
	}
	// The watch-list: every object ADDED, the bookmark that ends them,
	// then the two updates.
	var initial []string
	ended, updates := false, 0
	for updates < 2 {
		select {
		case e := <-wl.ResultChan():
			o := e.Object.(*unstructured.Unstructured)
			switch {
			case e.Type == "BOOKMARK" && o.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true":
				ended = true
			case e.Type == "ADDED" && !ended:
				initial = append(initial, o.GetName())
			case e.Type == "MODIFIED" && ended:
				updates++
			case e.Type != "BOOKMARK":
				t.Fatalf("watch-list: %s %s (ended %v)", e.Type, o.GetName(), ended)
			}
		case <-time.After(30 * time.Second):
			t.Fatalf("watch-list: %v initial, ended %v, %d updates after 30s", initial, ended, updates)
		}
	}
	if slices.Sort(initial); !slices.Equal(initial, all) {
		t.Errorf("watch-list's initial events: %v, want %v", initial, all)
	}

	// Every event on a line of its own (clients read the stream line by
	// line): a watch from 0 sends every object, then ends at its timeout.
	code, body = kubeDo(t, "GET", api+"?watch=1&resourceVersion=0&timeoutSeconds=1", nil)
	events := strings.Split(strings.TrimSuffix(string(body), "\n"), "\n")
	for _, l := range events {
		var e struct {
			Type   string         `json:"type"`
			Object map[string]any `json:"object"`
		}
		if err := json.Unmarshal([]byte(l), &e); err != nil || e.Type != "ADDED" || e.Object["metadata"] == nil {
			t.Errorf("watch from 0: line %q: %v", l, err)
		}
	}
	if code != 200 || len(events) != len(all) {
		t.Errorf("watch from 0: %d, %d lines for %d objects", code, len(events), len(all))
	}

	// A watch from a version older than the history: 410 in the stream.
	code, body = kubeDo(t, "GET", api+"?watch=true&resourceVersion=1", nil)
	var ev struct {
		Type   string        `json:"type"`
		Object metav1.Status `json:"object"`
	}
	if err := json.Unmarshal(body, &ev); err != nil || code != 200 || ev.Type != "ERROR" || ev.Object.Code != 410 || ev.Object.Reason != metav1.StatusReasonExpired {
		t.Errorf("watch from rv 1: %d %s", code, body)
	}
}

func ptrTo[T any](v T) *T { return &v }

// The ring keeps the newest events within its bytes: a watch from a
// version it dropped is refused; a re-list's differences break its
// history (watchers end, older versions are refused); bookmarks advance
// what it has seen.
func TestKubeRing(t *testing.T) {
	cm := func(name, rv string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
		o.SetName(name)
		o.SetNamespace("ns")
		o.SetResourceVersion(rv)
		return o
	}
	ev := func(typ kinformer.EventType, rv string, cause kinformer.Cause) kinformer.Event[*unstructured.Unstructured] {
		return kinformer.Event[*unstructured.Unstructured]{Type: typ, ResourceVersion: rv, Cause: cause, Object: cm("o"+rv, rv)}
	}
	k := newKubeRing(3 * kubeEventSize(110, false))          // three events of about 100 bytes of JSON
	k.record(ev(kinformer.Added, "5", kinformer.CauseWatch)) // before start: not history
	if _, ok, _ := k.from(4); ok {
		t.Fatal("a ring not started covers a version")
	}
	k.start("10")
	for _, rv := range []string{"11", "12", "13", "14", "15"} {
		k.record(ev(kinformer.Added, rv, kinformer.CauseWatch))
	}
	if _, ok, oldest := k.from(10); ok || oldest < 11 {
		t.Errorf("from 10 after events past the bound: ok %v, oldest %d", ok, oldest)
	}
	c, ok, _ := k.from(13)
	if !ok {
		t.Fatal("from 13: not covered")
	}
	evs, _, last, behind := k.read(&c, nil, 10)
	if behind || len(evs) != 2 || evs[0].rv != 14 || evs[1].rv != 15 || last != 15 {
		t.Errorf("from 13: %d events, last %d, behind %v", len(evs), last, behind)
	}
	k.record(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Bookmark, ResourceVersion: "20"})
	if _, _, last, _ := k.read(&c, nil, 10); last != 20 {
		t.Errorf("after a bookmark at 20: last %d", last)
	}
	k.record(ev(kinformer.Deleted, "30", kinformer.CauseRelist))
	if _, _, _, behind := k.read(&c, nil, 10); !behind {
		t.Error("a watcher is not ended by a re-list")
	}
	if _, ok, _ := k.from(15); ok {
		t.Error("a version before a re-list is still covered")
	}
	c, ok, _ = k.from(30)
	k.record(ev(kinformer.Modified, "31", kinformer.CauseWatch))
	if evs, _, _, behind := k.read(&c, nil, 10); !ok || behind || len(evs) != 1 || evs[0].rv != 31 {
		t.Errorf("from 30 after the re-list: %v %v %d", ok, behind, len(evs))
	}
	// Another history (an etcd restored from a backup): versions go back,
	// and the ring starts over from the lower one.
	k.record(ev(kinformer.Added, "7", kinformer.CauseRelist))
	k.record(ev(kinformer.Modified, "8", kinformer.CauseWatch))
	c, ok, _ = k.from(7)
	if evs, _, last, _ := k.read(&c, nil, 10); !ok || len(evs) != 1 || evs[0].rv != 8 || last != 8 {
		t.Errorf("from 7 after a re-list back to 7: ok %v, %d events, last %d", ok, len(evs), last)
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
		for _, line := range strings.Split(body, "\n") {
			if !strings.HasPrefix(line, "kinformer_requests_total{") || !strings.Contains(line, `resource="configmaps"`) {
				continue
			}
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			switch {
			case strings.Contains(line, `verb="watch"`):
				watches += v
			default:
				lists += v
			}
		}
		return lists, watches
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

// Hostile requests are bounded and answered with a Status naming the
// problem: a selector past 4 KiB, more watches than --max-sse-clients (a
// watch that never reads keeps its slot, not the others' events), an
// unknown sendInitialEvents, a watch-list without its required
// parameters; and a cluster-wide list of a namespace's cache is refused,
// never answered with the part it holds.
func TestServeKubeAPIBounds(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, real, ns, "a", nil)
	_, base := startServe(t, "configmaps", "-n", ns, "--kube-api", "--max-sse-clients", "1", kubeconfigArg(srv))
	waitReady(t, base)
	api := base + "api/v1/namespaces/" + ns + "/configmaps"

	huge := url.QueryEscape("k in (" + strings.Repeat("v,", 3000) + "v)")
	for _, q := range []string{"labelSelector=" + huge, "watch=1&labelSelector=" + huge, "watch=1&resourceVersionMatch=NotOlderThan"} {
		code, body := kubeDo(t, "GET", api+"?"+q, nil)
		kubeStatusOf(t, q[:min(len(q), 60)], code, body, 400, metav1.StatusReasonBadRequest)
	}
	for _, q := range []string{"watch=1&sendInitialEvents=true", "watch=True&sendInitialEvents=maybe"} {
		// Booleans as the API server reads them: anything but 0 and false is true.
		code, body := kubeDo(t, "GET", api+"?"+q, nil)
		kubeStatusOf(t, q+": a watch-list without resourceVersionMatch and bookmarks", code, body, 422, metav1.StatusReasonInvalid)
	}
	code, body := kubeDo(t, "GET", base+"api/v1/configmaps", nil)
	kubeStatusOf(t, "every namespace, from a cache of one", code, body, 403, metav1.StatusReasonForbidden)

	// One watch, never read, holds the only slot.
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, "GET", api+"?watch=1", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	code, body = kubeDo(t, "GET", api+"?watch=1", nil)
	kubeStatusOf(t, "a watch past --max-sse-clients", code, body, 429, metav1.StatusReasonTooManyRequests)
	cancel()
	waitFor(t, "the slot freed", 10*time.Second, func() bool {
		req, _ := http.NewRequest("GET", api+"?watch=1&timeoutSeconds=1", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			return false
		}
		defer resp.Body.Close()
		return resp.StatusCode == 200
	})
}

// unsyncedSource is a resource whose cache has no version yet.
type unsyncedSource struct{ watchSource }

func (unsyncedSource) resourceVersion() string { return "" }
func (unsyncedSource) addHandler(func(kinformer.Event[*unstructured.Unstructured])) func() int {
	return func() int { return 0 }
}
func (unsyncedSource) shardStatus() kinformer.ShardStatus { return kinformer.ShardStatus{} }

// Before its cache has a version, a resource is answered 429 with
// Retry-After, as the API server's watch cache answers while it
// initializes: a half-filled cache never passes for the whole. Discovery
// is answered, and lists only the groups served.
func TestServeKubeAPINotSyncedYet(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 16, 16)
	s.kubeHistory = 1 << 20
	s.addSource("configmaps", resource{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), kind: "ConfigMap", namespaced: true}, "", unsyncedSource{})
	h := s.handler()
	for _, path := range []string{"/api/v1/namespaces/x/configmaps", "/api/v1/namespaces/x/configmaps?watch=1", "/api/v1/namespaces/x/configmaps/a"} {
		rec := httptest.NewRecorder()
		h.ServeHTTP(rec, httptest.NewRequest("GET", path, nil))
		kubeStatusOf(t, path, rec.Code, rec.Body.Bytes(), 429, metav1.StatusReasonTooManyRequests)
		if rec.Header().Get("Retry-After") == "" {
			t.Errorf("%s: no Retry-After", path)
		}
	}
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/api", nil))
	var v metav1.APIVersions
	if err := json.Unmarshal(rec.Body.Bytes(), &v); err != nil || rec.Code != 200 || !slices.Equal(v.Versions, []string{"v1"}) {
		t.Errorf("/api: %d %s", rec.Code, rec.Body)
	}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/apis", nil))
	var g metav1.APIGroupList
	if err := json.Unmarshal(rec.Body.Bytes(), &g); err != nil || rec.Code != 200 || len(g.Groups) != 0 {
		t.Errorf("/apis: %d %s", rec.Code, rec.Body)
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
	var n float64
	for _, line := range strings.Split(string(b), "\n") {
		if strings.HasPrefix(line, "apiserver_longrunning_requests{") && strings.Contains(line, `resource="`+resource+`"`) && strings.Contains(line, `verb="WATCH"`) {
			var v float64
			fmt.Sscan(line[strings.LastIndexByte(line, ' ')+1:], &v)
			n += v
		}
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
