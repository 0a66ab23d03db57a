package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"
	"weak"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/status"
	"github.com/kinformer/kinformer/internal/store"
)

// TestMain turns the cache mutation detector on, in "panic" mode, for
// every informer of the tests (unless the environment says otherwise): a
// test, or the library, that changes a cached object kills the run.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(EnvMutationDetector); !ok {
		os.Setenv(EnvMutationDetector, "panic")
	}
	// KINFORMER_TEST_COMPACT=1 runs every test with Options.Compact (make
	// test does, in a second pass): the contract holds both ways.
	compactAll = os.Getenv("KINFORMER_TEST_COMPACT") == "1"
	goleak.VerifyTestMain(m)
}

type cmEvent = Event[*corev1.ConfigMap]

// recorder collects the events a handler receives.
type recorder struct {
	mu     sync.Mutex // guards events
	events []cmEvent
}

func (r *recorder) handle(e cmEvent) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder) all() []cmEvent {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]cmEvent(nil), r.events...)
}

// lines renders the recorded events as "TYPE key", sorted unless ordered.
func (r *recorder) lines(sorted bool, types ...EventType) []string {
	var out []string
	for _, e := range r.all() {
		if len(types) > 0 && !contains(types, e.Type) {
			continue
		}
		s := string(e.Type)
		if e.Object != nil && e.Type != Bookmark {
			s += " " + MetaNamespaceKey(e.Object)
		}
		out = append(out, s)
	}
	if sorted {
		sort.Strings(out)
	}
	return out
}

func (r *recorder) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}

func contains[E comparable](s []E, v E) bool {
	for _, x := range s {
		if x == v {
			return true
		}
	}
	return false
}

// eventually polls cond until it holds or 10 s pass.
// bounded returns a context that ends with the test or after 30 s, so that
// a wait that never ends fails the test instead of hanging until -timeout.
func bounded(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t testing.TB, what string, cond func() bool) {
	t.Helper()
	eventuallyWithin(t, 10*time.Second, what, cond)
}

// eventuallyWithin is eventually with a wait of its own.
func eventuallyWithin(t testing.TB, wait time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(wait)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(2 * time.Millisecond)
	}
}

// cacheState returns key -> resourceVersion of everything cached.
func cacheState(c *Cache[*corev1.ConfigMap]) map[string]string {
	out := map[string]string{}
	for _, o := range c.List() {
		out[MetaNamespaceKey(o)] = o.ResourceVersion
	}
	return out
}

func equalMaps(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			return false
		}
	}
	return true
}

func diffMaps(a, b map[string]string) string {
	var d []string
	for k, v := range a {
		if w, ok := b[k]; !ok || w != v {
			d = append(d, fmt.Sprintf("%s: %q vs %q", k, v, w))
		}
	}
	for k, w := range b {
		if _, ok := a[k]; !ok {
			d = append(d, fmt.Sprintf("%s: missing vs %q", k, w))
		}
	}
	sort.Strings(d)
	return strings.Join(d, "; ")
}

// fastBackoff keeps unit tests quick; the real policy is tested with
// synctest.
var fastBackoff = Backoff{Initial: time.Millisecond, Max: 5 * time.Millisecond, Factor: 2, Jitter: 0.1, ResetAfter: time.Second}

// startInformer builds an informer over s with the given options, a
// recorder on every event type, starts it, and waits for sync.
func startInformer(t *testing.T, s ListerWatcher[*corev1.ConfigMapList], opts *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], *recorder) {
	t.Helper()
	if opts == nil {
		opts = &Options[*corev1.ConfigMap]{}
	}
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = fastBackoff
	}
	inf := New[*corev1.ConfigMap](s, opts)
	rec := &recorder{}
	inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	// Handlers run asynchronously: let the initial ADDED events arrive so
	// tests can reason about what comes next.
	n := inf.Cache().Len()
	eventually(t, "initial events", func() bool { return len(rec.lines(false, Added)) >= n })
	return inf, rec
}

// newTestWriter returns a writer of c, as the loop has, whose events are
// recorded instead of delivered: events returns (and forgets) them.
func newTestWriter[T Object](c *Cache[T]) (w *writer[T], events func() []Event[T]) {
	w = newWriter(c, status.New(), &dispatcher[T]{}, slog.New(slog.DiscardHandler), compile[T](nil, nil))
	l := newListener(1<<len(eventTypes)-1, func(Event[T]) {}, w.log)
	w.disp.add(l, c, w.status.ResourceVersion, func() bool { return false })
	l.queue = nil // not the replay of what c holds
	l.backlog.Store(0)
	return w, func() []Event[T] {
		l.mu.Lock()
		defer l.mu.Unlock()
		var out []Event[T]
		for _, q := range l.queue {
			out = append(out, q.e)
		}
		l.backlog.Add(-int64(len(l.queue)))
		l.queue = nil
		return out
	}
}

// plain is obj as a plain (not compact) cache holds it.
func plain[T Object](obj T) store.Ref[T] { return store.ObjectRef(obj) }

// plainAll is items as a plain cache holds them.
func plainAll[T Object](items map[string]T) *store.Items[T] {
	out := &store.Items[T]{}
	for k, obj := range items {
		out.Set(k, plain(obj))
	}
	return out
}

// plainOnly skips a test of how a plain cache holds its objects (shared
// instances and maps, the mutation detector) when every informer is
// compact (KINFORMER_TEST_COMPACT): a compact cache holds none.
func plainOnly(t testing.TB) {
	t.Helper()
	if compactAll {
		t.Skip("a property of the plain cache's objects; the cache is compact")
	}
}

// arrivalOf is obj as the decoder hands it to the writer, decoded.
func arrivalOf[T Object](obj T) store.Arrival[T] { return store.Arrival[T]{Obj: obj} }

// eventuallyCollected waits until the garbage collector has freed what
// each of ptrs points to: nothing keeps it alive.
func eventuallyCollected[T any](t testing.TB, what string, ptrs []weak.Pointer[T]) {
	t.Helper()
	eventually(t, what, func() bool {
		runtime.GC()
		for _, w := range ptrs {
			if w.Value() != nil {
				return false
			}
		}
		return true
	})
}
