package main

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer"
)

// eventsServer serves one resource, configmaps, whose events publish
// makes (a Modified of ConfigMap ns/name), until the test ends.
func eventsServer(t *testing.T) (r *served, hs *httptest.Server, publish func(name string)) {
	t.Helper()
	s := mustNewServer(t, 16, 16)
	r = s.addSource("configmaps", resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}, "",
		&packedSource{objs: map[string]*unstructured.Unstructured{}})
	hs = httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	publish = func(name string) {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
		o.SetNamespace("ns")
		o.SetName(name)
		r.hub.publish(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Modified, Object: o})
	}
	return r, hs, publish
}

// An /events client that comes back (EventSource sends the id of the
// last event it had as Last-Event-ID) is told how many events it missed
// while away, or that they are unknown (an id of another process): a
// forced reconnect (overflow, the stream's lifetime) lost them silently.
func TestServeEventsTellWhatWasMissed(t *testing.T) {
	r, hs, publish := eventsServer(t)
	type frame struct{ event, id, data string }
	// open subscribes with lastID, and returns a reader of its frames.
	open := func(lastID string) func() frame {
		ctx, cancel := context.WithCancel(context.Background())
		t.Cleanup(cancel)
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events?resource=configmaps", nil)
		if lastID != "" {
			req.Header.Set("Last-Event-ID", lastID)
		}
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { resp.Body.Close() })
		lines := make(chan string, 64)
		go func() {
			defer close(lines)
			sc := bufio.NewScanner(resp.Body)
			for sc.Scan() {
				lines <- sc.Text()
			}
		}()
		return func() frame {
			t.Helper()
			var f frame
			for {
				select {
				case l, ok := <-lines:
					if !ok {
						t.Fatal("the stream ended")
					}
					switch {
					case l == "" && f.data != "":
						return f
					case strings.HasPrefix(l, "event: "):
						f.event = strings.TrimPrefix(l, "event: ")
					case strings.HasPrefix(l, "id: "):
						f.id = strings.TrimPrefix(l, "id: ")
					case strings.HasPrefix(l, "data: "):
						f.data = strings.TrimPrefix(l, "data: ")
					}
				case <-time.After(lineTimeout):
					t.Fatalf("nothing for %v", lineTimeout)
				}
			}
		}
	}
	waitClients := func(n int) {
		t.Helper()
		waitFor(t, "clients subscribed", 10*time.Second, func() bool { return r.hub.len() == n })
	}
	name := func(f frame) string {
		var ev struct{ Key string }
		if err := json.Unmarshal([]byte(f.data), &ev); err != nil {
			t.Fatalf("%q: %v", f.data, err)
		}
		return strings.TrimPrefix(ev.Key, "ns/")
	}

	first := open("")
	waitClients(1)
	publish("a")
	publish("b")
	fa, fb := first(), first()
	if name(fa) != "a" || name(fb) != "b" || fa.id == "" || fb.id == "" || fa.id == fb.id || fa.event != "" {
		t.Fatalf("events: %+v %+v; want a and b, each with its own id", fa, fb)
	}
	publish("c") // the client is away from here on
	publish("d")
	publish("e")

	back := open(fb.id)
	waitClients(2)
	m := back()
	var missed struct {
		Missed int
		Error  string
	}
	if err := json.Unmarshal([]byte(m.data), &missed); err != nil || m.event != "missed" || missed.Missed != 3 || !strings.Contains(missed.Error, "re-read /objects") {
		t.Fatalf("back after b: %+v (%v); want event missed, 3", m, err)
	}
	publish("f")
	if f := back(); name(f) != "f" || f.event != "" {
		t.Fatalf("then: %+v, want f", f)
	}

	// Up to date: told nothing.
	current := first()
	for name(current) != "f" {
		current = first()
	}
	upToDate := open(current.id)
	waitClients(3)
	publish("g")
	if f := upToDate(); name(f) != "g" || f.event != "" {
		t.Fatalf("back up to date: %+v, want g and no missed", f)
	}
	// A client that had no event yet resumes from its subscription's id,
	// and a bookmark is not counted as missed.
	quiet := open("")
	waitClients(4)
	r.hub.publish(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Bookmark, Object: &unstructured.Unstructured{Object: map[string]any{}}})
	publish("h")
	publish("i")
	if f := quiet(); f.event != "" || f.id == "" || f.data == "" {
		t.Fatalf("quiet client: %+v", f)
	}
	subID := subscribedID(t, hs.URL)
	waitClients(5)
	publish("j")
	r.hub.publish(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Bookmark, Object: &unstructured.Unstructured{Object: map[string]any{}}})
	late := open(subID)
	waitClients(6)
	if f := late(); f.event != "missed" || !strings.Contains(f.data, `"missed":1,`) {
		t.Fatalf("back with its subscription's id after j and a bookmark: %+v, want missed 1", f)
	}

	// Another process's id: unknown.
	other := open("0abc-5")
	waitClients(7)
	if f := other(); f.event != "missed" || !strings.Contains(f.data, `"missed":-1`) || !strings.Contains(f.data, "not of this serve process") {
		t.Fatalf("another process's id: %+v, want missed -1", f)
	}
}

// subscribedID subscribes to /events and returns the id of its first
// block (the subscription's), leaving the stream open until the test ends.
func subscribedID(t *testing.T, base string) string {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+"/events?resource=configmaps", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	br := bufio.NewReader(resp.Body)
	for {
		l, err := br.ReadString('\n')
		if err != nil {
			t.Fatalf("subscription block: %v", err)
		}
		if id, ok := strings.CutPrefix(strings.TrimSuffix(l, "\n"), "id: "); ok {
			return id
		}
		if l == "\n" {
			t.Fatal("subscription block without an id")
		}
	}
}

// A Last-Event-ID of this process's epoch but beyond the last event
// published (forged, or another hub's that happens to share the epoch) is
// none this hub gave: the client is told its events are unknown (-1), not
// that it missed 2^63-1 of them (h.seq-seq wrapping past zero).
func TestServeEventsIDBeyondTheLast(t *testing.T) {
	r, hs, publish := eventsServer(t)
	for _, name := range []string{"a", "b"} {
		publish(name)
	}
	// The hub itself: 2 events published, an id of the 3rd and of the
	// largest seq.
	for _, seq := range []uint64{3, 1 << 63, ^uint64(0)} {
		c, cur, missed := r.hub.subscribeAfter(r.hub.id(seq))
		r.hub.unsubscribe(c)
		if cur != 2 || missed != -1 {
			t.Errorf("subscribeAfter(id %d) after 2 events: cur %d, missed %d; want 2, -1 (unknown)", seq, cur, missed)
		}
	}
	// And on the wire.
	ctx, cancel := context.WithTimeout(context.Background(), lineTimeout)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events?resource=configmaps", nil)
	req.Header.Set("Last-Event-ID", r.hub.id(3))
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	var missedEvent bool
	for sc.Scan() {
		l := sc.Text()
		if l == "event: missed" {
			missedEvent = true
			continue
		}
		if missedEvent && strings.HasPrefix(l, "data: ") {
			if !strings.Contains(l, `"missed":-1,`) {
				t.Fatalf("Last-Event-ID beyond the last event: %s; want missed -1", l)
			}
			return
		}
	}
	t.Fatalf("no event: missed (%v)", sc.Err())
}
