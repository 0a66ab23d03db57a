package kinformer

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// gatedLister holds every page of a list after the first until open is
// closed.
type gatedLister struct {
	*fakeServer
	open chan struct{}
}

func (g *gatedLister) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	if opts.Continue != "" {
		select {
		case <-g.open:
		case <-ctx.Done():
			return nil, ctx.Err()
		}
	}
	return g.fakeServer.List(ctx, opts)
}

// The first list is delivered while it streams: the handler gets the
// first page's objects while the second is still held back (which waits
// for the handler: without the pipeline, the list never ends), and its
// registration is synced only once the whole list is in and handled.
// Every object is Added once, cause List, at its own resourceVersion.
func TestPipelinedFirstList(t *testing.T) {
	s := newFakeServer()
	for i := range 6 {
		s.put(cm("ns", fmt.Sprintf("cm-%d", i)))
	}
	g := &gatedLister{fakeServer: s, open: make(chan struct{})}
	inf := New[*corev1.ConfigMap](g, &Options[*corev1.ConfigMap]{Backoff: fastBackoff, PageSize: 2})
	rec := &recorder{}
	var once sync.Once
	var syncedAtFirst bool
	var reg *Registration
	reg = inf.AddHandler(func(e cmEvent) {
		rec.handle(e)
		once.Do(func() {
			syncedAtFirst = reg.HasSynced() || inf.HasSynced()
			if n := len(inf.Cache().List()); n < 1 || n > 2 {
				t.Errorf("at the first Added the cache holds %d objects, want some of the first page's 2", n)
			}
			close(g.open)
		})
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	eventually(t, "the registration synced", reg.HasSynced)
	if syncedAtFirst {
		t.Fatal("synced at the first Added, before the list was complete")
	}
	events := rec.all()
	if len(events) != 6 {
		t.Fatalf("%d events, want 6 Added: %v", len(events), rec.lines(true))
	}
	seen := map[string]bool{}
	for _, e := range events {
		if e.Type != Added || e.Cause != CauseList || seen[e.Key] || e.ResourceVersion != e.Object.ResourceVersion {
			t.Fatalf("event %s %s cause %s at %s (object at %s), twice: %v", e.Type, e.Key, e.Cause, e.ResourceVersion, e.Object.ResourceVersion, seen[e.Key])
		}
		seen[e.Key] = true
	}
	s.mu.Lock()
	want := strconv.FormatInt(s.rv, 10)
	s.mu.Unlock()
	if inf.ResourceVersion() != want {
		t.Fatalf("resourceVersion %s, want the list's %s", inf.ResourceVersion(), want)
	}
}

// A pipelined list cut off midway leaves what arrived in the cache,
// unsynced; the next list diffs against it: the rest Added, an object
// deleted meanwhile Deleted, nothing twice, all with cause List.
func TestPipelinedListCutOff(t *testing.T) {
	s := newFakeServer()
	for i := range 6 {
		s.put(cm("ns", fmt.Sprintf("cm-%d", i)))
	}
	s.listErrs = []error{nil, errors.New("connection reset")} // the second page fails
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: Backoff{Initial: 300 * time.Millisecond, Max: 300 * time.Millisecond}, PageSize: 2})
	rec := &recorder{}
	inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	eventually(t, "the first page handled", func() bool { return len(rec.all()) >= 2 })
	s.del("ns", "cm-0") // delivered with the first page
	contractSync(t, inf)
	eventually(t, "every event handled", func() bool { return len(rec.all()) >= 7 })
	time.Sleep(50 * time.Millisecond)
	var got []string
	for _, e := range rec.all() {
		if e.Type == Error {
			continue
		}
		if e.Cause != CauseList {
			t.Errorf("%s %s: cause %s, want list", e.Type, e.Key, e.Cause)
		}
		got = append(got, string(e.Type)+" "+e.Key)
	}
	want := "[ADDED ns/cm-0 ADDED ns/cm-1 DELETED ns/cm-0 ADDED ns/cm-2 ADDED ns/cm-3 ADDED ns/cm-4 ADDED ns/cm-5]"
	if fmt.Sprint(sortedAfter(got, 2)) != want {
		t.Fatalf("events %v, want %s (the first page, then the rest in any order)", got, want)
	}
	if n := len(inf.Cache().List()); n != 5 {
		t.Fatalf("%d cached, want 5", n)
	}
}

// sortedAfter returns lines with those after the first n sorted.
func sortedAfter(lines []string, n int) []string {
	if len(lines) <= n {
		return lines
	}
	tail := append([]string(nil), lines[n:]...)
	for i := range tail {
		for j := i + 1; j < len(tail); j++ {
			if tail[j] < tail[i] {
				tail[i], tail[j] = tail[j], tail[i]
			}
		}
	}
	// Deleted first: sort puts ADDED before DELETED; the diff's order is
	// the map's.
	out := append([]string(nil), lines[:n]...)
	var dels, adds []string
	for _, l := range tail {
		if l[0] == 'D' {
			dels = append(dels, l)
		} else {
			adds = append(adds, l)
		}
	}
	return append(append(out, dels...), adds...)
}

// A handler added while the first list streams gets every object once:
// those cached when it is added by the replay, the others by their
// events; none twice.
func TestPipelinedHandlerAddedMidList(t *testing.T) {
	s := newFakeServer()
	for i := range 6 {
		s.put(cm("ns", fmt.Sprintf("cm-%d", i)))
	}
	g := &gatedLister{fakeServer: s, open: make(chan struct{})}
	inf := New[*corev1.ConfigMap](g, &Options[*corev1.ConfigMap]{Backoff: fastBackoff, PageSize: 2})
	late := &recorder{}
	var lateReg *Registration
	var once sync.Once
	inf.AddHandler(func(e cmEvent) {
		once.Do(func() {
			lateReg = inf.AddHandler(late.handle) // mid-list: the first page's objects are arriving
			close(g.open)
		})
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	eventually(t, "the late handler synced", func() bool { return lateReg != nil && lateReg.HasSynced() })
	seen := map[string]int{}
	for _, e := range late.all() {
		if e.Type != Added {
			t.Fatalf("late handler: %s %s", e.Type, e.Key)
		}
		seen[e.Key]++
	}
	for i := range 6 {
		if k := fmt.Sprintf("ns/cm-%d", i); seen[k] != 1 {
			t.Fatalf("late handler got %s %d times, want once (all: %v)", k, seen[k], late.lines(false))
		}
	}
}
