package upprobe

import (
	"context"
	"sync/atomic"
	"testing"
	"time"
)

// fakeUp is a server that serves once its time comes, and counts the
// probes it gets.
type fakeUp struct {
	at     atomic.Int64 // UnixNano from which it serves; 0: never
	probes atomic.Int32
}

func (f *fakeUp) probe(ctx context.Context) bool {
	f.probes.Add(1)
	at := f.at.Load()
	return at != 0 && time.Now().UnixNano() >= at
}

// A server down comes back: every informer waiting for it resumes within
// a probe's period and the spread of its return, long before its
// backoff's end, with one probe per period for all of them.
func TestServerBack(t *testing.T) {
	f := &fakeUp{}
	back := time.Now().Add(700 * time.Millisecond)
	f.at.Store(back.UnixNano())
	const n = 20
	done := make(chan time.Duration, n)
	for i := range n {
		go func() {
			if !Await(t.Context(), f.probe, "server back", time.Minute, float64(i)/n, nil) {
				done <- -1
				return
			}
			done <- time.Since(back)
		}()
	}
	for range n {
		d := <-done
		if d < 0 || d > Every+Spread+time.Second {
			t.Fatalf("resumed %v after the server came back; want within %v", d, Every+Spread)
		}
	}
	// About 700 ms / Every probes, shared: not one per informer.
	if p := f.probes.Load(); p > 6 {
		t.Fatalf("%d probes for %d informers waiting about 0.7 s: not shared", p, n)
	}
}

// A failure of the way to a server that serves (a proxy that cuts
// connections): the first probe finds it serving, and the wait is the
// backoff's.
func TestNotDown(t *testing.T) {
	f := &fakeUp{}
	f.at.Store(1)
	began := time.Now()
	if Await(t.Context(), f.probe, "not down", 300*time.Millisecond, 0, nil) {
		t.Fatal("ended early for a server that was never down")
	}
	if d := time.Since(began); d < 300*time.Millisecond {
		t.Fatalf("waited %v, want the backoff's 300ms", d)
	}
	if p := f.probes.Load(); p != 1 {
		t.Fatalf("%d probes, want 1", p)
	}
}

// A server that stays down: the wait is the backoff's, and the probes
// stop with it.
func TestStaysDown(t *testing.T) {
	f := &fakeUp{}
	if Await(t.Context(), f.probe, "stays down", 1200*time.Millisecond, 0, nil) {
		t.Fatal("ended early for a server that stayed down")
	}
	p := f.probes.Load()
	if p < 2 {
		t.Fatalf("%d probes in 1.2 s, want one every %v", p, Every)
	}
	time.Sleep(2 * Every)
	if f.probes.Load() > p+1 {
		t.Fatal("probes went on after the last informer stopped waiting")
	}
	watches.Lock()
	left := len(watches.m)
	watches.Unlock()
	if left != 0 {
		t.Fatalf("%d probes of servers left", left)
	}
}
