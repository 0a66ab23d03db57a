package main

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/kinformertest"
)

var servingRE = regexp.MustCompile(`serving .* on (https?://\S+/)\n`)

// startServe runs "kinformer serve" on a free port and returns it with
// its base URL ("http://127.0.0.1:PORT/").
func startServe(t *testing.T, args ...string) (*proc, string) {
	t.Helper()
	p := start(t, nil, append([]string{"serve", "--listen", "127.0.0.1:0"}, args...)...)
	deadline := time.After(60 * time.Second)
	for {
		if m := servingRE.FindStringSubmatch(p.stderr.String()); m != nil {
			return p, m[1]
		}
		select {
		case <-p.done:
			t.Fatalf("kinformer serve exited (code %d) before serving; stderr:\n%s", p.code, p.stderr)
		case <-deadline:
			t.Fatalf("kinformer serve not serving after 60s; stderr:\n%s", p.stderr)
		case <-time.After(20 * time.Millisecond):
		}
	}
}

var httpClient = &http.Client{Timeout: 30 * time.Second}

// get fetches url and returns the status code and body.
func get(t *testing.T, url string) (int, string) {
	t.Helper()
	resp, err := httpClient.Get(url)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: %v", url, err)
	}
	return resp.StatusCode, string(b)
}

// getJSON fetches url, checks the status code and decodes the body into v.
func getJSON(t *testing.T, url string, wantCode int, v any) {
	t.Helper()
	code, body := get(t, url)
	if code != wantCode {
		t.Fatalf("GET %s: %d %s; want %d", url, code, body, wantCode)
	}
	if err := json.Unmarshal([]byte(body), v); err != nil {
		t.Fatalf("GET %s: %v in %q", url, err, body)
	}
}

// waitReady polls /readyz until it answers 200.
func waitReady(t *testing.T, base string) {
	t.Helper()
	deadline := time.Now().Add(60 * time.Second)
	for {
		code, body := get(t, base+"readyz")
		if code == http.StatusOK && body == "ok\n" {
			return
		}
		if code != http.StatusServiceUnavailable || !onlyNotSynced(body) {
			t.Fatalf("/readyz: %d %q", code, body)
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz still %d %q after 60s", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
}

// onlyNotSynced reports whether a /readyz body says nothing but "R: not
// synced" lines (with --state-dir, "R: not synced: restored, catching up";
// with --shard-group, "R: not synced: waiting for a share of the shard group").
func onlyNotSynced(body string) bool {
	lines := strings.Split(strings.TrimSuffix(body, "\n"), "\n")
	for _, l := range lines {
		if !strings.HasSuffix(l, ": not synced") && !strings.HasSuffix(l, ": not synced: restored, catching up") &&
			!strings.HasSuffix(l, ": not synced: waiting for a share of the shard group") {
			return false
		}
	}
	return body != ""
}

type listResponse struct {
	Resource        string           `json:"resource"`
	ResourceVersion string           `json:"resourceVersion"`
	Count           int              `json:"count"`
	Items           []map[string]any `json:"items"`
}

func names(l listResponse) []string {
	var out []string
	for _, it := range l.Items {
		out = append(out, it["metadata"].(map[string]any)["name"].(string))
	}
	return out
}

// sse reads a server-sent event stream.
type sse struct {
	t    *testing.T
	resp *http.Response
	r    *bufio.Reader
}

func openSSE(t *testing.T, url string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("GET %s: %d %s", url, resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	s := &sse{t: t, resp: resp, r: bufio.NewReaderSize(resp.Body, 1<<20)}
	if l := s.line(); !strings.HasPrefix(l, ": subscribed to ") {
		t.Fatalf("first line %q, want the subscription comment", l)
	}
	return s
}

// line returns the next line, without its newline; "" at a blank line.
func (s *sse) line() string {
	s.t.Helper()
	type result struct {
		l   string
		err error
	}
	ch := make(chan result, 1)
	go func() {
		l, err := s.r.ReadString('\n')
		ch <- result{l, err}
	}()
	select {
	case r := <-ch:
		if r.err != nil {
			s.t.Fatalf("event stream: %v (after %q)", r.err, r.l)
		}
		return strings.TrimSuffix(r.l, "\n")
	case <-time.After(lineTimeout):
		s.t.Fatalf("event stream: nothing for %v", lineTimeout)
	}
	return ""
}

// next returns the next non-bookmark event, checked to have the shape of
// watch -o json's lines.
func (s *sse) next() line {
	s.t.Helper()
	for {
		l := s.line()
		data, ok := strings.CutPrefix(l, "data: ")
		if !ok {
			if l != "" && !strings.HasPrefix(l, ":") && !strings.HasPrefix(l, "retry:") && !strings.HasPrefix(l, "id: ") {
				s.t.Fatalf("event stream: unexpected line %q", l)
			}
			continue
		}
		if ev := decode(s.t, data); ev.Type != "BOOKMARK" {
			return ev
		}
	}
}

// serve, against the real API server: every endpoint, and a clean stop.
func TestServe(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	newConfigMap(t, c, ns, "a", map[string]string{"k": "v"})
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"tier": "web"}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}

	p, base := startServe(t, "cm", "namespaces", "-n", ns, kubeconfigArg(srv))
	if strings.Contains(p.stderr.String(), "WARNING") {
		t.Errorf("warning on loopback: %s", p.stderr)
	}
	if code, body := get(t, base+"healthz"); code != 200 || body != "ok\n" {
		t.Errorf("/healthz: %d %q", code, body)
	}
	waitReady(t, base)

	// /objects, by the name given and the resolved one.
	for _, r := range []string{"cm", "configmaps"} {
		var l listResponse
		getJSON(t, base+"objects?resource="+r+"&namespace="+ns, 200, &l)
		if l.Resource != "configmaps" || l.ResourceVersion == "" || l.Count != len(l.Items) ||
			!slices.Contains(names(l), "a") || !slices.Contains(names(l), "b") {
			t.Errorf("/objects?resource=%s: %+v", r, l)
		}
	}
	for sel, want := range map[string][]string{"app=test": {"a"}, "tier=web": {"b"}, "tier in (web,db),!app": {"b"}, "app=nope": nil} {
		var l listResponse
		getJSON(t, base+"objects?resource=configmaps&label="+url.QueryEscape(sel), 200, &l)
		if got := names(l); !slices.Equal(got, want) || l.Count != len(want) {
			t.Errorf("label %q: got %q, want %q", sel, got, want)
		}
	}
	var l listResponse
	getJSON(t, base+"objects?resource=configmaps&namespace=elsewhere", 200, &l)
	if l.Count != 0 || l.Items == nil {
		t.Errorf("other namespace: %+v, want an empty list", l)
	}
	var errBody struct {
		Error string `json:"error"`
		Code  int    `json:"code"`
	}
	getJSON(t, base+"objects?resource=configmaps&label="+url.QueryEscape("a=b=c"), 400, &errBody)
	getJSON(t, base+"objects", 400, &errBody) // two resources served: which?
	getJSON(t, base+"objects?resource=pods", 404, &errBody)
	if !strings.Contains(errBody.Error, `"pods" is not served`) {
		t.Errorf("unknown resource error: %q", errBody.Error)
	}

	// One object.
	var obj map[string]any
	getJSON(t, base+"objects/configmaps/"+ns+"/a", 200, &obj)
	if obj["data"].(map[string]any)["k"] != "v" || obj["kind"] != "ConfigMap" {
		t.Errorf("/objects/configmaps/%s/a: %v", ns, obj)
	}
	getJSON(t, base+"objects/cm/"+ns+"/b", 200, &obj)
	resp, err := httpClient.Get(base + "objects/configmaps/" + ns + "/a?format=yaml")
	if err != nil {
		t.Fatal(err)
	}
	yamlBody, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "application/yaml; charset=utf-8" ||
		!strings.Contains(string(yamlBody), "\nkind: ConfigMap\n") || !strings.Contains(string(yamlBody), "\n  k: v\n") {
		t.Errorf("?format=yaml: %d %s\n%s", resp.StatusCode, resp.Header.Get("Content-Type"), yamlBody)
	}
	getJSON(t, base+"objects/configmaps/"+ns+"/a?format=xml", 400, &errBody)
	getJSON(t, base+"objects/namespaces/"+ns, 200, &obj)
	if obj["metadata"].(map[string]any)["name"] != ns {
		t.Errorf("/objects/namespaces/%s: %v", ns, obj)
	}
	for _, path := range []string{"objects/configmaps/" + ns + "/nope", "objects/configmaps/a", "objects/namespaces/x/" + ns, "objects/namespaces/nope-" + ns} {
		errBody.Error, errBody.Code = "", 0
		getJSON(t, base+path, 404, &errBody)
		if errBody.Error == "" || errBody.Code != 404 {
			t.Errorf("/%s: %+v", path, errBody)
		}
	}

	// The event stream: a scripted create, update and delete.
	s := openSSE(t, base+"events?resource=configmaps")
	cm := newConfigMap(t, c, ns, "c", nil)
	cm.Data = map[string]string{"x": "1"}
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	var prev int64
	for _, want := range []string{"ADDED", "MODIFIED", "DELETED"} {
		ev := s.next()
		if ev.Type != want || ev.Key != ns+"/c" || rv(t, ev) <= prev {
			t.Fatalf("event %s %s rv %s; want %s %s/c after rv %d", ev.Type, ev.Key, ev.ResourceVersion, want, ns, prev)
		}
		prev = rv(t, ev)
	}
	// The same events, summarised, in /events/recent.
	var recent struct{ Events []feedEvent }
	getJSON(t, base+"events/recent?resource=cm&namespace="+ns, 200, &recent)
	var got []string
	for _, e := range recent.Events {
		if e.Resource != "configmaps" || e.Namespace != ns || e.Seq == 0 || e.Time.IsZero() || e.ResourceVersion == "" {
			t.Errorf("/events/recent: %+v", e)
		}
		got = append(got, string(e.Type)+" "+e.Cause+" "+e.Name)
	}
	if len(got) >= 2 {
		slices.Sort(got[:2]) // the first list's, in the server's order: a watch-list's is not by name
	}
	if want := []string{"ADDED list a", "ADDED list b", "ADDED watch c", "MODIFIED watch c", "DELETED watch c"}; !slices.Equal(got, want) {
		t.Errorf("/events/recent: %q, want %q", got, want)
	}

	// Metrics: the library's, labelled by the resource served, and the
	// server's own.
	code, metrics := get(t, base+"metrics")
	for _, want := range []string{
		`kinformer_events_total{resource="configmaps",type="ADDED"} `,
		`kinformer_events_total{resource="configmaps",type="DELETED"} `,
		`kinformer_objects{resource="configmaps"} `,
		`kinformer_synced{resource="configmaps"} 1`,
		`kinformer_synced{resource="namespaces"} 1`,
		`kinformer_handler_queue_depth{resource="configmaps"} `,
		`kinformer_persistent_error{resource="configmaps"} 0`,
		`kinformer_last_event_age_seconds{resource="namespaces"} `,
		`kinformer_requests_total{resource="configmaps",result="ok",verb="watch"} `,
		`kinformer_sse_clients{resource="configmaps"} 1`,
		`kinformer_sse_dropped_total{resource="configmaps"} 0`,
		`kinformer_build_info{`,
		"go_goroutines ", "process_resident_memory_bytes ",
	} {
		if code != 200 || !strings.Contains(metrics, want) {
			t.Errorf("/metrics (%d) lacks %q", code, want)
		}
	}
	if strings.Contains(metrics, "kinformer_handler_pending") {
		t.Errorf("/metrics still has kinformer_handler_pending")
	}
	checkMetricLabels(t, metrics, []string{"configmaps", "namespaces"}, []string{ns, "a", "b", "c"})
	m := regexp.MustCompile(`kinformer_events_total\{resource="configmaps",type="ADDED"\} (\d+)`).FindStringSubmatch(metrics)
	if n := 0; m != nil {
		n, _ = strconv.Atoi(m[1])
		if n < 3 {
			t.Errorf("ADDED counter %d, want at least 3", n)
		}
	} else {
		t.Errorf("ADDED counter: %v, want at least 3", m)
	}

	// /stats, for the page.
	var st struct {
		Ready     bool
		Resources []resourceStats
	}
	getJSON(t, base+"stats", 200, &st)
	if !st.Ready || len(st.Resources) != 2 || st.Resources[0].Name != "configmaps" || st.Resources[0].Objects < 2 ||
		len(st.Resources[0].Rate) != rateSeconds || st.Resources[0].Events["DELETED"] < 1 {
		t.Errorf("/stats: %+v", st)
	}
	if su := st.Resources[0].Startup; su == nil || !su.Synced || !su.HandlersDone || su.ListSeconds <= 0 || su.Objects < 2 {
		t.Errorf("/stats startup of configmaps: %+v; want synced, handlers done, a list time and the objects", su)
	}
	if code, body := get(t, base); code != 200 || !strings.Contains(body, "<canvas") {
		t.Errorf("/: %d", code)
	}

	// SIGINT: the stream ends, the process exits 0.
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	rest, _ := io.ReadAll(s.r) // the process has exited: EOF
	if !strings.Contains(string(rest), "event: shutdown\n") {
		t.Errorf("event stream ended with %q, want a shutdown event", rest)
	}
	if !strings.Contains(p.stderr.String(), "stopped") {
		t.Errorf("stderr: %s", p.stderr)
	}
}

// A non-loopback address is allowed, with a warning.
func TestServeWarnsOffLoopback(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	p := start(t, nil, "serve", "namespaces", "--listen", "0.0.0.0:0", kubeconfigArg(srv))
	deadline := time.Now().Add(60 * time.Second)
	for !servingRE.MatchString(p.stderr.String()) {
		if time.Now().After(deadline) {
			t.Fatalf("not serving; stderr:\n%s", p.stderr)
		}
		time.Sleep(20 * time.Millisecond)
	}
	if !strings.Contains(p.stderr.String(), "WARNING: listening on 0.0.0.0:") {
		t.Errorf("no warning; stderr:\n%s", p.stderr)
	}
	if code := p.interrupt(); code != 0 {
		t.Errorf("exit %d", code)
	}
}

// Startup failures exit like watch does.
func TestServeFailures(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	kc := kubeconfigArg(srv)
	tests := []struct {
		name string
		args []string
		code int
		msg  string
	}{
		{"unknown resource", []string{"configmaps", "nosuch", kc}, exitUnknown, `unknown resource "nosuch"`},
		{"bad selector", []string{"cm", "-l", "a=b=c", kc}, exitBadSelector, "bad selector: "},
		{"forbidden", []string{"cm", "secrets", "--serve-secrets-without-token", "--context", "restricted", kc}, exitForbidden, `"secrets"`},
		{"secrets without a token", []string{"cm", "secrets", kc}, exitUsage, "serving secrets without --token-file"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, nil, append([]string{"serve", "--listen", "127.0.0.1:0"}, tt.args...)...)
			if code != tt.code || !strings.Contains(stderr, tt.msg) || stdout != "" {
				t.Errorf("exit %d, stdout %q, stderr %q; want exit %d and %q", code, stdout, stderr, tt.code, tt.msg)
			}
		})
	}
}

func TestServeUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"serve"}, "missing RESOURCE"},
		{[]string{"serve", "pods", "--listen", "nonsense"}, `--listen "nonsense"`},
		{[]string{"serve", "pods", "--sse-buffer", "0"}, "--sse-buffer"},
		{[]string{"serve", "pods", "--sse-buffer", "100000000"}, "--sse-buffer must be between 1 and 65536"},
		{[]string{"serve", "pods", "--max-sse-clients", "0"}, "--max-sse-clients"},
		{[]string{"serve", "pods", "--accept-hosts", "("}, "--accept-hosts"},
		{[]string{"serve", "pods", "--listen", "127.0.0.1:99999"}, `--listen "127.0.0.1:99999"`},
		{[]string{"serve", "pods", "--listen", "127.0.0.1:http"}, `--listen "127.0.0.1:http"`},
		{[]string{"serve", "pods", "--listen", "[::1"}, `--listen "[::1"`},
		{[]string{"serve", "pods", "--recent-events", "0"}, "--recent-events"},
		{[]string{"serve", "pods", "-A", "-n", "x"}, "mutually exclusive"},
	} {
		code, stdout, stderr := runCmd(t, nil, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.msg) || stdout != "" {
			t.Errorf("kinformer %q: exit %d, stdout %q, stderr %q", tt.args, code, stdout, stderr)
		}
	}
	code, stdout, _ := runCmd(t, nil, "serve", "--help")
	for _, want := range []string{"serve RESOURCE...", "--listen", "127.0.0.1:8080", "/readyz", "--sse-buffer", "disconnected", "/events/feed", "--recent-events", "--state-dir DIR", "catching up", "--compact", "--accept-hosts", "DNS rebinding", "--max-sse-clients", "Exit codes:"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("serve --help (exit %d) lacks %q", code, want)
		}
	}
}

// checkMetricLabels checks that every kinformer_ series has only bounded
// labels: resource among resources, and no value naming an object.
func checkMetricLabels(t *testing.T, metrics string, resources, objectNames []string) {
	t.Helper()
	labelRE := regexp.MustCompile(`(\w+)="([^"]*)"`)
	allowed := map[string]bool{"resource": true, "type": true, "verb": true, "result": true, "cause": true, "version": true, "goversion": true}
	n := 0
	for _, l := range strings.Split(metrics, "\n") {
		if !strings.HasPrefix(l, "kinformer_") {
			continue
		}
		n++
		for _, m := range labelRE.FindAllStringSubmatch(l, -1) {
			k, v := m[1], m[2]
			if !allowed[k] || k == "resource" && !slices.Contains(resources, v) || slices.Contains(objectNames, v) {
				t.Errorf("/metrics: label %s=%q in %q", k, v, l)
			}
		}
	}
	if n == 0 {
		t.Errorf("/metrics: no kinformer_ series")
	}
}

// /readyz is 503 until everything is ready, a line for each resource that
// is not.
func TestReadyHandler(t *testing.T) {
	t.Parallel()
	problems := []string{"pods: not synced", "deployments.apps: forbidden (since 3s)"}
	var notes []string
	h := readyHandler(func() []string { return problems }, func() []string { return notes })
	rec := httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 503 || rec.Body.String() != "pods: not synced\ndeployments.apps: forbidden (since 3s)\n" {
		t.Errorf("not ready: %d %q", rec.Code, rec.Body)
	}
	problems = nil
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok\n" {
		t.Errorf("after sync: %d %q", rec.Code, rec.Body)
	}
	notes = []string{"pods: reconnecting (since 4s): served as it was, may be behind the server"}
	rec = httptest.NewRecorder()
	h.ServeHTTP(rec, httptest.NewRequest("GET", "/readyz", nil))
	if rec.Code != 200 || rec.Body.String() != "ok\n"+notes[0]+"\n" {
		t.Errorf("ready, reconnecting: %d %q", rec.Code, rec.Body)
	}
}

// A ready resource that is reconnecting is noted under /readyz's "ok",
// with how long; one that is not, or not ready (a problem instead), is not.
func TestServedLagNotesReconnecting(t *testing.T) {
	t.Parallel()
	now := time.Now()
	src := &reconnectingSource{}
	s := &server{resources: []*served{{name: "configmaps", src: src}}, now: func() time.Time { return now }}
	if n := s.notes(); len(n) != 0 {
		t.Fatalf("notes %q while the watch works", n)
	}
	src.since = now.Add(-12 * time.Second)
	if n := s.notes(); len(n) != 1 || !strings.HasPrefix(n[0], "configmaps: reconnecting (since 12s)") {
		t.Fatalf("notes %q, want configmaps reconnecting since 12s", n)
	}
}

// reconnectingSource is a source that only says whether it reconnects.
type reconnectingSource struct {
	watchSource
	since time.Time // zero: not reconnecting
}

func (s *reconnectingSource) reconnecting() (bool, time.Time) { return !s.since.IsZero(), s.since }

// A client that falls behind is dropped; the others keep their events.
func TestHubDropsSlowClient(t *testing.T) {
	t.Parallel()
	drops := 0
	h := newHub(2, func() { drops++ })
	slow, fast := h.subscribe(), h.subscribe()
	for i := range 3 {
		h.mu.Lock()
		h.send([]byte{byte('0' + i)})
		h.mu.Unlock()
		if got, _ := h.pop(fast); string(got) != string(rune('0'+i)) {
			t.Fatalf("fast client got %q", got)
		}
	}
	select {
	case <-slow.dropped:
	default:
		t.Fatal("slow client not dropped")
	}
	if len(slow.queue) != 2 || drops != 1 || h.len() != 1 {
		t.Errorf("slow buffered %d, drops %d, clients %d", len(slow.queue), drops, h.len())
	}
	for _, want := range []string{"0", "1"} { // what it had buffered, still
		if got, ok := h.pop(slow); string(got) != want || !ok {
			t.Errorf("slow client got %q, %v; want %q", got, ok, want)
		}
	}
	if got, ok := h.pop(slow); ok {
		t.Errorf("slow client got %q after its buffer", got)
	}
	select {
	case <-fast.dropped:
		t.Error("fast client dropped")
	default:
	}
}

func TestRateRing(t *testing.T) {
	t.Parallel()
	var r rateRing
	t0 := time.Unix(1_000_000, 0)
	r.add(t0)
	r.add(t0.Add(300 * time.Millisecond))
	r.add(t0.Add(time.Second))
	got := r.last(t0.Add(2 * time.Second))
	if len(got) != rateSeconds || got[rateSeconds-2] != 2 || got[rateSeconds-1] != 1 {
		t.Errorf("last: %v", got)
	}
	got = r.last(t0.Add(rateSeconds * time.Second)) // t0 is the oldest second shown
	if got[0] != 2 || got[1] != 1 || got[rateSeconds-1] != 0 {
		t.Errorf("a minute later: %v", got)
	}
	got = r.last(t0.Add(10 * time.Minute))
	if slices.Max(got) != 0 {
		t.Errorf("much later: %v", got)
	}
}

func TestEventRing(t *testing.T) {
	t.Parallel()
	r := newEventRing(3)
	seqs := func(events []feedEvent) []uint64 {
		var out []uint64
		for _, e := range events {
			out = append(out, e.Seq)
		}
		return out
	}
	events, last, missed, changed := r.since(0, feedFilter{})
	if events != nil || last != 0 || missed != 0 {
		t.Errorf("empty: %v %d %d", events, last, missed)
	}
	for _, ns := range []string{"a", "b", "a", "b", "a"} {
		r.add(feedEvent{Resource: "configmaps", Type: kinformer.Added, Namespace: ns, Name: "x"})
	}
	select {
	case <-changed:
	default:
		t.Error("changed not closed after add")
	}
	for _, tt := range []struct {
		after      uint64
		f          feedFilter
		want       []uint64
		wantMissed uint64
	}{
		{0, feedFilter{}, []uint64{3, 4, 5}, 2},
		{1, feedFilter{}, []uint64{3, 4, 5}, 1},
		{3, feedFilter{}, []uint64{4, 5}, 0},
		{5, feedFilter{}, nil, 0},
		{0, feedFilter{namespace: "a"}, []uint64{3, 5}, 2},
		{0, feedFilter{resource: "pods"}, nil, 2},
		{0, feedFilter{resource: "configmaps", namespace: "b"}, []uint64{4}, 2},
	} {
		events, last, missed, _ := r.since(tt.after, tt.f)
		if !slices.Equal(seqs(events), tt.want) || last != 5 || missed != tt.wantMissed {
			t.Errorf("since(%d, %+v): %v, last %d, missed %d; want %v, 5, %d", tt.after, tt.f, seqs(events), last, missed, tt.want, tt.wantMissed)
		}
	}
}

// The feed's stream replays the ring, resumes after Last-Event-ID, says
// what a reconnection missed, and goes on live.
func TestServeFeedStream(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 8, 3)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	for _, name := range []string{"a", "b", "c", "d"} {
		s.recent.add(feedEvent{Resource: "configmaps", Type: kinformer.Added, Namespace: "ns", Name: name})
	}
	var errBody struct{ Error string }
	getJSON(t, hs.URL+"/events/recent?resource=pods", 404, &errBody)
	getJSON(t, hs.URL+"/events/feed?resource=pods", 404, &errBody)

	open := func(lastID string) *sse {
		req, _ := http.NewRequest(http.MethodGet, hs.URL+"/events/feed", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		resp, err := http.DefaultClient.Do(req.WithContext(ctx))
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		return &sse{t: t, resp: resp, r: bufio.NewReader(resp.Body)}
	}
	// next returns the next message's event, id and data.
	next := func(s *sse) (event, id, data string) {
		for {
			l := s.line()
			switch k, v, _ := strings.Cut(l, ": "); {
			case l == "" && (id != "" || data != ""):
				return event, id, data
			case k == "event":
				event = v
			case k == "id":
				id = v
			case k == "data":
				data = v
			}
		}
	}
	id := s.recent.id
	fresh := open("")
	for _, seq := range []uint64{2, 3, 4} {
		want := id(seq)
		if _, id, data := next(fresh); id != want || !strings.Contains(data, fmt.Sprintf(`"seq":%d,`, seq)) {
			t.Errorf("fresh stream: id %s data %s; want seq %s", id, data, want)
		}
	}
	resumed := open(id(1)) // 2 was missed: the ring holds 2, 3, 4
	if event, got, data := next(resumed); event != "" || got != id(2) {
		t.Errorf("resumed after 1: %s id %s %s, want %s", event, got, data, id(2))
	}
	gap := open(id(0))
	if event, _, data := next(gap); event != "missed" || data != `{"missed":1}` {
		t.Errorf("resumed after 0: %s %s; want 1 missed", event, data)
	}
	// An id from another process: the whole ring, no missed.
	for _, other := range []string{"x-1", "3", "garbage"} {
		if event, got, _ := next(open(other)); event != "" || got != id(2) {
			t.Errorf("resumed after %q: %s %s, want %s", other, event, got, id(2))
		}
	}
	s.recent.add(feedEvent{Resource: "configmaps", Type: kinformer.Deleted, Namespace: "ns", Name: "a"})
	if _, got, data := next(fresh); got != id(5) || !strings.Contains(data, `"type":"DELETED"`) {
		t.Errorf("live: id %s data %s", got, data)
	}
	s.close()
	if event, _, _ := next(fresh); event != "shutdown" {
		t.Errorf("after close: %s, want shutdown", event)
	}
}

func mustNewServer(t *testing.T, sseBuffer, recent int) *server {
	t.Helper()
	s, err := newServer(sseBuffer, recent)
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// revocable is an in-memory server whose permission the test takes away:
// every list and watch is then forbidden.
type revocable struct {
	*kinformertest.Server[*unstructured.Unstructured]
	denied atomic.Bool
	why    string
}

func (r *revocable) forbidden() error {
	return apierrors.NewForbidden(schema.GroupResource{Resource: "configmaps"}, "", errors.New(r.why))
}

func (r *revocable) List(ctx context.Context, opts metav1.ListOptions) (*kinformertest.List[*unstructured.Unstructured], error) {
	if r.denied.Load() {
		return nil, r.forbidden()
	}
	return r.Server.List(ctx, opts)
}

func (r *revocable) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if r.denied.Load() {
		return nil, r.forbidden()
	}
	return r.Server.Watch(ctx, opts)
}

// revocableServer serves configmaps from a revocable in-memory server,
// over HTTP; its informer runs until the test ends. why is the error's
// message once revoked.
func revocableServer(t *testing.T, why string) (*revocable, *httptest.Server) {
	t.Helper()
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("ns")
	cm.SetName("a")
	lw := &revocable{Server: kinformertest.NewServer(cm), why: why}
	s := mustNewServer(t, 8, 16)
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	inf := kinformer.New[*unstructured.Unstructured](lw, &kinformer.Options[*unstructured.Unstructured]{
		Name: res.String(), Metrics: s.metrics,
		Backoff: kinformer.Backoff{Initial: 10 * time.Millisecond, Max: 50 * time.Millisecond},
	})
	s.add("cm", res, "", inf)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = inf.Run(ctx) }()
	return lw, hs
}

// An informer that loses its permission after syncing makes the server
// unready, saying which resource and why, until it works again.
func TestServeReadinessLostPermission(t *testing.T) {
	t.Parallel()
	lw, hs := revocableServer(t, "permission revoked")

	// waitFor polls /readyz until it answers code with a body ok accepts.
	waitFor := func(what string, code int, ok func(string) bool) string {
		t.Helper()
		deadline := time.Now().Add(10 * time.Second)
		for {
			c, body := get(t, hs.URL+"/readyz")
			if c == code && ok(body) {
				return body
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: /readyz still %d %q after 10s", what, c, body)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	waitFor("sync", 200, func(b string) bool { return b == "ok\n" })

	lw.denied.Store(true)
	lw.CloseWatches() // as at the watch's timeout: re-opening it is forbidden
	body := waitFor("revoked", 503, func(b string) bool { return strings.HasPrefix(b, "configmaps: ") })
	if !strings.Contains(body, "forbidden") || !strings.Contains(body, "permission revoked") || !regexp.MustCompile(`\(since \d+(\.\d+)?m?s\)\n$`).MatchString(body) {
		t.Errorf("/readyz after the permission was revoked: %q", body)
	}
	var st struct {
		Ready     bool
		Resources []resourceStats
	}
	getJSON(t, hs.URL+"/stats", 200, &st)
	if st.Ready || len(st.Resources) != 1 || !st.Resources[0].Synced || !strings.Contains(st.Resources[0].Error, "permission revoked") {
		t.Errorf("/stats after the permission was revoked: %+v", st)
	}
	if _, metrics := get(t, hs.URL+"/metrics"); !strings.Contains(metrics, `kinformer_persistent_error{resource="configmaps"} 1`) ||
		!regexp.MustCompile(`kinformer_requests_total\{resource="configmaps",result="forbidden",verb="(watch|list|watchlist)"\} [1-9]`).MatchString(metrics) {
		t.Errorf("/metrics after the permission was revoked:\n%s", metrics)
	}

	lw.denied.Store(false)
	waitFor("restored", 200, func(b string) bool { return b == "ok\n" })
}

// Against the real API server: serve as a user whose RoleBinding is
// deleted after its informer has synced. Its watches (a hidden
// --watch-timeout: 1 s) are re-opened, forbidden, and /readyz goes 503
// naming the resource.
func TestServeReadyzLosesRBAC(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	newConfigMap(t, c, ns, "a", nil)
	user := "serve-readyz-" + ns
	if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "reader"},
		Subjects:   []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer's cache lags the binding: wait until it grants.
	as := rest.CopyConfig(srv.Config())
	as.Impersonate.UserName = user
	ca := kubernetes.NewForConfigOrDie(as)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := ca.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the binding still not effective after 30s: %v", err)
		}
	}

	p, base := startServe(t, "cm", "-n", ns, "--as", user, "--watch-timeout", "1s", kubeconfigArg(srv))
	waitReady(t, base)
	if err := c.RbacV1().RoleBindings(ns).Delete(ctx, "reader", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, body := get(t, base+"readyz")
		if code == http.StatusServiceUnavailable && strings.HasPrefix(body, "configmaps: ") {
			if !strings.Contains(body, "forbidden") || !strings.Contains(body, `"`+user+`"`) || !strings.Contains(body, "(since ") {
				t.Errorf("/readyz after the binding was deleted: %q", body)
			}
			break
		}
		if code != http.StatusOK || time.Now().After(deadline) {
			t.Fatalf("/readyz: %d %q; want 503 for configmaps within 30s of deleting the binding", code, body)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if _, metrics := get(t, base+"metrics"); !strings.Contains(metrics, `kinformer_persistent_error{resource="configmaps"} 1`) {
		t.Errorf("/metrics lacks kinformer_persistent_error 1 for configmaps")
	}
	// Still serving its frozen cache, until stopped.
	var l listResponse
	getJSON(t, base+"objects?resource=configmaps", 200, &l)
	if !slices.Contains(names(l), "a") {
		t.Errorf("/objects after the binding was deleted: %+v", l)
	}
	if code := p.interrupt(); code != 0 {
		t.Errorf("exit %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
}
