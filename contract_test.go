package kinformer

// Tests of the contract the package documentation promises (informer.go's
// Informer comment, Options, Backoff), each written so that it fails if
// the promise is broken: a check that cannot fail proves nothing. They use
// only the public API, the scripted fakeServer, and helpers of their own.

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/kinformer/kinformer/internal/protowatch"
	"github.com/kinformer/kinformer/internal/wiretest"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// contractTimeout bounds every wait of these tests: a broken informer
// fails the test instead of hanging it until go test's -timeout.
const contractTimeout = 10 * time.Second

// contractStart is startInformer with a bounded WaitForSync.
func contractStart(t *testing.T, lw ListerWatcher[*corev1.ConfigMapList], opts *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], *recorder) {
	t.Helper()
	if opts == nil {
		opts = &Options[*corev1.ConfigMap]{}
	}
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = fastBackoff
	}
	inf := New[*corev1.ConfigMap](lw, opts)
	rec := &recorder{}
	inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	n := inf.Cache().Len()
	eventually(t, "initial events", func() bool { return len(rec.lines(false, Added)) >= n })
	return inf, rec
}

// contractSync waits for inf's sync, at most contractTimeout.
func contractSync(t *testing.T, inf *Informer[*corev1.ConfigMap]) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), contractTimeout)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
}

// contractRecv waits for ch to be closed (or to deliver), at most
// contractTimeout.
func contractRecv[E any](t *testing.T, what string, ch <-chan E) E {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(contractTimeout):
		t.Fatalf("timed out waiting for %s", what)
		panic("unreachable")
	}
}

// contractReleaser is a channel a blocked handler waits on, closed once,
// also by the test's cleanup so that a failing test never leaves a handler
// (and Stop) blocked.
type contractReleaser struct {
	ch   chan struct{}
	once sync.Once
}

func newContractReleaser(t *testing.T) *contractReleaser {
	r := &contractReleaser{ch: make(chan struct{})}
	t.Cleanup(r.release)
	return r
}

func (r *contractReleaser) release() { r.once.Do(func() { close(r.ch) }) }

// Events a handler had queued but not received when the informer stopped
// stay queued, and are delivered first, in order, when it starts again:
// before the events that arrived while the handler was busy, and before
// those of the new run.
func TestContractEventsQueuedAtStopComeFirstAfterRestart(t *testing.T) {
	s := newFakeServer()
	for _, n := range []string{"a", "b", "c"} {
		s.put(cm("ns", n))
	}
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	ran := make(chan error, 1)
	go func() { ran <- inf.Run(ctx) }()
	contractSync(t, inf)

	// A handler added now is given the three cached objects as one batch,
	// and is kept busy with the first of them.
	entered := make(chan struct{})
	release := newContractReleaser(t)
	var first atomic.Bool
	rec := &recorder{}
	reg := inf.AddHandler(func(e cmEvent) {
		rec.handle(e)
		if first.CompareAndSwap(false, true) {
			close(entered)
			<-release.ch
		}
	})
	contractRecv(t, "the first replayed event", entered)
	// Newer events queue up behind the two replayed ones not yet handled.
	s.put(cm("ns", "b", "v", "2"))
	s.put(cm("ns", "d"))
	eventually(t, "5 events pending", func() bool { return reg.Pending() == 5 })

	// The run ends while the handler is busy: the rest stays queued.
	cancel()
	release.release()
	if err := contractRecv(t, "Run to return", ran); err != nil {
		t.Fatalf("Run = %v", err)
	}
	if got := rec.lines(false); len(got) != 1 {
		t.Fatalf("delivered after the run ended: %v", got)
	}
	if n := reg.Pending(); n != 4 {
		t.Fatalf("Pending = %d after Stop, want the 4 undelivered events", n)
	}

	s.put(cm("ns", "c", "v", "2")) // while stopped: arrives after a restart
	inf.Start()
	t.Cleanup(inf.Stop)
	eventually(t, "6 events", func() bool { return len(rec.lines(false, Added, Modified, Deleted)) == 6 })
	got := rec.lines(false, Added, Modified, Deleted)
	replayed := slices.Sorted(slices.Values(got[:3]))
	if strings.Join(replayed, ",") != "ADDED ns/a,ADDED ns/b,ADDED ns/c" ||
		strings.Join(got[3:], ",") != "MODIFIED ns/b,ADDED ns/d,MODIFIED ns/c" {
		t.Fatalf("events = %v; want the three replayed ADDED, then MODIFIED ns/b, ADDED ns/d, MODIFIED ns/c", got)
	}
	if _, err := fold(rec.all()); err != nil {
		t.Fatalf("events out of order: %v", err)
	}
	if n := reg.Pending(); n != 0 {
		t.Fatalf("Pending = %d after delivery", n)
	}
}

// Options.Transform runs after managedFields are stripped: it never sees
// them, neither on a list (paged or streaming) nor on a watch event, unless
// KeepManagedFields keeps them, in which case it always does.
func TestContractTransformNeverSeesManagedFields(t *testing.T) {
	withMF := func(name string, kv ...string) *corev1.ConfigMap {
		o := cm("ns", name, kv...)
		o.ManagedFields = []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}}
		return o
	}
	for _, keep := range []bool{false, true} {
		for _, streaming := range []bool{false, true} {
			t.Run(fmt.Sprintf("keep=%v,streaming=%v", keep, streaming), func(t *testing.T) {
				s := newFakeServer()
				s.streaming = streaming
				s.put(withMF("listed"))
				var seen, withFields atomic.Int32
				inf, _ := contractStart(t, s, &Options[*corev1.ConfigMap]{
					KeepManagedFields: keep,
					Transform: func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) {
						seen.Add(1)
						if o.ManagedFields != nil {
							withFields.Add(1)
						}
						return o, nil
					},
				})
				s.put(withMF("watched"))          // ADDED
				s.put(withMF("listed", "v", "2")) // MODIFIED
				eventually(t, "both watch events", func() bool {
					o, _ := inf.Cache().GetByKey("ns/listed")
					return inf.Cache().Len() == 2 && o.Labels["v"] == "2"
				})
				n, mf := seen.Load(), withFields.Load()
				if n != 3 {
					t.Fatalf("Transform ran %d times, want 3 (one list, two watch events)", n)
				}
				if !keep && mf != 0 {
					t.Fatalf("Transform saw managedFields %d times of %d", mf, n)
				}
				if keep && mf != n {
					t.Fatalf("KeepManagedFields: Transform saw managedFields only %d times of %d", mf, n)
				}
			})
		}
	}
}

// The default server-side watch timeout is random in [5 min, 10 min), for
// every watch: the streaming list's, the first plain watch's, and those
// that resume it.
func TestContractDefaultWatchTimeout(t *testing.T) {
	s := newFakeServer()
	s.streaming = true
	s.put(cm("ns", "a"))
	contractStart(t, s, nil)
	for i := range 8 {
		eventually(t, "watch open", func() bool { _, w := s.counts(); return w == i+1 && s.openWatches() == 1 })
		s.closeWatches()
	}
	eventually(t, "the 9th watch", func() bool { _, w := s.counts(); return w == 9 })
	_, watches := s.calls()
	s.mu.Lock()
	all := append(slices.Clone(s.streams), watches...)
	s.mu.Unlock()
	seen := map[int64]bool{}
	for i, o := range all {
		if o.TimeoutSeconds == nil || *o.TimeoutSeconds < 300 || *o.TimeoutSeconds >= 600 {
			t.Fatalf("watch %d asked for timeoutSeconds %s, want in [300, 600)", i, contractSeconds(o.TimeoutSeconds))
		}
		seen[*o.TimeoutSeconds] = true
	}
	if len(seen) == 1 {
		t.Fatalf("all %d watches asked for the same timeout: not randomised", len(all))
	}
}

func contractSeconds(p *int64) string {
	if p == nil {
		return "none"
	}
	return fmt.Sprint(*p)
}

// contractLogRecords is a slog.Handler that keeps every record.
type contractLogRecords struct {
	mu      sync.Mutex // guards records
	records []slog.Record
}

func (h *contractLogRecords) Enabled(context.Context, slog.Level) bool { return true }
func (h *contractLogRecords) WithAttrs([]slog.Attr) slog.Handler       { return h }
func (h *contractLogRecords) WithGroup(string) slog.Handler            { return h }
func (h *contractLogRecords) Handle(_ context.Context, r slog.Record) error {
	h.mu.Lock()
	defer h.mu.Unlock()
	h.records = append(h.records, r.Clone())
	return nil
}

// find returns the records whose message contains msg: their level and
// attributes as strings, under the key "level" and their own keys.
func (h *contractLogRecords) find(msg string) []map[string]string {
	h.mu.Lock()
	defer h.mu.Unlock()
	var out []map[string]string
	for _, r := range h.records {
		if !strings.Contains(r.Message, msg) {
			continue
		}
		attrs := map[string]string{"level": r.Level.String()}
		r.Attrs(func(a slog.Attr) bool { attrs[a.Key] = a.Value.String(); return true })
		out = append(out, attrs)
	}
	return out
}

// A panicking handler is logged at error level, with the event type and the
// panic's value, and the informer goes on.
func TestContractHandlerPanicIsLogged(t *testing.T) {
	logs := &contractLogRecords{}
	s := newFakeServer()
	inf, rec := contractStart(t, s, &Options[*corev1.ConfigMap]{Logger: slog.New(logs)})
	if _, err := inf.AddEventHandler(Modified, func(e cmEvent) { panic("handler bug on " + e.Object.Name) }); err != nil {
		t.Fatal(err)
	}
	s.put(cm("ns", "a"))
	s.put(cm("ns", "a", "v", "2"))
	eventually(t, "a logged panic", func() bool { return len(logs.find("panic")) > 0 })
	got := logs.find("panic")
	if len(got) != 1 || got[0]["level"] != "ERROR" || got[0]["type"] != string(Modified) || !strings.Contains(got[0]["panic"], "handler bug on a") {
		var short []string
		for _, r := range got {
			short = append(short, fmt.Sprintf("level=%s type=%q panic=%q", r["level"], r["type"], r["panic"]))
		}
		t.Fatalf("panic logged as %v; want one ERROR record with type=MODIFIED and the panic's value", short)
	}
	s.put(cm("ns", "after"))
	eventually(t, "the next event", func() bool { return slices.Contains(rec.lines(false, Added), "ADDED ns/after") })
}

// The cache is updated before an event is queued: a handler finds the
// object of an Added or Modified event in the cache (at least as new), and
// does not find the object of a Deleted one. Changes are made one at a time
// here, so the cache cannot be ahead of the event for another reason.
//
// Handlers run on their own goroutines, so the order is also checked
// without a race to win: an IndexFunc runs as the cache is updated, and at
// that moment the event must not be queued yet. A handler kept busy makes
// Registration.Pending count exactly the events queued.
func TestContractCacheUpdatedBeforeEventIsQueued(t *testing.T) {
	s := newFakeServer()
	var busy atomic.Pointer[Registration]
	var indexedAt []int // Pending of busy when the probe object was indexed
	var mu sync.Mutex   // guards indexedAt
	probe := func(o *corev1.ConfigMap) []string {
		if reg := busy.Load(); reg != nil && o.Name == "probe" {
			mu.Lock()
			indexedAt = append(indexedAt, reg.Pending())
			mu.Unlock()
		}
		return nil
	}
	inf, _ := contractStart(t, s, &Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"probe": probe}})
	release := newContractReleaser(t) // released before inf.Stop, which waits for the busy handler
	busy.Store(inf.AddHandler(func(cmEvent) { <-release.ch }))

	type seen struct {
		e     cmEvent
		found bool
		rv    string
	}
	got := make(chan seen, 3)
	inf.AddHandler(func(e cmEvent) {
		if e.Type != Added && e.Type != Modified && e.Type != Deleted {
			return
		}
		o, ok := inf.Cache().GetByKey(MetaNamespaceKey(e.Object))
		var rv string
		if ok {
			rv = o.ResourceVersion
		}
		got <- seen{e, ok, rv}
	})
	steps := []struct {
		do    func()
		typ   EventType
		found bool
	}{
		{func() { s.put(cm("ns", "probe")) }, Added, true},
		{func() { s.put(cm("ns", "probe", "v", "2")) }, Modified, true},
		{func() { s.del("ns", "probe") }, Deleted, false},
	}
	for i, st := range steps {
		mu.Lock()
		before := len(indexedAt)
		mu.Unlock()
		st.do()
		g := contractRecv(t, string(st.typ), got)
		if g.e.Type != st.typ {
			t.Fatalf("step %d: got %s, want %s", i, g.e.Type, st.typ)
		}
		if g.found != st.found || (g.found && g.rv != g.e.Object.ResourceVersion) {
			t.Fatalf("%s handler: in the cache %v at %q, want %v at %q", st.typ, g.found, g.rv, st.found, g.e.Object.ResourceVersion)
		}
		// The busy handler holds its first event and has i queued behind
		// it before this one; while the cache was updated, no more.
		mu.Lock()
		at := slices.Clone(indexedAt[before:])
		mu.Unlock()
		if len(at) == 0 && !(compactAll && st.typ == Deleted) { // a compact cache keeps index values: none computed for a deletion
			t.Fatalf("step %d: the index function never ran", i)
		}
		for _, p := range at {
			if p != i {
				t.Fatalf("%s: %d events pending while the cache was updated, want %d: the event was queued first", st.typ, p, i)
			}
		}
	}
}

// --- a protobuf watch server, for the direct decoder's DELETED and ERROR.

const contractProtobufStream = protowatch.MediaType

// contractProtoServer serves discovery for configmaps and, for each watch of
// ns's configmaps, the next script (the last one repeats), then holds the
// stream open until the client goes.
type contractProtoServer struct {
	mu         sync.Mutex // guards the fields below
	scripts    [][]byte
	watches    []*http.Request
	unexpected []string
}

func (s *contractProtoServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	switch {
	case r.URL.Path == "/api/v1":
		w.Header().Set("Content-Type", "application/json")
		json.NewEncoder(w).Encode(metav1.APIResourceList{GroupVersion: "v1", APIResources: []metav1.APIResource{
			{Name: "configmaps", Kind: "ConfigMap", Namespaced: true, Verbs: []string{"list", "watch"}},
		}})
	case r.URL.Path == "/api/v1/namespaces/ns/configmaps" && r.URL.Query().Get("watch") == "true":
		s.mu.Lock()
		s.watches = append(s.watches, r)
		script := s.scripts[0]
		if len(s.scripts) > 1 {
			s.scripts = s.scripts[1:]
		}
		s.mu.Unlock()
		w.Header().Set("Content-Type", contractProtobufStream)
		w.WriteHeader(http.StatusOK)
		w.Write(script)
		w.(http.Flusher).Flush()
		<-r.Context().Done()
	case r.URL.Path == "/api/v1/namespaces/kube-system":
		// Which cluster this is (the informer's binding).
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"Namespace","apiVersion":"v1","metadata":{"name":"kube-system","uid":"contract-cluster"}}`))
	default:
		s.mu.Lock()
		s.unexpected = append(s.unexpected, r.Method+" "+r.URL.String())
		s.mu.Unlock()
		http.NotFound(w, r)
	}
}

func (s *contractProtoServer) seen() (watches []*http.Request, unexpected []string) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return slices.Clone(s.watches), slices.Clone(s.unexpected)
}

// The direct protobuf decoder reads DELETED as a deletion, and an ERROR
// event's Status (410 Gone: the history is compacted) as the server's
// error: the informer reports ErrExpired and re-lists. Only an unchanged
// object comes back from that re-list, so it fires nothing.
func TestContractDirectDecoderDeletedAndErrorFrames(t *testing.T) {
	obj := func(name, rv, v string) *corev1.ConfigMap {
		o := cm("ns", name)
		o.ResourceVersion, o.Data["v"] = rv, v
		return o
	}
	end := func(rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	}
	gone := apierrors.NewResourceExpired("too old resource version: 10 (12)").ErrStatus
	script := func(frames ...[]byte) []byte { return bytes.Join(frames, nil) }
	srv := &contractProtoServer{scripts: [][]byte{
		// The streaming list.
		script(wiretest.Event(t, "ADDED", obj("a", "5", "1")), wiretest.Event(t, "ADDED", obj("b", "6", "1")), wiretest.Event(t, "BOOKMARK", end("10"))),
		// The watch from 10: a change, a deletion, then 410.
		script(wiretest.Event(t, "MODIFIED", obj("a", "11", "2")), wiretest.Event(t, "DELETED", obj("b", "12", "1")), wiretest.Event(t, "ERROR", &gone)),
		// The re-list.
		script(wiretest.Event(t, "ADDED", obj("a", "11", "2")), wiretest.Event(t, "BOOKMARK", end("13"))),
		{}, // quiet watches
	}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	inf, rec := contractStart(t, cs.CoreV1().ConfigMaps("ns"), nil)
	eventually(t, "an error event", func() bool { return len(rec.lines(false, Error)) > 0 })
	for _, e := range rec.all() {
		if e.Type == Error && (!errors.Is(e.Err, ErrExpired) || !apierrors.IsResourceExpired(e.Err)) {
			t.Fatalf("ERROR event %v: want ErrExpired wrapping the server's 410", e.Err)
		}
	}
	eventually(t, "the watch after the re-list", func() bool { w, _ := srv.seen(); return len(w) >= 4 })

	watches, unexpected := srv.seen()
	if len(unexpected) > 0 {
		t.Fatalf("requests besides discovery and watches: %v", unexpected)
	}
	for i, r := range watches[:4] {
		q := r.URL.Query()
		stream := q.Get("sendInitialEvents") == "true"
		if r.Header.Get("Accept") != contractProtobufStream || stream != (i%2 == 0) ||
			(i == 1 && q.Get("resourceVersion") != "10") || (i == 3 && q.Get("resourceVersion") != "13") {
			t.Fatalf("watch %d: %s, Accept %q; want streaming list, watch from 10, streaming list, watch from 13, all in protobuf", i, r.URL.RawQuery, r.Header.Get("Accept"))
		}
	}
	if got := cacheState(inf.Cache()); !equalMaps(got, map[string]string{"ns/a": "11"}) {
		t.Fatalf("cache %v, want only ns/a at 11", got)
	}
	var got []string
	for _, e := range rec.all() {
		switch e.Type {
		case Bookmark:
		case Error:
			got = append(got, "ERROR")
		default:
			got = append(got, fmt.Sprintf("%s %s@%s", e.Type, e.Object.Name, e.Object.ResourceVersion))
		}
	}
	slices.Sort(got[:2])
	if want := "ADDED a@5,ADDED b@6,MODIFIED a@11,DELETED b@12,ERROR"; strings.Join(got, ",") != want {
		t.Fatalf("events %s, want %s", strings.Join(got, ","), want)
	}
}
