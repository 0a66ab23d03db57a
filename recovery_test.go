package kinformer

import (
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

func TestFailureOf(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	refused := &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED}
	for _, c := range []struct {
		err   error
		want  Failure
		after time.Duration
	}{
		{fmt.Errorf("list: %w", refused), FailureDown, 0},
		{&net.OpError{Op: "dial", Net: "tcp", Err: errors.New("no route to host")}, FailureDown, 0},
		{io.ErrUnexpectedEOF, FailureDown, 0},
		{apierrors.NewForbidden(gr, "", errors.New("no")), FailureRefused, 0},
		{apierrors.NewUnauthorized("who"), FailureRefused, 0},
		{apierrors.NewTooManyRequests("slow down", 3), FailureBusy, 3 * time.Second},
		{apierrors.NewServiceUnavailable("starting"), FailureBusy, 0},
		{apierrors.NewTimeoutError("later", 7), FailureBusy, 7 * time.Second},
		{apierrors.NewNotFound(gr, "x"), FailureOther, 0},
		{errors.New("something else"), FailureOther, 0},
	} {
		f, after := failureOf(c.err)
		if f != c.want || after != c.after || FailureOf(c.err) != c.want {
			t.Errorf("failureOf(%v) = %s, %v; want %s, %v", c.err, f, after, c.want, c.after)
		}
		if got := unavailable(c.err); got != (c.want == FailureDown || c.want == FailureBusy) {
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

// An Error event says what kind of failure it was (Event.Failure); the
// first reconnects of a server down are logged at Debug, and at Warn once
// the backoff has grown; any other failure at Warn from the first. The
// event says which were routine (Event.Routine), as the log does.
func TestRoutineReconnectsLogQuietly(t *testing.T) {
	refused := fmt.Errorf("dial: %w", &net.OpError{Op: "dial", Net: "tcp", Err: syscall.ECONNREFUSED})
	s := newFakeServer()
	s.put(cm("ns", "a"))
	s.listErrs = []error{apierrors.NewInternalError(errors.New("etcd is sad")), refused, refused, refused}
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, &slog.HandlerOptions{Level: slog.LevelDebug}))
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Logger: log, Backoff: fastBackoff})
	var mu sync.Mutex
	var failures []Failure
	var routine []bool
	inf.AddEventHandler(Error, func(e cmEvent) {
		mu.Lock()
		failures = append(failures, e.Failure)
		routine = append(routine, e.Routine)
		mu.Unlock()
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	eventually(t, "four Error events", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(failures) == 4
	})
	mu.Lock()
	want := []Failure{FailureOther, FailureDown, FailureDown, FailureDown}
	if !slices.Equal(failures, want) {
		t.Errorf("Error events' Failure: %v, want %v", failures, want)
	}
	if want := []bool{false, true, false, false}; !slices.Equal(routine, want) {
		t.Errorf("Error events' Routine: %v, want %v", routine, want)
	}
	mu.Unlock()
	var debug, warn, other int
	for _, line := range strings.Split(buf.String(), "\n") {
		switch {
		case strings.Contains(line, "level=DEBUG") && strings.Contains(line, "(reconnecting)") && strings.Contains(line, "failure=down"):
			debug++
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "connection refused") && strings.Contains(line, "failure=down"):
			warn++
		case strings.Contains(line, "level=WARN") && strings.Contains(line, "etcd is sad") && strings.Contains(line, "failure=other"):
			other++
		}
	}
	// The 500 at Warn from the first; the first reconnect after it at
	// Debug; the next two, once the backoff has grown, at Warn.
	if debug != 1 || warn != 2 || other != 1 {
		t.Errorf("%d reconnects at Debug, %d at Warn, %d other failures at Warn; want 1, 2, 1:\n%s", debug, warn, other, buf.String())
	}
}

// Watches cut young in a row, five or more and for 30 s or more, make a
// flapping way; anything else between them (a refused reconnect, a watch
// that lasts, a catch-up's quiet end) starts the count again. Each change
// is said once.
func TestNoteCutFlapping(t *testing.T) {
	var buf syncBuffer
	l := &loop[*corev1.ConfigMap]{log: slog.New(slog.NewTextHandler(&buf, nil))}
	cut := outcome{kind: watchFailed, cutYoung: true, connLost: true}
	t0 := time.Now()
	for i, c := range []struct {
		at   time.Duration
		want bool
	}{{0, false}, {2 * time.Second, false}, {4 * time.Second, false}, {6 * time.Second, false}, {8 * time.Second, false}, // five in 8 s: separate faults close together
		{20 * time.Second, false}, {31 * time.Second, true}, {33 * time.Second, true}} {
		l.noteCut(cut, t0.Add(c.at))
		if l.flaps != c.want {
			t.Fatalf("cut %d at %v: flapping %v, want %v", i+1, c.at, l.flaps, c.want)
		}
	}
	if n := strings.Count(buf.String(), "keeps breaking soon after it opens"); n != 1 {
		t.Errorf("%d flapping lines, want 1:\n%s", n, buf.String())
	}
	l.noteCut(outcome{kind: watchFailed, err: errors.New("refused")}, t0.Add(34*time.Second))
	if l.flaps || !strings.Contains(buf.String(), "holds again") {
		t.Errorf("after another failure: flapping %v; log:\n%s", l.flaps, buf.String())
	}
	at := t0.Add(40 * time.Second)
	for range 10 {
		l.noteCut(cut, at)
		at = at.Add(4 * time.Second)
	}
	l.noteCut(outcome{kind: watchEnded}, at) // a watch that lasted, or a catch-up's quiet end
	l.noteCut(cut, at.Add(time.Second))
	if l.flaps {
		t.Error("cuts after a lasting watch count as flapping")
	}
}
