// Package integration proves the informer against a real kube-apiserver
// (tools/localapi, started through internal/testenv). No fakes here.
package integration

import (
	"context"
	"fmt"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// TestMain turns the cache mutation detector on, in "panic" mode, for
// every informer of the tests (unless the environment says otherwise): a
// test, or the library, that changes a cached object kills the run.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(kinformer.EnvMutationDetector); !ok {
		os.Setenv(kinformer.EnvMutationDetector, "panic")
	}
	testenv.Main(m)
}

// compactCache is set while a test body runs as its "compact" variant
// (bothWays): the informers it makes through variant keep their caches as
// bytes (Options.Compact). The tests of this package do not run in
// parallel, so one variable serves.
var compactCache bool

// bothWays runs body twice, as the subtests "plain" and "compact": the
// informer contract holds both ways. In the second, every informer made
// with variant's options has Options.Compact on.
func bothWays(t *testing.T, body func(t *testing.T)) {
	t.Helper()
	t.Run("plain", body)
	t.Run("compact", func(t *testing.T) {
		if compactCache {
			t.Fatal("bothWays inside bothWays")
		}
		compactCache = true
		defer func() { compactCache = false }()
		body(t)
	})
}

// variant returns the options for an informer of the variant running:
// opts itself in a plain one; in a compact one (bothWays), a copy (of
// zero options if nil) with Compact on.
func variant[T kinformer.Object](opts *kinformer.Options[T]) *kinformer.Options[T] {
	if !compactCache {
		return opts
	}
	var o kinformer.Options[T]
	if opts != nil {
		o = *opts
	}
	o.Compact = true
	return &o
}

// inVariant fails the test unless cache is compact in a compact variant,
// and plain otherwise: the variant's options reached the informer.
func inVariant[T kinformer.Object](t testing.TB, cache *kinformer.Cache[T]) {
	t.Helper()
	if cache.Compact() != compactCache {
		t.Fatalf("a cache with Compact() %v in a variant with Compact %v", cache.Compact(), compactCache)
	}
}

// counting counts and timestamps the list and watch requests of the
// configmaps collection that go through the config it wraps, at the HTTP
// level, so that it sees them whether the informer decodes its watches
// itself or through the client. A streaming list (a watch with
// sendInitialEvents) counts as a list. It also keeps the Accept header of
// every watch request, streaming lists included: it says who decodes the
// stream, kinformer (protobuf, "stream=watch") or the client (as the
// client is configured).
type counting struct {
	mu      sync.Mutex // guards the slices
	lists   []metav1.ListOptions
	watches []metav1.ListOptions
	times   []time.Time // of every call
	accepts []string    // of every watch request
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// wrap returns a copy of cfg whose requests c counts.
func (c *counting) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			c.record(r)
			return rt.RoundTrip(r)
		})
	})
	return cfg
}

func (c *counting) record(r *http.Request) {
	if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/configmaps") {
		return
	}
	var o metav1.ListOptions
	q := r.URL.Query()
	if err := metav1.Convert_url_Values_To_v1_ListOptions(&q, &o, nil); err != nil {
		panic(fmt.Sprintf("query %q: %v", r.URL.RawQuery, err))
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if o.Watch {
		c.accepts = append(c.accepts, r.Header.Get("Accept"))
	}
	if o.Watch && !isStream(o) {
		c.watches = append(c.watches, o)
	} else {
		c.lists = append(c.lists, o)
	}
	c.times = append(c.times, time.Now())
}

func isStream(o metav1.ListOptions) bool { return o.SendInitialEvents != nil && *o.SendInitialEvents }

func (c *counting) counts() (lists, watches int) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.lists), len(c.watches)
}

// watchAccepts returns the Accept header of every watch request so far.
func (c *counting) watchAccepts() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]string(nil), c.accepts...)
}

func (c *counting) calls() (lists, watches []metav1.ListOptions, times []time.Time) {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]metav1.ListOptions(nil), c.lists...), append([]metav1.ListOptions(nil), c.watches...), append([]time.Time(nil), c.times...)
}

// recorder collects every event a handler receives, in order.
type recorder[T kinformer.Object] struct {
	mu     sync.Mutex // guards events
	events []kinformer.Event[T]
}

func (r *recorder[T]) handle(e kinformer.Event[T]) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = append(r.events, e)
}

func (r *recorder[T]) all() []kinformer.Event[T] {
	r.mu.Lock()
	defer r.mu.Unlock()
	return append([]kinformer.Event[T](nil), r.events...)
}

func (r *recorder[T]) reset() {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.events = nil
}

// lines renders object events as sorted "TYPE name" strings.
func (r *recorder[T]) lines(types ...kinformer.EventType) []string {
	var out []string
	for _, e := range r.all() {
		for _, t := range types {
			if e.Type == t {
				out = append(out, string(e.Type)+" "+e.Object.GetName())
			}
		}
	}
	sort.Strings(out)
	return out
}

// errs returns the errors of its Error events, in order.
func (r *recorder[T]) errs() []error {
	var out []error
	for _, e := range r.all() {
		if e.Type == kinformer.Error {
			out = append(out, e.Err)
		}
	}
	return out
}

// causes renders object events as "TYPE key cause" strings, in order.
func (r *recorder[T]) causes() []string {
	var out []string
	for _, e := range r.all() {
		if e.Type != kinformer.Error && e.Type != kinformer.Bookmark {
			out = append(out, string(e.Type)+" "+e.Key+" "+e.Cause.String())
		}
	}
	return out
}

func (r *recorder[T]) count(t kinformer.EventType) int {
	n := 0
	for _, e := range r.all() {
		if e.Type == t {
			n++
		}
	}
	return n
}

// callTimeout bounds every API call and every wait for an informer in
// these tests: a stuck server or informer fails the test at once instead of
// hanging it for the whole of go test's -timeout.
const callTimeout = 30 * time.Second

// bounded returns a context that ends after d, or with the test: for a
// test's own API calls and waits.
func bounded(t testing.TB, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(t.Context(), d)
	t.Cleanup(cancel)
	return ctx
}

func eventually(t testing.TB, timeout time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(timeout)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out after %v waiting for %s", timeout, what)
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func clientset(t testing.TB, cfg *rest.Config) *kubernetes.Clientset {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	cfg.QPS, cfg.Burst = 500, 1000
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return c
}

func configMap(ns, name string, labels map[string]string, data string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels},
		Data:       map[string]string{"v": data},
	}
}

func mustCreate(t testing.TB, c kubernetes.Interface, cm *corev1.ConfigMap) *corev1.ConfigMap {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	out, err := c.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("create %s: %v", cm.Name, err)
	}
	return out
}

func mustUpdate(t testing.TB, c kubernetes.Interface, ns, name, data string) *corev1.ConfigMap {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	cm, err := c.CoreV1().ConfigMaps(ns).Get(ctx, name, metav1.GetOptions{})
	if err != nil {
		t.Fatalf("get %s: %v", name, err)
	}
	cm.Data = map[string]string{"v": data}
	out, err := c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
	if err != nil {
		t.Fatalf("update %s: %v", name, err)
	}
	return out
}

func mustDelete(t testing.TB, c kubernetes.Interface, ns, name string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
		t.Fatalf("delete %s: %v", name, err)
	}
}

// serverState lists the namespace's configmaps afresh: name -> resourceVersion.
func serverState(t testing.TB, c kubernetes.Interface, ns string, opts metav1.ListOptions) map[string]string {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	l, err := c.CoreV1().ConfigMaps(ns).List(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	out := map[string]string{}
	for _, o := range l.Items {
		out[o.Name] = o.ResourceVersion
	}
	return out
}

func cacheState[T kinformer.Object](c *kinformer.Cache[T]) map[string]string {
	out := map[string]string{}
	for _, o := range c.List() {
		out[o.GetName()] = o.GetResourceVersion()
	}
	return out
}

func sameState(a, b map[string]string) bool {
	if len(a) != len(b) {
		return false
	}
	for k, v := range a {
		if b[k] != v {
			return false
		}
	}
	return true
}

// fold replays events into name -> resourceVersion and checks each object's
// events are consistent and in the server's order.
func fold[T kinformer.Object](events []kinformer.Event[T]) (map[string]string, error) {
	state := map[string]string{}
	for i, e := range events {
		if e.Type != kinformer.Added && e.Type != kinformer.Modified && e.Type != kinformer.Deleted {
			continue
		}
		name := e.Object.GetName()
		prev, had := state[name]
		switch e.Type {
		case kinformer.Added:
			if had {
				return nil, fmt.Errorf("event %d: ADDED %s twice", i, name)
			}
			state[name] = e.Object.GetResourceVersion()
		case kinformer.Modified:
			if !had || e.Old.GetResourceVersion() != prev || rv(e.Object.GetResourceVersion()) <= rv(prev) {
				return nil, fmt.Errorf("event %d: MODIFIED %s out of order (had=%v prev=%s new=%s)", i, name, had, prev, e.Object.GetResourceVersion())
			}
			state[name] = e.Object.GetResourceVersion()
		case kinformer.Deleted:
			if !had {
				return nil, fmt.Errorf("event %d: DELETED %s never added", i, name)
			}
			delete(state, name)
		}
	}
	return state, nil
}

// rv parses a resourceVersion. They are opaque to clients in general; the
// local API server's (etcd revisions) are integers, which lets tests check
// order.
func rv(s string) int64 {
	n, _ := strconv.ParseInt(s, 10, 64)
	return n
}
