package kinformer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestFailureOf(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err   error
		want  failure
		after time.Duration
	}{
		{fmt.Errorf("list: %w", refused), failDown, 0},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route to host")}, failDown, 0},
		{io.ErrUnexpectedEOF, failDown, 0},
		{apierrors.NewForbidden(gr, "", errors.New("no")), failRefused, 0},
		{apierrors.NewUnauthorized("who"), failRefused, 0},
		{apierrors.NewTooManyRequests("slow down", 3), failBusy, 3 * time.Second},
		{apierrors.NewServiceUnavailable("starting"), failBusy, 0},
		{apierrors.NewTimeoutError("later", 7), failBusy, 7 * time.Second},
		{apierrors.NewNotFound(gr, "x"), failOther, 0},
		{errors.New("something else"), failOther, 0},
	} {
		f, after := failureOf(c.err)
		if f != c.want || after != c.after {
			t.Errorf("failureOf(%v) = %d, %v; want %d, %v", c.err, f, after, c.want, c.after)
		}
		if got := unavailable(c.err); got != (c.want == failDown || c.want == failBusy) {
			t.Errorf("unavailable(%v) = %v", c.err, got)
		}
	}
}

func TestWaitFor(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	forbidden := apierrors.NewForbidden(gr, "", errors.New("no"))
	if d := waitFor(forbidden, 30*time.Second, 0); d != refusedCap {
		t.Errorf("403 after a grown backoff: %v, want %v", d, refusedCap)
	}
	if d := waitFor(forbidden, 30*time.Second, 0.99); d > refusedCap || d < refusedCap*3/4 {
		t.Errorf("403 jittered: %v, want within the last quarter of %v", d, refusedCap)
	}
	if d := waitFor(forbidden, time.Second, 0.5); d != time.Second {
		t.Errorf("403 before the cap: %v, want the backoff's 1s", d)
	}
	if d := waitFor(apierrors.NewTooManyRequests("slow", 20), time.Second, 0); d != 20*time.Second {
		t.Errorf("429 Retry-After 20: %v, want 20s", d)
	}
	if d := waitFor(apierrors.NewTooManyRequests("slow", 2), 10*time.Second, 0); d != 10*time.Second {
		t.Errorf("429 Retry-After 2 after a backoff of 10s: %v, want 10s", d)
	}
	if d := waitFor(apierrors.NewTooManyRequests("slow", 3600), time.Second, 0); d != maxRetryAfter {
		t.Errorf("429 Retry-After an hour: %v, want %v", d, maxRetryAfter)
	}
}

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
func TestAwaitUpServerBack(t *testing.T) {
	f := &fakeUp{}
	back := time.Now().Add(700 * time.Millisecond)
	f.at.Store(back.UnixNano())
	const n = 20
	done := make(chan time.Duration, n)
	for i := range n {
		go func() {
			if !awaitUp(t.Context(), f.probe, "server back", time.Minute, float64(i)/n, nil) {
				done <- -1
				return
			}
			done <- time.Since(back)
		}()
	}
	for range n {
		d := <-done
		if d < 0 || d > upEvery+upSpread+time.Second {
			t.Fatalf("resumed %v after the server came back; want within %v", d, upEvery+upSpread)
		}
	}
	// About 700 ms / upEvery probes, shared: not one per informer.
	if p := f.probes.Load(); p > 6 {
		t.Fatalf("%d probes for %d informers waiting about 0.7 s: not shared", p, n)
	}
}

// A failure of the way to a server that serves (a proxy that cuts
// connections): the first probe finds it serving, and the wait is the
// backoff's.
func TestAwaitUpNotDown(t *testing.T) {
	f := &fakeUp{}
	f.at.Store(1)
	began := time.Now()
	if awaitUp(t.Context(), f.probe, "not down", 300*time.Millisecond, 0, nil) {
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
func TestAwaitUpStaysDown(t *testing.T) {
	f := &fakeUp{}
	if awaitUp(t.Context(), f.probe, "stays down", 1200*time.Millisecond, 0, nil) {
		t.Fatal("ended early for a server that stayed down")
	}
	p := f.probes.Load()
	if p < 2 {
		t.Fatalf("%d probes in 1.2 s, want one every %v", p, upEvery)
	}
	time.Sleep(2 * upEvery)
	if f.probes.Load() > p+1 {
		t.Fatal("probes went on after the last informer stopped waiting")
	}
	upWatches.Lock()
	left := len(upWatches.m)
	upWatches.Unlock()
	if left != 0 {
		t.Fatalf("%d probes of servers left", left)
	}
}
