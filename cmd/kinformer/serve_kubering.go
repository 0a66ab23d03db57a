package main

import (
	"bytes"
	"sort"
	"strconv"
	"sync"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer"
)

// kubeRing is one served resource's recent events, kept for --kube-api's
// watches from a resourceVersion, as the API server's watch cache keeps
// them: a watch from a version the ring still covers is sent what
// happened after it; one from an older version is told 410 Gone (its
// client lists again). The ring is bounded by the bytes of its events'
// JSON: an event past the bound is dropped, and the versions before it
// are no longer covered. Watchers read it where they are (a cursor): an
// event is encoded once, however many watch it, and a watcher that falls
// behind the ring's end holds nothing; its watch ends, and its client
// watches again from what it had.
type kubeRing struct {
	maxBytes int

	mu sync.Mutex
	// known: base is set. Until the resource has synced, and for a view
	// (whose namespaces each have their own version), no version is
	// covered: watchers from a version are refused, those from now on
	// are sent every event.
	known bool
	// base: the ring holds every event after this resourceVersion.
	base uint64
	// last: the newest resourceVersion the ring has seen (an event's or
	// a bookmark's): every event up to it is in the ring or before base.
	last   uint64
	events []kubeEvent // oldest first
	bytes  int
	first  uint64        // the number of events[0]; numbers grow by one an event
	wake   chan struct{} // closed (and replaced) when an event is added
	reset  chan struct{} // closed (and replaced) when the history broke: watchers end
}

// kubeEvent is an event of the ring: the object's new state (its last,
// for DELETED) and, for MODIFIED, the one before it, which watches with
// a selector need (an object that leaves a selector is DELETED for it).
// The objects are the cache's (or, for a compact cache, the event's
// decoded copy): never modified.
type kubeEvent struct {
	rv    uint64
	typ   kinformer.EventType
	obj   *unstructured.Unstructured
	old   *unstructured.Unstructured
	json  []byte        // obj's JSON
	proto *protoEncoded // obj's protobuf, made for the first protobuf watch that sends it
	size  int           // what the ring counts for it (kubeEventSize)
}

// kubeEventOverhead is what the ring counts for an event beside its
// objects: the entry and its slice headers.
const kubeEventOverhead = 128

// kubeEventSize is what the ring counts for an event whose object's JSON
// is n bytes: the JSON, its protobuf if a watch asks for it (counted as
// the JSON again: it is smaller), and the object decoded (its maps and
// strings take about twice the JSON), and as much again for the state
// before it, if the event keeps it. The objects may be the cache's own,
// shared, but they outlive their place in it while the ring holds them.
func kubeEventSize(n int, old bool) int {
	if old {
		return 6*n + kubeEventOverhead
	}
	return 4*n + kubeEventOverhead
}

func newKubeRing(maxBytes int) *kubeRing {
	return &kubeRing{maxBytes: maxBytes, wake: make(chan struct{}), reset: make(chan struct{})}
}

// parseRV reads a resourceVersion the way the API server's storage
// writes them: a decimal number. ok is false for anything else.
func parseRV(s string) (uint64, bool) {
	if s == "" {
		return 0, false
	}
	n, err := strconv.ParseUint(s, 10, 64)
	return n, err == nil
}

// start sets the version the ring covers from, once the resource has
// synced at rv (the informer's resourceVersion, read after it synced).
func (k *kubeRing) start(rv string) {
	n, ok := parseRV(rv)
	if !ok {
		return // a view, or a server whose versions are not numbers
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.known {
		// The events recorded so far are at rv or before.
		k.known, k.base, k.last = true, n, n
	}
}

// covered says whether the ring covers versions: watches may resume
// from one, and bookmarks say where they are.
func (k *kubeRing) covered() bool {
	k.mu.Lock()
	defer k.mu.Unlock()
	return k.known
}

// record takes one of the resource's events, as its handler is given
// them.
func (k *kubeRing) record(ev kinformer.Event[*unstructured.Unstructured]) {
	rv, numeric := parseRV(ev.ResourceVersion)
	switch {
	case ev.Type == kinformer.Error && ev.Key != "":
		// An object's event that could not be given (a compact cache's
		// bytes that did not decode): the cache changed, the ring cannot
		// say how.
		k.mu.Lock()
		defer k.mu.Unlock()
		k.breakLocked(0, false)
		return
	case ev.Type == kinformer.Error:
		return
	case ev.Cause == kinformer.CauseList || ev.Cause == kinformer.CauseRestore:
		return // the state it starts from (start), not history
	case ev.Cause == kinformer.CauseReplay || ev.Cause == kinformer.CauseResend:
		return // this registration's own, not the resource's
	case ev.Type == kinformer.Bookmark:
		if numeric {
			k.mu.Lock()
			k.last = max(k.last, rv)
			k.mu.Unlock()
		}
		return
	case ev.Cause == kinformer.CauseRelist || ev.Cause == kinformer.CauseReshard || ev.Cause == kinformer.CauseGone:
		// A re-list's differences, a share or a namespace gained or
		// lost: the cache jumped, and what happened in between is not
		// known event by event. Watchers end, and the ring covers only
		// what comes after.
		k.mu.Lock()
		defer k.mu.Unlock()
		k.breakLocked(rv, numeric)
		return
	}
	// Anything else is the next change of what is served: a watch event,
	// a Transform's drop, a namespace joining or leaving a view.
	b, err := objectJSON(ev.Object)
	if err != nil {
		// Never: it came as JSON. But a change left out is a gap.
		k.mu.Lock()
		defer k.mu.Unlock()
		k.breakLocked(0, false)
		return
	}
	e := kubeEvent{rv: rv, typ: ev.Type, obj: ev.Object, json: b, proto: new(protoEncoded), size: kubeEventSize(len(b), false)}
	if ev.Type == kinformer.Modified {
		e.old, e.size = ev.Old, kubeEventSize(len(b), true)
	}
	k.mu.Lock()
	defer k.mu.Unlock()
	// An event at or before base is kept too: a watcher that began
	// before start may still need it (its floor is below base).
	k.last = max(k.last, rv)
	k.events = append(k.events, e)
	k.bytes += e.size
	for len(k.events) > 1 && k.bytes > k.maxBytes {
		k.base = max(k.base, k.events[0].rv)
		k.bytes -= k.events[0].size
		k.events[0] = kubeEvent{}
		k.events = k.events[1:]
		k.first++
	}
	close(k.wake)
	k.wake = make(chan struct{})
}

// breakLocked drops the history: the ring covers from rv on, or nothing
// (until start) if rv is not a version.
func (k *kubeRing) breakLocked(rv uint64, numeric bool) {
	k.first += uint64(len(k.events))
	k.events, k.bytes = nil, 0
	k.known = numeric && k.known
	if numeric {
		// rv, even if lower: a cache that re-listed another history
		// (an etcd restored from a backup) starts over from it.
		k.base, k.last = rv, rv
	}
	close(k.reset)
	k.reset = make(chan struct{})
	close(k.wake)
	k.wake = make(chan struct{})
}

// kubeCursor is where a watcher reads the ring.
type kubeCursor struct {
	next  uint64        // the number of the next event to read
	reset chan struct{} // the ring's when the watcher started
}

// from returns a cursor at the first event after rv, or ok false if the
// ring does not cover rv (410 Gone for the watcher), with the oldest
// version it covers (0: none).
func (k *kubeRing) from(rv uint64) (c kubeCursor, ok bool, oldest uint64) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if !k.known || rv < k.base {
		return c, false, k.base
	}
	i := sort.Search(len(k.events), func(i int) bool { return k.events[i].rv > rv })
	return kubeCursor{next: k.first + uint64(i), reset: k.reset}, true, k.base
}

// now returns a cursor after every event recorded so far.
func (k *kubeRing) now() kubeCursor {
	k.mu.Lock()
	defer k.mu.Unlock()
	return kubeCursor{next: k.first + uint64(len(k.events)), reset: k.reset}
}

// read appends to buf the events at c and after, at most limit, and
// moves c past them. The events' objects and JSON are shared, never
// modified. behind: events c had not read were dropped, or the history
// broke; the watcher must end. wake is closed at the next event; last is
// the newest version the ring has seen.
func (k *kubeRing) read(c *kubeCursor, buf []kubeEvent, limit int) (evs []kubeEvent, wake <-chan struct{}, last uint64, behind bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	select {
	case <-c.reset:
		return buf, nil, 0, true
	default:
	}
	if c.next < k.first {
		return buf, nil, 0, true
	}
	i := int(c.next - k.first)
	j := min(len(k.events), i+limit)
	c.next += uint64(j - i)
	return append(buf, k.events[i:j]...), k.wake, k.last, false
}

// objectJSON is o's JSON on one line: unstructured's encoder ends it with
// a newline, which would split a watch event in two for a client that
// reads the stream line by line (the JavaScript client does).
func objectJSON(o *unstructured.Unstructured) ([]byte, error) {
	b, err := o.MarshalJSON()
	return bytes.TrimRight(b, "\n"), err
}
