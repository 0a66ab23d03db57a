package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/url"
	"regexp"
	"runtime"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/kinformertest"
)

// rawGet sends a GET for path with the Host header host over a new
// connection to addr (HOST:PORT) and returns the response, body read.
func rawGet(t *testing.T, addr, host, path string) (*http.Response, string) {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(10 * time.Second))
	req := "GET " + path + " HTTP/1.1\r\n"
	if host != "" {
		req += "Host: " + host + "\r\n"
	} else {
		req = "GET " + path + " HTTP/1.0\r\n"
	}
	if _, err := io.WriteString(conn, req+"Connection: close\r\n\r\n"); err != nil {
		t.Fatal(err)
	}
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		t.Fatalf("GET %s (Host %q): %v", path, host, err)
	}
	b, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	return resp, string(b)
}

// configMaps serves n configmaps of size bytes of data each, from an
// in-memory server, and returns the server once its informer has synced.
func configMaps(t *testing.T, n, size int) (*server, *httptest.Server) {
	t.Helper()
	return configMapsCache(t, n, size, false)
}

// configMapsCache is configMaps with a compact cache (--compact) if
// compact.
func configMapsCache(t *testing.T, n, size int, compact bool) (*server, *httptest.Server) {
	t.Helper()
	var objs []*unstructured.Unstructured
	for i := range n {
		objs = append(objs, configMap(fmt.Sprintf("cm-%04d", i), strings.Repeat("x", size)))
	}
	s := syncedServer(t, compact, objs...)
	hs := httptest.NewUnstartedServer(nil)
	t.Cleanup(hs.Close)
	t.Cleanup(s.close) // first: it ends the event streams hs.Close waits for
	return s, hs
}

// configMap is the ConfigMap ns/name, its data v ("": no data).
func configMap(name, v string) *unstructured.Unstructured {
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("ns")
	cm.SetName(name)
	if v != "" {
		_ = unstructured.SetNestedField(cm.Object, v, "data", "v")
	}
	return cm
}

// syncedServer is a server of objs as configmaps ("cm"), from an
// in-memory server, once its informer (with a compact cache if compact)
// has synced; the informer stops when the test ends, the server is left
// to the test to close.
func syncedServer(t *testing.T, compact bool, objs ...*unstructured.Unstructured) *server {
	t.Helper()
	s := mustNewServer(t, 8, 16)
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	inf := kinformer.New[*unstructured.Unstructured](kinformertest.NewServer(objs...), &kinformer.Options[*unstructured.Unstructured]{
		Name: res.String(), Metrics: s.metrics, Compact: compact,
	})
	s.add("cm", res, "", inf)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	return s
}

// While bound to loopback, only loopback names are accepted as Host (DNS
// rebinding: a page whose name resolves to 127.0.0.1 sends its own), and
// those --accept-hosts matches.
func TestServeHostCheck(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		loopback bool
		accept   string
		ok       []string
		rejected []string
	}{
		{"loopback", true, "",
			[]string{"localhost", "localhost:8080", "LOCALHOST:1", "127.0.0.1", "127.0.0.1:8080", "[::1]", "[::1]:8080", "127.0.0.2:80"},
			[]string{"evil.example", "evil.example:8080", "localhost.evil.example", "127.0.0.1.evil.example", "10.0.0.1:8080", ""}},
		{"loopback, --accept-hosts", true, `^kinformer\.internal$`,
			[]string{"localhost:8080", "kinformer.internal", "kinformer.internal:8080"},
			[]string{"evil.example", "xkinformer.internal"}},
		{"elsewhere", false, "",
			[]string{"localhost", "evil.example", "10.0.0.1:8080"}, nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			var re *regexp.Regexp
			if tt.accept != "" {
				re = regexp.MustCompile(tt.accept)
			}
			checkHosts(t, tt.loopback, re, tt.ok, tt.rejected)
		})
	}
}

// checkHosts serves a configmap with the Host check of setHostCheck
// (loopback, accept): /objects must be answered to the Host names ok, and
// refused to the rejected ones with 403 saying why.
func checkHosts(t *testing.T, loopback bool, accept *regexp.Regexp, ok, rejected []string) {
	t.Helper()
	s, hs := configMaps(t, 1, 1)
	s.setHostCheck(loopback, accept)
	hs.Config.Handler = s.handler()
	hs.Start()
	addr := strings.TrimPrefix(hs.URL, "http://")
	for _, host := range ok {
		if resp, body := rawGet(t, addr, host, "/objects"); resp.StatusCode != 200 {
			t.Errorf("Host %q: %d %s, want 200", host, resp.StatusCode, body)
		}
	}
	for _, host := range rejected {
		resp, body := rawGet(t, addr, host, "/objects")
		if resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") || !strings.Contains(body, "--accept-hosts") {
			t.Errorf("Host %q: %d %s, want 403 explaining why", host, resp.StatusCode, body)
		}
	}
}

// Every response says nosniff: JSON, text, event streams, errors.
func TestServeNosniff(t *testing.T) {
	t.Parallel()
	s, hs := configMaps(t, 1, 1)
	hs.Config.Handler = s.handler()
	hs.Start()
	for _, path := range []string{"/", "/healthz", "/readyz", "/metrics", "/stats", "/objects", "/objects?label=a=b=c",
		"/objects/cm/ns/cm-0000", "/objects/cm/ns/cm-0000?format=yaml", "/objects/cm/ns/nope", "/events/recent", "/nope",
		"/events", "/events/feed"} {
		status, h := answerHeaders(t, hs.URL+path)
		if got := h.Get("X-Content-Type-Options"); got != "nosniff" {
			t.Errorf("%s (%d): X-Content-Type-Options %q", path, status, got)
		}
	}
}

// answerHeaders GETs url and returns the answer's status and headers; an
// event stream is left as soon as its headers came.
func answerHeaders(t *testing.T, url string) (int, http.Header) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	cancel()
	resp.Body.Close()
	return resp.StatusCode, resp.Header
}

// A label selector longer than 4 KiB is refused before it is parsed.
func TestServeLongSelector(t *testing.T) {
	t.Parallel()
	s, hs := configMaps(t, 1, 1)
	hs.Config.Handler = s.handler()
	hs.Start()
	longest := strings.Repeat("a=b,", maxSelectorLen/4-1) + "a=bb"
	var errBody struct{ Error string }
	getJSON(t, hs.URL+"/objects?label="+url.QueryEscape(longest+",a=b"), 400, &errBody)
	if !strings.Contains(errBody.Error, "label selector too long") {
		t.Errorf("error %q", errBody.Error)
	}
	var l listResponse
	getJSON(t, hs.URL+"/objects?label="+url.QueryEscape(longest), 200, &l)
}

// heapInUse is the live heap after a collection.
func heapInUse() uint64 {
	runtime.GC()
	var m runtime.MemStats
	runtime.ReadMemStats(&m)
	return m.HeapAlloc
}

// Clients of /objects that never read: the answer is streamed (memory does
// not grow with each one), at most a few are served at once (the others
// get 503 with Retry-After), and each is cut after the write deadline.
func TestServeObjectsStalledClients(t *testing.T) {
	// An 8 MiB answer: more than the sockets buffer, with the clients'
	// receive buffers small.
	const n, size = 80, 100 << 10
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	s, hs := configMaps(t, n, size)
	// Long enough for the complete answer and the twelve requests below on
	// a busy machine (at 500 ms, one stalled request was sometimes cut
	// before the last arrived, or the complete answer cut short).
	s.writeTimeout = 3 * time.Second
	s.objectRequests.max = 4
	hs.Config.Handler = s.handler()
	hs.Start()
	addr := strings.TrimPrefix(hs.URL, "http://")

	// A complete answer first: streamed, it is still one JSON document.
	var l listResponse
	getJSON(t, hs.URL+"/objects?resource=cm", 200, &l)
	if l.Count != n || len(l.Items) != n || l.Resource != "configmaps" || l.ResourceVersion == "" || names(l)[0] != "cm-0000" || names(l)[n-1] != fmt.Sprintf("cm-%04d", n-1) {
		t.Fatalf("/objects: count %d, %d items, resource %q", l.Count, len(l.Items), l.Resource)
	}
	l = listResponse{}
	before := heapInUse()

	stalled := stalledClients(t, addr, "GET /objects HTTP/1.1\r\nHost: localhost\r\n\r\n", 12)
	waitFor(t, "4 /objects requests in flight", 5*time.Second, func() bool { return s.objectRequests.n.Load() == 4 })
	time.Sleep(200 * time.Millisecond) // writing until the sockets are full
	if grown := int64(heapInUse()) - int64(before); grown > 16<<20 {
		t.Errorf("the heap grew by %d MiB with 4 stalled clients of a %d MiB answer", grown>>20, n*size>>20)
	}
	// The others were turned away, at once.
	refused := 0
	for _, conn := range stalled {
		// Every answer has started: a 503, or a 200 whose head is in the
		// socket's buffer.
		_ = conn.SetReadDeadline(time.Now().Add(5 * time.Second))
		resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
		if err != nil {
			t.Fatalf("reading an answer: %v", err)
		}
		if resp.StatusCode == 200 {
			continue
		}
		var body struct{ Error string }
		_ = json.NewDecoder(resp.Body).Decode(&body)
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body.Error, "too many") {
			t.Errorf("refused: %d, Retry-After %q, %q", resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
		}
		refused++
	}
	if refused != 8 {
		t.Errorf("%d requests refused, want 8", refused)
	}
	// The stalled ones are cut at the write deadline.
	waitFor(t, "the stalled requests ended", 30*time.Second, func() bool { return s.objectRequests.n.Load() == 0 })
	getJSON(t, hs.URL+"/objects?label=none", 200, &l) // served again
	if l.Count != 0 || l.Items == nil {
		t.Errorf("after the stalled clients: %+v", l)
	}
}

// The buffer of --sse-buffer events is not allocated up front, and
// event-stream clients are capped (/events and /events/feed each).
func TestServeSSELimits(t *testing.T) {
	// Not parallel: it counts the bytes the process allocates.
	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	h := newHub(1<<20, nil)
	c := h.subscribe()
	runtime.ReadMemStats(&after)
	if grown := after.TotalAlloc - before.TotalAlloc; grown > 1<<20 {
		t.Errorf("subscribing with a buffer of 1Mi events allocated %d KiB", grown>>10)
	}
	h.unsubscribe(c)

	s, hs := configMaps(t, 1, 1)
	s.sseClients.max, s.feedClients.max = 1, 1
	hs.Config.Handler = s.handler()
	hs.Start()
	openSSE(t, hs.URL+"/events")
	ctx, cancel := context.WithCancel(context.Background())
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events/feed", nil)
	feed, err := http.DefaultClient.Do(req)
	if err != nil || feed.StatusCode != 200 {
		t.Fatalf("/events/feed: %v %v", feed, err)
	}
	for _, path := range []string{"/events", "/events/feed"} {
		var body struct{ Error string }
		resp, err := http.Get(hs.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		_ = json.NewDecoder(resp.Body).Decode(&body)
		resp.Body.Close()
		if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" || !strings.Contains(body.Error, "--max-sse-clients") {
			t.Errorf("%s beyond the cap: %d, Retry-After %q, %q", path, resp.StatusCode, resp.Header.Get("Retry-After"), body.Error)
		}
	}
	cancel()
	feed.Body.Close()
	waitFor(t, "the feed's client gone", 5*time.Second, func() bool { return s.feedClients.n.Load() == 0 })
	resp, err := http.Get(hs.URL + "/events")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable {
		t.Errorf("/events, its client still there: %d, want 503", resp.StatusCode)
	}
	ctx, cancel = context.WithCancel(context.Background())
	defer cancel()
	req, _ = http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events/feed", nil)
	if feed, err = http.DefaultClient.Do(req); err != nil || feed.StatusCode != 200 {
		t.Fatalf("/events/feed, its client gone: %v %v", feed, err)
	}
	feed.Body.Close()
}

// The HTTP server's timeouts: slow headers, idle connections, and a write
// deadline for every answer (event streams extend theirs as they write).
func TestHTTPServerTimeouts(t *testing.T) {
	t.Parallel()
	hs := newHTTPServer(http.NotFoundHandler(), nil, nil)
	if hs.ReadHeaderTimeout <= 0 || hs.IdleTimeout <= 0 || hs.WriteTimeout <= 0 || hs.ReadTimeout != 0 {
		t.Errorf("ReadHeaderTimeout %v, IdleTimeout %v, WriteTimeout %v, ReadTimeout %v: want the first three set, and no ReadTimeout (it would cancel event streams)",
			hs.ReadHeaderTimeout, hs.IdleTimeout, hs.WriteTimeout, hs.ReadTimeout)
	}
}

// The real command: a foreign Host is refused, --accept-hosts allows it,
// nosniff everywhere, and an event stream outlives the server's write
// timeout... in principle (its keepalives extend it).
func TestServeHardened(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	p, base := startServe(t, "namespaces", "--accept-hosts", `kinformer\.test`, kubeconfigArg(srv))
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/")
	for _, host := range []string{"evil.example", "kinformer.test.evil.example"} { // --accept-hosts is anchored
		if resp, body := rawGet(t, addr, host, "/objects"); resp.StatusCode != http.StatusForbidden || !strings.Contains(body, "DNS rebinding") {
			t.Errorf("Host %s: %d %s", host, resp.StatusCode, body)
		}
	}
	for _, host := range []string{addr, "localhost", "kinformer.test:80"} {
		if resp, body := rawGet(t, addr, host, "/healthz"); resp.StatusCode != 200 || resp.Header.Get("X-Content-Type-Options") != "nosniff" {
			t.Errorf("Host %q: %d %s, nosniff %q", host, resp.StatusCode, body, resp.Header.Get("X-Content-Type-Options"))
		}
	}
	if code := p.interrupt(); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
	}
}
