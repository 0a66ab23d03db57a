package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"net/url"
	"runtime"
	"slices"
	"sort"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/kinformertest"
)

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

// A protobuf watch whose event's object does not convert to its Go type
// ends with an ERROR event naming it, not a change left out silently;
// one that converts is encoded once however many watchers send it; one
// with a field its Go type lacks is not sent to a client that takes
// JSON (an ERROR 410 Expired: it lists again), and sent without it to one
// that does not.
func TestProtoWatchEncoderEvent(t *testing.T) {
	gvk := corev1.SchemeGroupVersion.WithKind("ConfigMap")
	good := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "a"}, "data": map[string]any{"k": "v"}}}
	bad := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "b"}, "data": int64(5)}}
	newer := &unstructured.Unstructured{Object: map[string]any{"apiVersion": "v1", "kind": "ConfigMap", "metadata": map[string]any{"name": "c"}, "data": map[string]any{"k": "v"}, "futureField": "x"}}
	var out bytes.Buffer
	pe := new(protoEncoded)
	for range 2 {
		if err := newProtoWatchEncoder(&out, gvk, true, nil).event("ADDED", good, pe); err != nil {
			t.Fatal(err)
		}
	}
	first, _, _ := pe.of(good, nil)
	if n := bytes.Count(out.Bytes(), first); n != 2 || !bytes.HasPrefix(first, []byte("k8s\x00")) {
		t.Errorf("the object's protobuf in the stream %d times, want 2 (%q)", n, first[:min(len(first), 8)])
	}
	out.Reset()
	err := newProtoWatchEncoder(&out, gvk, true, nil).event("MODIFIED", bad, nil)
	if err == nil || !bytes.Contains(out.Bytes(), []byte("InternalError")) || !bytes.Contains(out.Bytes(), []byte("ConfigMap /b")) {
		t.Errorf("an object that does not convert: %v; the stream %q", err, out.Bytes())
	}
	out.Reset()
	pw := newProtoWatchEncoder(&out, gvk, true, nil)
	if err := pw.event("MODIFIED", newer, nil); !isLossy(err) || !pw.lossy || !bytes.Contains(out.Bytes(), []byte("Expired")) || bytes.Contains(out.Bytes(), []byte("MODIFIED")) {
		t.Errorf("an object with a field its type lacks, to a client that takes JSON: %v; the stream %q; want an ERROR 410 Expired instead", err, out.Bytes())
	}
	out.Reset()
	pw = newProtoWatchEncoder(&out, gvk, false, nil)
	if err := pw.event("MODIFIED", newer, nil); err != nil || !pw.lossy || !bytes.Contains(out.Bytes(), []byte("MODIFIED")) || bytes.Contains(out.Bytes(), []byte("futureField")) {
		t.Errorf("an object with a field its type lacks, to a client of protobuf only: %v; the stream %q; want it without the field", err, out.Bytes())
	}
}

// Objects with fields serve's Go types lack (a cluster newer than serve's
// build) are never cut down silently: a client that takes JSON as well as
// protobuf gets JSON, with them (a watch in protobuf ends with an ERROR
// 410 Expired before such an event: its client lists again, in JSON); one
// that takes protobuf only gets it without them, and a Warning (get, list).
// In-memory: the real API server of the tests is of the same version as
// serve's types.
func TestServeKubeAPIProtobufFallsBackToJSON(t *testing.T) {
	t.Parallel()
	cm := func(name string, future bool) *unstructured.Unstructured {
		o := configMap(name, "v")
		if future {
			o.Object["futureField"] = map[string]any{"set": true}
		}
		return o
	}
	newServer := func(objs ...*unstructured.Unstructured) (*server, string) {
		if objs == nil {
			objs = []*unstructured.Unstructured{cm("a", false), cm("b", true)}
		}
		s := mustNewServer(t, 8, 16)
		s.kubeHistory = 1 << 20
		res := resource{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), kind: "ConfigMap", namespaced: true}
		inf := kinformer.New[*unstructured.Unstructured](kinformertest.NewServer(objs...), &kinformer.Options[*unstructured.Unstructured]{Name: res.String(), Metrics: s.metrics})
		s.add("configmaps", res, "", inf)
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		go func() { _ = inf.Run(ctx) }()
		if err := inf.WaitForSync(ctx); err != nil {
			t.Fatal(err)
		}
		hs := httptest.NewServer(s.handler())
		t.Cleanup(hs.Close)
		t.Cleanup(s.close)
		return s, hs.URL + "/api/v1/namespaces/ns/configmaps"
	}
	const both = contentTypeProtobuf + ", application/json"
	request := func(u, accept string) (*http.Response, []byte) {
		t.Helper()
		req, _ := http.NewRequest("GET", u, nil)
		req.Header.Set("Accept", accept)
		resp, err := httpClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var buf bytes.Buffer
		if _, err := buf.ReadFrom(resp.Body); err != nil {
			t.Fatalf("GET %s: %v", u, err)
		}
		return resp, buf.Bytes()
	}

	// A watch first, by client-go in protobuf: a may come, then b ends it
	// with an ERROR 410 Expired (its client lists again); the next is in
	// JSON, and has b whole.
	s, api := newServer()
	cs := kubernetes.NewForConfigOrDie(&rest.Config{Host: strings.TrimSuffix(api, "/api/v1/namespaces/ns/configmaps"),
		ContentConfig: rest.ContentConfig{ContentType: contentTypeProtobuf, AcceptContentTypes: both}})
	timeout := int64(10)
	w, err := cs.CoreV1().ConfigMaps("ns").Watch(context.Background(), metav1.ListOptions{TimeoutSeconds: &timeout})
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var st *metav1.Status
	for ev := range w.ResultChan() {
		switch o := ev.Object.(type) {
		case *metav1.Status:
			st = o
		case *corev1.ConfigMap:
			got = append(got, o.Name)
		}
	}
	if st == nil || st.Code != 410 || st.Reason != metav1.StatusReasonExpired || !strings.Contains(st.Message, "ConfigMap ns/b has fields") ||
		slices.Contains(got, "b") || !s.resources[0].protoLossy.Load() {
		t.Errorf("the first watch, in protobuf: %q then %+v; want an ERROR 410 Expired at b", got, st)
	}
	var resp *http.Response
	var body []byte
	resp, body = request(api+"?watch=1&timeoutSeconds=1", both)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || !bytes.Contains(body, []byte(`"futureField":{"set":true}`)) {
		t.Errorf("the watch after: %s, %q; want JSON with futureField", ct, body)
	}
	resp, body = request(api+"/a", both)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || !bytes.Contains(body, []byte(`"name":"a"`)) {
		t.Errorf("get a, after: %s %q; want JSON (the resource is)", ct, body)
	}

	// A list first, then a get.
	_, api = newServer()
	resp, body = request(api, both)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || !bytes.Contains(body, []byte(`"futureField":{"set":true}`)) || !bytes.Contains(body, []byte(`"name":"a"`)) {
		t.Errorf("list: %s, %q; want JSON with futureField", ct, body)
	}
	_, api = newServer()
	resp, body = request(api+"/b", both)
	if ct := resp.Header.Get("Content-Type"); ct != "application/json" || !bytes.Contains(body, []byte(`"futureField":{"set":true}`)) {
		t.Errorf("get b: %s, %q; want JSON with futureField", ct, body)
	}

	// An object that does not convert at all ends a protobuf watch with an
	// ERROR event that reaches the client (flushed), naming it.
	bad := configMap("c", "")
	bad.Object["data"] = int64(5)
	_, api = newServer(bad)
	began := time.Now()
	resp, body = request(api+"?watch=1&timeoutSeconds=10", both)
	if time.Since(began) > 8*time.Second || !bytes.Contains(body, []byte("InternalError")) || !bytes.Contains(body, []byte("ConfigMap ns/c")) {
		t.Errorf("a protobuf watch of an object that does not convert: %s after %v, %q; want an ERROR event naming it", resp.Header.Get("Content-Type"), time.Since(began), body)
	}

	// Protobuf only: without, and a Warning.
	_, api = newServer()
	for _, u := range []string{api, api + "/b"} {
		resp, body = request(u, contentTypeProtobuf)
		if ct, w := resp.Header.Get("Content-Type"), resp.Header.Get("Warning"); ct != contentTypeProtobuf || !bytes.HasPrefix(body, []byte("k8s\x00")) ||
			!strings.Contains(w, "ConfigMap ns/b has fields serve's *v1.ConfigMap lacks") || !strings.Contains(w, "ask for JSON") {
			t.Errorf("GET %s in protobuf only: %s, Warning %q", u, ct, w)
		}
	}
}

// An object is checked for fields its Go type lacks once, not at every
// list: remembered by pointer (the cache never changes an object it
// holds), so a copy, or the next version, is checked again; an entry goes
// with its object.
func TestProtoChecked(t *testing.T) {
	var c protoChecked
	o := configMap("a", "v")
	o.SetResourceVersion("1")
	if _, err := typedObject(o, &c); err != nil || !c.has(o) {
		t.Fatalf("a plain ConfigMap: %v, checked %v", err, c.has(o))
	}
	// The same version made for one request (a watch's DELETED of the
	// state before), with a field the type lacks: checked on its own.
	other := o.DeepCopy()
	other.Object["futureField"] = "x"
	if _, err := typedObject(other, &c); !isLossy(err) || c.has(other) {
		t.Errorf("a copy with a field the type lacks: %v, checked %v", err, c.has(other))
	}
	if _, err := typedObject(o, &c); err != nil {
		t.Errorf("the object again: %v", err)
	}
	for i := range 100 {
		tmp := configMap(fmt.Sprint(i), "v")
		if _, err := typedObject(tmp, &c); err != nil {
			t.Fatal(err)
		}
	}
	runtime.KeepAlive(o)
	o, other = nil, nil
	waitFor(t, "the entries of collected objects gone", 10*time.Second, func() bool {
		runtime.GC()
		return c.len() == 0
	})
}
