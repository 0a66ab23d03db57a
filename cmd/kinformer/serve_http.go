package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"math"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kinformer/kinformer"
)

//go:embed web
var webFS embed.FS

// handler returns the HTTP API.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	page, err := fs.ReadFile(webFS, "web/index.html")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	csp := pageCSP(page)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(page))
	})
	mux.HandleFunc("GET /objects", s.listObjects)
	mux.HandleFunc("GET /objects/{resource}/{name}", s.getObject)
	mux.HandleFunc("GET /objects/{resource}/{namespace}/{name}", s.getObject)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /events/recent", s.recentEvents)
	mux.HandleFunc("GET /events/feed", s.feed)
	mux.HandleFunc("GET /stats", s.stats)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /readyz", readyHandler(func() []string { return s.notReady() }, s.notes))
	return s.guard(mux)
}

// pageCSP is the page's Content-Security-Policy: its own inline style and
// script (by hash) and requests to this server, nothing else. The page
// never turns served data into markup; this is the second line of
// defence, should a change ever do so: no injected script or event
// handler would run.
func pageCSP(page []byte) string {
	hashes := func(tag string) string {
		out := ""
		rest := page
		for {
			_, after, ok := bytes.Cut(rest, []byte("<"+tag+">"))
			if !ok {
				return out
			}
			body, after, ok := bytes.Cut(after, []byte("</"+tag+">"))
			if !ok {
				return out
			}
			sum := sha256.Sum256(body)
			out += " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
			rest = after
		}
	}
	return "default-src 'none'; script-src" + hashes("script") + "; style-src" + hashes("style") +
		"; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// readyHandler answers 200 "ok" when notReady returns nothing, followed
// by the lines of notes (a resource reconnecting: ready, but maybe
// behind), else 503 with notReady's lines: each resource not ready, and
// why.
func readyHandler(notReady, notes func() []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if problems := notReady(); len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(problems, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
		for _, n := range notes() {
			fmt.Fprintln(w, n)
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]any{"error": fmt.Sprintf(format, args...), "code": code})
}

// lookup finds the resource a request names; with name "" it defaults to
// the only resource served. It writes the error response itself.
func (s *server) lookup(w http.ResponseWriter, name string) *served {
	if name == "" {
		if len(s.resources) == 1 {
			return s.resources[0]
		}
		writeError(w, http.StatusBadRequest, "missing resource: want one of %s", s.choices())
		return nil
	}
	r := s.byName[name]
	if r == nil {
		writeError(w, http.StatusNotFound, "resource %q is not served: want one of %s", name, s.choices())
	}
	return r
}

func (s *server) choices() string {
	names := make([]string, 0, len(s.resources))
	for _, r := range s.resources {
		names = append(names, r.name)
	}
	return strings.Join(names, ", ")
}

type objectList struct {
	Resource        string           `json:"resource"`
	ResourceVersion string           `json:"resourceVersion"`
	Items           []map[string]any `json:"items"`
	Count           int              `json:"count"` // last: the items' number is known once they are written
}

// listObjects answers the objects of a resource, streamed: the answer of
// a large cache is never built in memory, and a client that stops reading
// is cut off after the write deadline. Few are served at once.
func (s *server) listObjects(w http.ResponseWriter, req *http.Request) {
	if !s.objectRequests.acquire() {
		tooMany(w, "too many /objects requests at once (%d); retry later", s.objectRequests.max)
		return
	}
	defer s.objectRequests.release()
	q := req.URL.Query()
	r := s.lookup(w, q.Get("resource"))
	if r == nil {
		return
	}
	sel := labels.Everything()
	if l := q.Get("label"); l != "" {
		if len(l) > maxSelectorLen {
			writeError(w, http.StatusBadRequest, "label selector too long: %d bytes, at most %d", len(l), maxSelectorLen)
			return
		}
		var err error
		if sel, err = labels.Parse(l); err != nil {
			writeError(w, http.StatusBadRequest, "bad label selector: %v", err)
			return
		}
	}
	rv := r.src.resourceVersion()
	objects := selectSorted(r.src, q.Get("namespace"), sel)

	// {"resource":…,"resourceVersion":…,"items":[…],"count":…}, an item
	// at a time, in chunks of 32 KiB, each with its own write deadline.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}, 32<<10)
	var item bytes.Buffer
	enc := json.NewEncoder(&item)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(objectList{Resource: r.name, ResourceVersion: rv}) // strings: {…,"items":null,"count":0}
	head, _, _ := bytes.Cut(item.Bytes(), []byte(`null,"count":0}`))
	bw.Write(head)
	bw.WriteByte('[')
	n := 0
	for obj := range objects {
		item.Reset()
		if err := enc.Encode(obj.Object); err != nil {
			// The status is sent: cut the answer short, so that the
			// client cannot take it for a complete list.
			panic(http.ErrAbortHandler)
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		if _, err := bw.Write(bytes.TrimSuffix(item.Bytes(), []byte("\n"))); err != nil {
			return // the client is gone, or stalled past the deadline
		}
	}
	fmt.Fprintf(bw, "],\"count\":%d}\n", n)
	_ = bw.Flush()
}

// selectSorted yields the objects of src in namespace ("" for all) whose
// labels match sel, sorted by key. A plain cache's are taken at once
// (pointers). A compact cache decodes every object it returns: its keys
// are taken at once and each object is read, decoded and matched as it
// is reached, so that a request holds one decoded object at a time, not
// its whole selection (16 requests for a large compact cache held
// hundreds of MB). An object deleted meanwhile is left out, one changed is
// served as it is when reached.
func selectSorted(src watchSource, namespace string, sel labels.Selector) iter.Seq[*unstructured.Unstructured] {
	if src.compact() {
		keys, get := src.keyed(namespace)
		slices.Sort(keys)
		return func(yield func(*unstructured.Unstructured) bool) {
			for _, k := range keys {
				o, ok := get(k)
				if !ok || !sel.Matches(labels.Set(o.GetLabels())) {
					continue
				}
				if !yield(o) {
					return
				}
			}
		}
	}
	type keyed struct {
		key string
		obj *unstructured.Unstructured
	}
	objs := src.list(namespace)
	kept := make([]keyed, 0, len(objs))
	for _, o := range objs {
		if sel.Matches(labels.Set(o.GetLabels())) {
			kept = append(kept, keyed{src.key(o), o})
		}
	}
	slices.SortFunc(kept, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	return func(yield func(*unstructured.Unstructured) bool) {
		for _, k := range kept {
			if !yield(k.obj) {
				return
			}
		}
	}
}

func (s *server) getObject(w http.ResponseWriter, req *http.Request) {
	r := s.lookup(w, req.PathValue("resource"))
	if r == nil {
		return
	}
	ns, name := req.PathValue("namespace"), req.PathValue("name")
	switch {
	case r.res.namespaced && ns == "":
		writeError(w, http.StatusNotFound, "%s is namespaced: use /objects/%s/NAMESPACE/NAME", r.name, r.name)
		return
	case !r.res.namespaced && ns != "":
		writeError(w, http.StatusNotFound, "%s is cluster-scoped: use /objects/%s/NAME", r.name, r.name)
		return
	}
	format := req.URL.Query().Get("format")
	if format != "" && format != "json" && format != "yaml" {
		writeError(w, http.StatusBadRequest, "format %q: want json or yaml", format)
		return
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, ok := r.src.get(key)
	if !ok {
		writeError(w, http.StatusNotFound, "%s %q not found", r.name, key)
		return
	}
	if format == "yaml" {
		if !s.yamlRenders.acquire() {
			tooMany(w, "too many YAML answers at once (%d); retry later, or ask for JSON", s.yamlRenders.max)
			return
		}
		defer s.yamlRenders.release()
		if n := nodes(obj.Object, maxYAMLNodes); n > maxYAMLNodes {
			writeError(w, http.StatusNotAcceptable, "%s %q has more than %d fields and list items, more than are made into YAML "+
				"(each costs kilobytes of memory to convert): ask for JSON (format=json)", r.name, key, maxYAMLNodes)
			return
		}
		b, err := marshalYAML(obj.Object, maxYAMLBytes)
		if errors.Is(err, errYAMLTooLarge) {
			writeError(w, http.StatusNotAcceptable, "%s %q as YAML would be longer than %d MiB, more than is served "+
				"(it nests %d levels deep, and YAML indents each): ask for JSON (format=json)", r.name, key, maxYAMLBytes>>20, depth(obj.Object))
			return
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "%s %q as YAML: %v", r.name, key, err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, http.StatusOK, obj.Object)
}

// startupStats is how a resource's start went (kinformer.Startup), for
// /stats: seconds to the first complete list and until every handler had
// handled its initial pass (so far, while not done), and objects of the
// expected total (0: unknown).
type startupStats struct {
	Synced          bool    `json:"synced"`
	ListSeconds     float64 `json:"listSeconds"`
	HandlersDone    bool    `json:"handlersDone"`
	HandlersSeconds float64 `json:"handlersSeconds"`
	Objects         int     `json:"objects"`
	Expected        int     `json:"expected,omitempty"`
}

func newStartupStats(s kinformer.Startup) *startupStats {
	if !s.Started {
		return nil
	}
	return &startupStats{Synced: s.Synced, ListSeconds: s.ListTook.Seconds(), HandlersDone: s.HandlersDone,
		HandlersSeconds: s.HandlersTook.Seconds(), Objects: s.Objects, Expected: s.Expected}
}

type resourceStats struct {
	Name       string           `json:"name"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace,omitempty"`
	Namespaced bool             `json:"namespaced"`
	Synced     bool             `json:"synced"`
	Error      string           `json:"error,omitempty"` // a persistent error, and since when
	Objects    int              `json:"objects"`
	Events     map[string]int64 `json:"events"`
	Rate       []int64          `json:"rate"` // events a second, oldest first
	Clients    int              `json:"clients"`
	Shard      *resourceShard   `json:"shard,omitempty"`   // sharded: the informer's share
	Compact    bool             `json:"compact"`           // the cache holds bytes (--compact)
	Startup    *startupStats    `json:"startup,omitempty"` // how its start went
}

// stats feeds the page: counts, and events per second over the last
// minute.
func (s *server) stats(w http.ResponseWriter, req *http.Request) {
	now := s.now()
	out := struct {
		Ready     bool            `json:"ready"`
		Time      time.Time       `json:"time"`
		Sharding  *shardingStats  `json:"sharding,omitempty"`
		Resources []resourceStats `json:"resources"`
	}{Ready: len(s.notReady()) == 0, Time: now}
	if s.shard != nil {
		out.Sharding = s.shard.stats()
	}
	for _, r := range s.resources {
		ev := map[string]int64{}
		for i, t := range eventTypes {
			ev[string(t)] = r.counts[i].Load()
		}
		errMsg := ""
		if err, _ := r.src.lastError(); err != nil {
			errMsg = r.problem(now)
		}
		out.Resources = append(out.Resources, resourceStats{
			Name: r.name, Kind: r.res.kind, Namespace: r.scope, Namespaced: r.res.namespaced,
			Synced: r.src.hasSynced(), Error: errMsg, Objects: r.src.len(), Events: ev,
			Rate: r.rate.last(now), Clients: r.hub.len(), Shard: newResourceShard(r.shardStatus()),
			Compact: r.src.compact(), Startup: newStartupStats(r.src.startup()),
		})
	}
	writeJSON(w, http.StatusOK, out)
}

// events streams the events of one resource as server-sent events.
func (s *server) events(w http.ResponseWriter, req *http.Request) {
	r := s.lookup(w, req.URL.Query().Get("resource"))
	if r == nil {
		return
	}
	if !s.sseClients.acquire() {
		tooMany(w, "too many /events clients (%d, --max-sse-clients); retry later", s.sseClients.max)
		return
	}
	defer s.sseClients.release()
	rc := http.NewResponseController(w)
	c, cur, missed := r.hub.subscribeAfter(req.Header.Get("Last-Event-ID"))
	defer r.hub.unsubscribe(c)

	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	// A comment first: the client knows it is subscribed.
	write := func(format string, args ...any) bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		if _, err := fmt.Fprintf(w, format, args...); err != nil {
			return false
		}
		return rc.Flush() == nil
	}
	// The id of the last event before this client's first: one that
	// reconnects before any event has come is told what it missed then.
	if !write(": subscribed to %s\nretry: 2000\nid: %s\n\n", r.name, r.hub.id(cur)) {
		return
	}
	// A client back (EventSource sends the last id it had) is told what
	// it missed while away: the events are not kept, the count is.
	switch {
	case missed > 0:
		if !write("event: missed\ndata: {\"missed\":%d,\"error\":%q}\n\n", missed, fmt.Sprintf("%d events of %s were not sent while disconnected: re-read /objects", missed, r.name)) {
			return
		}
	case missed < 0:
		if !write("event: missed\ndata: {\"missed\":-1,\"error\":%q}\n\n", fmt.Sprintf("Last-Event-ID is not of this serve process: the events of %s since are unknown; re-read /objects", r.name)) {
			return
		}
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	lifetime := time.NewTimer(s.streamLifetime)
	defer lifetime.Stop()
	// drain writes what is buffered.
	drain := func() bool {
		for {
			it, ok := r.hub.popItem(c)
			if !ok {
				return true
			}
			if !write("id: %s\ndata: %s\n\n", r.hub.id(it.seq), it.b) {
				return false
			}
		}
	}
	for {
		select {
		case <-c.ready:
			if !drain() {
				return
			}
		case <-c.dropped:
			// Deliver what is buffered, then say why the stream ends.
			if drain() {
				write("event: overflow\ndata: {\"error\":\"client fell more than %d events or %d MiB behind; disconnected\"}\n\n", r.hub.size, r.hub.maxBytes>>20)
			}
			return
		case <-keepalive.C:
			if !write(": keepalive\n\n") {
				return
			}
		case <-lifetime.C:
			if drain() {
				write("event: reconnect\ndata: {\"error\":%q}\n\n", s.lifetimeMessage())
			}
			return
		case <-s.closing:
			// What is buffered first (a sharded serve's Deleted for the
			// share it gave up), then why the stream ends.
			if drain() {
				write("event: shutdown\ndata: {\"error\":%q}\n\n", errServeStopped.Error())
			}
			return
		case <-req.Context().Done():
			return
		}
	}
}

// hub fans a resource's events out to its event-stream clients, without
// ever blocking: a client whose buffer is full is dropped.
type hub struct {
	size     int // the most events a client's buffer holds
	maxBytes int // the most bytes it holds, unless it holds one event only
	onDrop   func()
	// epoch tells this hub's sequence numbers from another process's.
	epoch   string
	mu      sync.Mutex // guards clients, every client's queue and seq
	clients map[*sseClient]struct{}
	seq     uint64 // events published: the last one's number
}

// sseItem is an event queued for a client: its number and its JSON.
type sseItem struct {
	seq uint64
	b   []byte
}

type sseClient struct {
	// queue holds the encoded events not yet taken, oldest first. It grows
	// as needed, up to the hub's size: a large --sse-buffer costs only
	// the clients that fall behind.
	queue   []sseItem
	bytes   int           // in queue
	ready   chan struct{} // a token when queue may have become non-empty
	dropped chan struct{} // closed when the client fell behind
}

func newHub(size int, onDrop func()) *hub {
	return &hub{size: size, maxBytes: maxSSEBufferBytes, onDrop: onDrop, clients: map[*sseClient]struct{}{},
		epoch: strconv.FormatInt(time.Now().UnixNano(), 36)}
}

// id is the SSE id of event number seq.
func (h *hub) id(seq uint64) string { return h.epoch + "-" + strconv.FormatUint(seq, 10) }

// subscribe adds a client.
func (h *hub) subscribe() *sseClient {
	c, _, _ := h.subscribeAfter("")
	return c
}

// subscribeAfter adds a client. cur is the number of the last event
// published before it (its events come after). lastID is the
// Last-Event-ID it sent, if any: missed is how many events were published
// after that one (-1: an id of another process, or none this hub made).
func (h *hub) subscribeAfter(lastID string) (c *sseClient, cur uint64, missed int64) {
	c = &sseClient{ready: make(chan struct{}, 1), dropped: make(chan struct{})}
	h.mu.Lock()
	defer h.mu.Unlock()
	h.clients[c] = struct{}{}
	if lastID == "" {
		return c, h.seq, 0
	}
	epoch, n, _ := strings.Cut(lastID, "-")
	seq, err := strconv.ParseUint(n, 10, 64)
	if epoch != h.epoch || err != nil || seq > h.seq {
		return c, h.seq, -1
	}
	return c, h.seq, int64(min(h.seq-seq, math.MaxInt64))
}

// pop takes c's oldest buffered event, false if there is none.
func (h *hub) pop(c *sseClient) ([]byte, bool) {
	it, ok := h.popItem(c)
	return it.b, ok
}

// popItem is pop, with the event's number.
func (h *hub) popItem(c *sseClient) (sseItem, bool) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if len(c.queue) == 0 {
		return sseItem{}, false
	}
	it := c.queue[0]
	c.queue[0] = sseItem{}
	c.queue = c.queue[1:]
	c.bytes -= len(it.b)
	return it, true
}

func (h *hub) unsubscribe(c *sseClient) {
	h.mu.Lock()
	delete(h.clients, c)
	h.mu.Unlock()
}

func (h *hub) len() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return len(h.clients)
}

// publish queues ev for every client; it never blocks.
func (h *hub) publish(ev kinformer.Event[*unstructured.Unstructured]) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if ev.Type != kinformer.Bookmark {
		// Counted with no client too: one back is told what it missed.
		// A bookmark is not an event to miss: it is sent under the
		// number of the event before it.
		h.seq++
	}
	if len(h.clients) == 0 {
		return
	}
	b, err := json.Marshal(newJSONEvent(ev))
	if err != nil {
		b, _ = json.Marshal(jsonEvent{Type: kinformer.Error, Error: "encoding event: " + err.Error()})
	}
	h.send(b)
}

// send queues b for every client; h.mu must be held. A client whose
// buffer holds h.size events, or would hold more than h.maxBytes with b,
// is dropped; b alone is always queued, however large. The clients share
// b, and their queues are the latest events, so together they hold
// h.maxBytes and an event at most.
func (h *hub) send(b []byte) {
	for c := range h.clients {
		if len(c.queue) >= h.size || len(c.queue) > 0 && c.bytes+len(b) > h.maxBytes {
			delete(h.clients, c)
			close(c.dropped)
			if h.onDrop != nil {
				h.onDrop()
			}
			continue
		}
		c.queue = append(c.queue, sseItem{h.seq, b})
		c.bytes += len(b)
		select {
		case c.ready <- struct{}{}:
		default: // a token is waiting already
		}
	}
}

// The informers' metrics are the library's (kinformer.Metrics, on the
// server's registry); these are the server's own, under names the library
// does not use.
var (
	descClients = prometheus.NewDesc("kinformer_sse_clients",
		"Clients connected to /events.", []string{"resource"}, nil)
	descDropped = prometheus.NewDesc("kinformer_sse_dropped_total",
		"/events clients disconnected because they fell behind.", []string{"resource"}, nil)
	descInfo = prometheus.NewDesc("kinformer_build_info",
		"The kinformer version and the Go version it was built with.", []string{"version", "goversion"}, nil)
)

// metricsCollector reads the server's own metrics off it when scraped.
type metricsCollector server

func (m *metricsCollector) Describe(ch chan<- *prometheus.Desc) {
	for _, d := range []*prometheus.Desc{descClients, descDropped, descInfo} {
		ch <- d
	}
}

func (m *metricsCollector) Collect(ch chan<- prometheus.Metric) {
	ch <- prometheus.MustNewConstMetric(descInfo, prometheus.GaugeValue, 1, version(), runtime.Version())
	for _, r := range m.resources {
		ch <- prometheus.MustNewConstMetric(descClients, prometheus.GaugeValue, float64(r.hub.len()), r.name)
		ch <- prometheus.MustNewConstMetric(descDropped, prometheus.CounterValue, float64(r.sseDropped.Load()), r.name)
	}
}
