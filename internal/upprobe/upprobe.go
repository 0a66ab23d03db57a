// Package upprobe tells an informer when a server it cannot reach serves
// again: while the server or the way to it is down, a probe that the
// server's priority and fairness does not queue (/readyz) asks every
// Every, once per server and process however many informers wait for it,
// and those informers resume within about a second of its return, spread
// over Spread so that they do not all ask at once.
package upprobe

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"time"

	"k8s.io/client-go/rest"
)

const (
	// Every is how often a process probes a server it cannot reach,
	// once for all its informers of that server (jittered by a fifth).
	Every = 500 * time.Millisecond
	// Spread is the window over which the informers waiting for a
	// server spread their first requests once it answers.
	Spread = time.Second
	// Timeout bounds one probe.
	Timeout = 2 * time.Second
)

// Probe asks whether a server serves: any answer but a 5xx (a server
// still starting answers /readyz with 500). It returns once ctx ends.
type Probe func(ctx context.Context) (ready bool)

// Target returns the readiness probe of the server rc's requests go to,
// sent through hc (not through rc's rate limiter), and the key that the
// informers of one server share it under; nil if rc is nil.
func Target(rc *rest.RESTClient, hc *http.Client) (Probe, string) {
	if rc == nil {
		return nil, ""
	}
	// /readyz: exempt from the server's queues as /livez is (liveness.ProbePath),
	// and 200 only once the server serves.
	url := rc.Get().AbsPath("/readyz").URL().String()
	return func(ctx context.Context) bool {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return false
		}
		resp, err := hc.Do(req)
		if err != nil {
			return false
		}
		_, _ = io.Copy(io.Discard, io.LimitReader(resp.Body, 4<<10))
		resp.Body.Close()
		return resp.StatusCode < 500
	}, url
}

// watches are the probes of unreachable servers under way, by key: one
// per server and process, however many informers wait for it.
var watches = struct {
	sync.Mutex
	m map[string]*watch
}{m: map[string]*watch{}}

// watch probes one server until it serves. back is closed once a probe
// finds it serving after one that did not (the server came back);
// reachable if the first probe does (the server was not down: the failure
// was something else, and the informers wait out their backoff).
type watch struct {
	back, reachable chan struct{}
	waiters         int // guarded by watches
	stop            context.CancelFunc
}

// Await waits up to d after a failure that says the server or the way
// to it is down, ending early once the server serves again after it did
// not (then after a random part of Spread, rnd in [0, 1), so that the
// informers of a process spread their requests), or at once when
// interrupt delivers: true if it ended early, false after d or when ctx
// ends.
func Await(ctx context.Context, probe Probe, key string, d time.Duration, rnd float64, interrupt <-chan struct{}) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	w := join(probe, key)
	defer leave(key, w)
	back, reachable := w.back, w.reachable
	var early <-chan time.Time // the spread after the server came back
	for {
		select {
		case <-ctx.Done():
			return false
		case <-t.C:
			return false
		case <-interrupt:
			return true
		case <-reachable:
			back, reachable = nil, nil // not down: the backoff stands
		case <-back:
			back, reachable = nil, nil
			s := time.NewTimer(time.Duration(float64(Spread) * rnd))
			defer s.Stop()
			early = s.C
		case <-early:
			return true
		}
	}
}

func join(probe Probe, key string) *watch {
	watches.Lock()
	defer watches.Unlock()
	w := watches.m[key]
	if w == nil {
		ctx, cancel := context.WithCancel(context.Background())
		w = &watch{back: make(chan struct{}), reachable: make(chan struct{}), stop: cancel}
		watches.m[key] = w
		go w.run(ctx, probe, key)
	}
	w.waiters++
	return w
}

// leave ends a waiter's hold on w; the last one stops its probes.
func leave(key string, w *watch) {
	watches.Lock()
	defer watches.Unlock()
	if w.waiters--; w.waiters == 0 {
		w.stop()
		if watches.m[key] == w {
			delete(watches.m, key)
		}
	}
}

func (w *watch) run(ctx context.Context, probe Probe, key string) {
	defer func() {
		watches.Lock()
		if watches.m[key] == w {
			delete(watches.m, key) // done: a later failure probes anew
		}
		watches.Unlock()
	}()
	down := false
	for ctx.Err() == nil {
		pctx, cancel := context.WithTimeout(ctx, Timeout)
		ready := probe(pctx)
		cancel()
		switch {
		case ready && down:
			close(w.back)
			return
		case ready:
			close(w.reachable)
			return
		}
		down = true
		t := time.NewTimer(Every - time.Duration(float64(Every)*0.2*rand.Float64()))
		select {
		case <-ctx.Done():
			t.Stop()
			return
		case <-t.C:
		}
	}
}
