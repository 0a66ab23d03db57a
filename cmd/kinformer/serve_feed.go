package main

import (
	"encoding/json"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
)

// The feed: what the live page lists as recent events. Every served
// resource's events (bookmarks aside) go into one bounded ring, as short
// summaries without object bodies. Readers keep their own cursor (a
// sequence number) and read the ring at their own pace, so a slow reader
// never holds up an informer and costs no memory of its own: one that falls
// further behind than the ring holds is told how many events it missed.

// feedEvent is one event as the feed shows it.
type feedEvent struct {
	Seq             uint64              `json:"seq"` // 1 for the process's first event, then +1 each
	Time            time.Time           `json:"time"`
	Resource        string              `json:"resource"`
	Type            kinformer.EventType `json:"type"`
	Cause           string              `json:"cause"` // list, watch, relist, …
	Namespace       string              `json:"namespace,omitempty"`
	Name            string              `json:"name,omitempty"`
	NameBytes       int                 `json:"nameBytes,omitempty"` // the name's length, when Name is cut
	ResourceVersion string              `json:"resourceVersion,omitempty"`
	Error           string              `json:"error,omitempty"`
}

// maxFeedError is the longest error text a feed event keeps.
const maxFeedError = 1 << 10

// newFeedEvent summarises ev. The strings are copied: the ring must not
// keep the object (or a decoding buffer its strings may share) alive.
// Long ones are cut (cutText): a summary is at most about 2 KiB, so the
// ring holds at most --recent-events times that, and a name of 200 KB
// patched 500 times no longer makes /events/recent a 100 MB answer.
func newFeedEvent(resource string, now time.Time, ev kinformer.Event[*unstructured.Unstructured]) feedEvent {
	fe := feedEvent{
		Time: now, Resource: resource, Type: ev.Type, Cause: ev.Cause.String(),
		ResourceVersion: clip(ev.ResourceVersion, maxNameBytes),
	}
	if ev.Object != nil {
		fe.Namespace = clip(ev.Object.GetNamespace(), maxNameBytes)
		name := ev.Object.GetName()
		if fe.Name = clip(name, maxNameBytes); len(name) > maxNameBytes {
			fe.NameBytes = len(name)
		}
	}
	if ev.Err != nil {
		fe.Error = clip(ev.Err.Error(), maxFeedError)
	}
	return fe
}

// clip is s cut to limit bytes (cutText), a copy either way.
func clip(s string, limit int) string {
	if len(s) > limit {
		return cutText(s, limit) // a new string
	}
	return strings.Clone(s)
}

// feedFilter selects feed events; its zero value selects all.
type feedFilter struct {
	resource  string // resolved name; "" for all
	namespace string // exact; "" for all
}

func (f feedFilter) match(e *feedEvent) bool {
	return (f.resource == "" || e.Resource == f.resource) && (f.namespace == "" || e.Namespace == f.namespace)
}

// eventRing holds the last events of the process, oldest overwritten first.
type eventRing struct {
	// epoch tells this ring's sequence numbers from another process's: a
	// page that reconnects to a restarted server must start afresh.
	epoch string

	mu      sync.Mutex    // guards the fields below
	buf     []feedEvent   // event seq is at buf[seq%len(buf)], for the len(buf) newest seqs
	next    uint64        // the seq the next event gets; 1 before the first
	changed chan struct{} // closed (and replaced) when an event is added
}

func newEventRing(size int) *eventRing {
	return &eventRing{
		epoch: strconv.FormatInt(time.Now().UnixNano(), 36),
		buf:   make([]feedEvent, size), next: 1, changed: make(chan struct{}),
	}
}

// id is the event-stream id of seq: "EPOCH-SEQ".
func (r *eventRing) id(seq uint64) string { return r.epoch + "-" + strconv.FormatUint(seq, 10) }

// parseID returns the seq of an id of r's, ok false for any other. An id
// beyond the last seq given is no id of r's: resuming after it would wrap
// the seq past the largest uint64 and resend the whole ring on every event.
func (r *eventRing) parseID(id string) (seq uint64, ok bool) {
	epoch, n, found := strings.Cut(id, "-")
	if !found || epoch != r.epoch {
		return 0, false
	}
	seq, err := strconv.ParseUint(n, 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if err != nil || seq >= r.next {
		return 0, false
	}
	return seq, true
}

// add stores e with the next sequence number and wakes the readers.
func (r *eventRing) add(e feedEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e.Seq = r.next
	r.buf[e.Seq%uint64(len(r.buf))] = e
	r.next++
	close(r.changed)
	r.changed = make(chan struct{})
}

// oldest is the seq of the oldest event held; r.mu must be held.
func (r *eventRing) oldest() uint64 {
	if r.next <= uint64(len(r.buf)) {
		return 1
	}
	return r.next - uint64(len(r.buf))
}

// since returns the events after seq after that f selects, oldest first;
// the seq to read after next time; how many events after after the ring
// no longer holds; and a channel closed when there is more to read.
func (r *eventRing) since(after uint64, f feedFilter) (events []feedEvent, last, missed uint64, changed <-chan struct{}) {
	return r.sinceAtMost(after, f, 0)
}

// sinceAtMost is since, for at most limit events (0: all). When more are
// held, the channel returned is closed already: a reader of a ring of
// 65,536 events copies a batch at a time, not the whole ring.
func (r *eventRing) sinceAtMost(after uint64, f feedFilter, limit int) (events []feedEvent, last, missed uint64, changed <-chan struct{}) {
	r.mu.Lock()
	defer r.mu.Unlock()
	from := after + 1
	if o := r.oldest(); from < o {
		missed, from = o-from, o
	}
	for seq := from; seq < r.next; seq++ {
		if e := &r.buf[seq%uint64(len(r.buf))]; f.match(e) {
			events = append(events, *e)
			if len(events) == limit && seq+1 < r.next {
				return events, seq, missed, closedChan
			}
		}
	}
	return events, max(after, r.next-1), missed, r.changed
}

// closedChan is a channel closed from the start.
var closedChan = func() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}()

// feedFilter reads ?resource= and ?namespace=; it writes the error
// response itself when the resource is not served.
func (s *server) feedFilter(w http.ResponseWriter, req *http.Request) (feedFilter, bool) {
	q := req.URL.Query()
	f := feedFilter{namespace: q.Get("namespace")}
	if name := q.Get("resource"); name != "" {
		r := s.lookup(w, name)
		if r == nil {
			return f, false
		}
		f.resource = r.name
	}
	return f, true
}

// recentEvents answers the feed's events still held, oldest first.
func (s *server) recentEvents(w http.ResponseWriter, req *http.Request) {
	f, ok := s.feedFilter(w, req)
	if !ok {
		return
	}
	events, _, _, _ := s.recent.since(0, f)
	if events == nil {
		events = []feedEvent{}
	}
	writeJSON(w, http.StatusOK, map[string]any{"events": events})
}

// A feed client is written its backlog (the ring, or what it missed) in
// batches of feedBatch events, and chunks of about feedChunk bytes: one
// that does not read holds one chunk, not a copy of the ring.
const (
	feedBatch = 256
	feedChunk = 32 << 10
)

// feed streams the feed as server-sent events: the events still held, then
// new ones as they come. Each message's id names its seq, so a client that
// reconnects (EventSource does, sending Last-Event-ID) resumes where it
// stopped; "event: missed" says how many events it missed meanwhile. An id
// from another process (the server restarted) starts afresh.
func (s *server) feed(w http.ResponseWriter, req *http.Request) {
	f, ok := s.feedFilter(w, req)
	if !ok {
		return
	}
	if !s.feedClients.acquire() {
		tooMany(w, "too many /events/feed clients (%d, --max-sse-clients); retry later", s.feedClients.max)
		return
	}
	defer s.feedClients.release()
	after, resuming := s.recent.parseID(req.Header.Get("Last-Event-ID"))
	rc := http.NewResponseController(w)
	h := w.Header()
	h.Set("Content-Type", "text/event-stream")
	h.Set("X-Accel-Buffering", "no")
	w.WriteHeader(http.StatusOK)
	var b []byte
	flush := func() bool {
		_ = rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
		_, err := w.Write(b)
		b = b[:0]
		return err == nil && rc.Flush() == nil
	}
	b = append(b, ": feed\nretry: 2000\n\n"...)
	if !flush() {
		return
	}
	keepalive := time.NewTicker(keepaliveInterval)
	defer keepalive.Stop()
	lifetime := time.NewTimer(s.streamLifetime)
	defer lifetime.Stop()
	for closing, expired := false, false; ; {
		events, last, missed, changed := s.recent.sinceAtMost(after, f, feedBatch)
		more := changed == closedChan // a batch: more events are held
		if missed > 0 && resuming {
			b = fmt.Appendf(b, "event: missed\ndata: {\"missed\":%d}\n\n", missed)
		}
		resuming = true
		for i := range events {
			j, err := json.Marshal(&events[i])
			if err != nil {
				continue // cannot happen: strings and a time
			}
			b = fmt.Appendf(b, "id: %s\ndata: %s\n\n", s.recent.id(events[i].Seq), j)
			// The ring is written in chunks: a client that does not read
			// holds one, not a copy of the whole ring.
			if len(b) >= feedChunk && !flush() {
				return
			}
		}
		if n := len(events); last > after && (n == 0 || events[n-1].Seq != last) {
			// Events filtered out: move the client's Last-Event-ID past
			// them, so that a reconnection is not told it missed them.
			b = fmt.Appendf(b, "id: %s\n\n", s.recent.id(last))
		}
		after = last
		if closing && !more {
			// The last events first (a sharded serve's Deleted for the
			// share it gave up), then why the stream ends.
			b = fmt.Appendf(b, "event: shutdown\ndata: {\"error\":%q}\n\n", errServeStopped.Error())
			flush()
			return
		}
		if expired && !more {
			// The client reconnects and resumes after the last id.
			b = fmt.Appendf(b, "event: reconnect\ndata: {\"error\":%q}\n\n", s.lifetimeMessage())
			flush()
			return
		}
		if len(b) > 0 && !flush() {
			return
		}
		select {
		case <-changed:
		case <-keepalive.C:
			b = append(b, ": keepalive\n\n"...)
			if !flush() {
				return
			}
		case <-lifetime.C:
			expired = true
		case <-s.closing:
			closing = true
		case <-req.Context().Done():
			return
		}
	}
}
