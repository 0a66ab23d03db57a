package mutation

import (
	"context"
	"errors"
	"iter"
	"log/slog"
	"maps"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

var errMutated = errors.New("cached object modified in place")

func newTestDetector(t *testing.T) (*Detector[*corev1.ConfigMap], *[]error) {
	t.Helper()
	var mu sync.Mutex
	var reports []error
	d := New[*corev1.ConfigMap](Config{Log: slog.New(slog.DiscardHandler), Mutated: errMutated})
	d.Tick = make(chan time.Time) // never: the test calls Check
	d.Fence = func() {}
	d.Emit = func(err error) {
		mu.Lock()
		defer mu.Unlock()
		reports = append(reports, err)
	}
	return d, &reports
}

func cm(name, label string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name, Labels: map[string]string{"app": label}}}
}

// Swap retires what a re-list replaced or dropped (comparing it with its
// copy first) and tracks what it brought; an instance the re-list kept
// stays watched, and is still checked.
func TestSwap(t *testing.T) {
	d, reports := newTestDetector(t)
	a, b := cm("a", "web"), cm("b", "web")
	noReport := func(err error) { t.Errorf("reported: %v", err) }
	d.Put(noReport, "ns/a", nil, false, a)
	d.Put(noReport, "ns/b", nil, false, b)
	b.Labels["app"] = "evil" // b is replaced by the re-list: caught as it goes
	var got []error
	b2, c := cm("b", "web"), cm("c", "web")
	Swap(d, func(err error) { got = append(got, err) },
		content{"ns/a": a, "ns/b": b},
		content{"ns/a": a, "ns/b": b2, "ns/c": c},
		func(o *corev1.ConfigMap) *corev1.ConfigMap { return o })
	if len(got) != 1 || !errors.Is(got[0], errMutated) || !strings.Contains(got[0].Error(), "ns/b: ") {
		t.Fatalf("reports of the swap: %v, want one for ns/b", got)
	}
	if n := d.Watched(); n != 3 {
		t.Fatalf("%d objects watched after the swap, want 3 (a kept, b's new instance, c)", n)
	}
	a.Labels["app"] = "evil" // the kept instance is still checked
	if !d.Check(context.Background()) {
		t.Fatal("the check failed")
	}
	if len(*reports) != 1 || !strings.Contains((*reports)[0].Error(), "ns/a: ") {
		t.Fatalf("reports of the check: %v, want one for ns/a", *reports)
	}
}

// A check that panics while it holds the detector's lock (here its index
// of entries is broken: refresh looks an entry up under the lock) lets
// the lock go, reports the failure, and turns the detector off: the
// writer, which takes the same lock for each object it caches, does not
// wait for ever, and nothing more is copied.
func TestCheckPanicUnderTheLock(t *testing.T) {
	d, reports := newTestDetector(t)
	a := cm("a", "web")
	d.Put(func(error) {}, "ns/a", nil, false, a)
	a.Labels["app"] = "evil" // the check finds it, and looks its entry up
	d.mu.Lock()
	d.index["ns/a"] = len(d.entries) + 10
	d.mu.Unlock()
	checked := make(chan bool, 1)
	go func() { checked <- d.Check(context.Background()) }()
	select {
	case ok := <-checked:
		if ok {
			t.Fatal("the check did not fail")
		}
	case <-time.After(10 * time.Second):
		t.Fatal("the failed check did not return: the detector's lock is still held")
	}
	if len(*reports) != 1 || !strings.Contains((*reports)[0].Error(), "the mutation detector's check panicked, and the detector is off: runtime error: index out of range") {
		t.Fatalf("reports: %v", *reports)
	}
	done := make(chan struct{})
	go func() {
		defer close(done)
		copies := d.Copies()
		d.Put(func(error) {}, "ns/b", nil, false, cm("b", "web")) // takes the lock if it tracked
		if !d.Off() || d.Copies() != copies || d.Watched() != 0 {
			t.Errorf("after the failure: off %v, %d copies more, %d watched", d.Off(), d.Copies()-copies, d.Watched())
		}
	}()
	select {
	case <-done:
	case <-time.After(10 * time.Second):
		t.Fatal("the detector's lock is still held after the failed check")
	}
}

// content is a map as a Content.
type content map[string]*corev1.ConfigMap

func (c content) All() iter.Seq2[string, *corev1.ConfigMap] { return maps.All(c) }
func (c content) Get(key string) (*corev1.ConfigMap, bool) {
	o, ok := c[key]
	return o, ok
}
