package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
)

// serve's /events: a resource's events as server-sent events, fanned out
// to each client by its hub without ever blocking (a client that falls
// behind is dropped), resumed after a Last-Event-ID with how many events
// were missed.

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
