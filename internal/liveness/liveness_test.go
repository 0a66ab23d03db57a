package liveness

import (
	"context"
	"crypto/tls"
	"fmt"
	"net"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"testing/synctest"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// h2Conn is a connection that says it negotiated HTTP/2 and records
// whether it was closed; nothing is read or written.
type h2Conn struct {
	net.Conn
	proto  string
	closed atomic.Bool
}

func (c *h2Conn) ConnectionState() tls.ConnectionState {
	return tls.ConnectionState{NegotiatedProtocol: c.proto}
}
func (c *h2Conn) Close() error { c.closed.Store(true); return nil }

func newConn() *h2Conn { return &h2Conn{proto: "h2"} }

// prober answers after delay on conn (or never, with hang), counting
// probes and how many were in flight at once.
type prober struct {
	conn     net.Conn // what the probe says it went out on
	delay    time.Duration
	hang     atomic.Bool
	n        atomic.Int32
	inFlight atomic.Int32
	maxAtOne atomic.Int32
}

func (p *prober) probe(ctx context.Context) (net.Conn, error) {
	p.n.Add(1)
	now := p.inFlight.Add(1)
	defer p.inFlight.Add(-1)
	for {
		m := p.maxAtOne.Load()
		if now <= m || p.maxAtOne.CompareAndSwap(m, now) {
			break
		}
	}
	wait := p.delay
	if p.hang.Load() {
		wait = time.Hour
	}
	select {
	case <-time.After(wait):
		return p.conn, nil
	case <-ctx.Done():
		return p.conn, ctx.Err()
	}
}

func waitFor(t *testing.T, what string, d time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("not within %s: %s", d, what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func TestAnsweredProbesKeepTheConnection(t *testing.T) {
	c := newConn()
	p := &prober{conn: c, delay: 30 * time.Millisecond}
	w := Register(c, p.probe, 50*time.Millisecond, time.Second)
	if w == nil {
		t.Fatal("an HTTP/2 connection was not watched")
	}
	waitFor(t, "three probes", 10*time.Second, func() bool { return p.n.Load() >= 3 })
	w.Done()
	if c.closed.Load() || w.Dead() {
		t.Fatal("a connection that answered every probe was closed")
	}
}

func TestUnansweredProbeClosesTheConnection(t *testing.T) {
	c := newConn()
	p := &prober{conn: c}
	p.hang.Store(true)
	start := time.Now()
	w := Register(c, p.probe, 50*time.Millisecond, 200*time.Millisecond)
	defer w.Done()
	waitFor(t, "the connection closed", 10*time.Second, c.closed.Load)
	if !w.Dead() {
		t.Fatal("closed, but Dead says no")
	}
	if took := time.Since(start); took < 250*time.Millisecond {
		t.Fatalf("closed after %s: before the silence (50ms) and the probe's timeout (200ms) had passed", took)
	}
	if n := p.n.Load(); n != 1 {
		t.Fatalf("%d probes, want 1: the first unanswered one decides", n)
	}
}

// A slow server answers within the timeout: never taken for dead, and
// never more than one probe at a time.
func TestSlowAnswerIsNotDeath(t *testing.T) {
	c := newConn()
	p := &prober{conn: c, delay: 150 * time.Millisecond}
	var ws []*Watch
	for range 20 {
		ws = append(ws, Register(c, p.probe, 20*time.Millisecond, 2*time.Second))
	}
	waitFor(t, "five probes", 20*time.Second, func() bool { return p.n.Load() >= 5 })
	for _, w := range ws {
		w.Done()
	}
	if c.closed.Load() {
		t.Fatal("a slow but answering connection was closed")
	}
	if m := p.maxAtOne.Load(); m != 1 {
		t.Fatalf("%d probes at once on one connection with 20 watches, want 1", m)
	}
}

func TestEventsKeepProbesAway(t *testing.T) {
	c := newConn()
	p := &prober{conn: c}
	w := Register(c, p.probe, 500*time.Millisecond, time.Second)
	defer w.Done()
	for end := time.Now().Add(2 * time.Second); time.Now().Before(end); {
		w.Touch(time.Now())
		time.Sleep(10 * time.Millisecond)
	}
	if n := p.n.Load(); n != 0 {
		t.Fatalf("%d probes on a connection with an event every 10ms", n)
	}
	waitFor(t, "a probe once the events stopped", 10*time.Second, func() bool { return p.n.Load() >= 1 })
}

// A probe the transport sent on another connection says nothing of this
// one: no verdict.
func TestProbeOnAnotherConnectionDecidesNothing(t *testing.T) {
	c := newConn()
	p := &prober{conn: newConn()}
	p.hang.Store(true)
	w := Register(c, p.probe, 20*time.Millisecond, 50*time.Millisecond)
	waitFor(t, "two probes", 10*time.Second, func() bool { return p.n.Load() >= 2 })
	w.Done()
	if c.closed.Load() {
		t.Fatal("closed on the strength of a probe sent elsewhere")
	}
}

func TestOnlyHTTP2IsWatched(t *testing.T) {
	p := &prober{}
	for _, c := range []net.Conn{&h2Conn{proto: "http/1.1"}, &h2Conn{}, nil} {
		if w := Register(c, p.probe, time.Millisecond, time.Millisecond); w != nil {
			w.Done()
			t.Fatalf("%v: watched", c)
		}
	}
	if w := Register(newConn(), nil, time.Second, time.Second); w != nil {
		t.Fatal("watched without a prober")
	}
	if w := Register(newConn(), p.probe, 0, time.Second); w != nil {
		t.Fatal("watched with probing off")
	}
}

// The watchdog is one per connection and ends with its last watch, even
// in the middle of a probe.
func TestWatchdogEndsWithItsLastWatch(t *testing.T) {
	c := newConn()
	p := &prober{conn: c}
	p.hang.Store(true)
	var wg sync.WaitGroup
	ws := make([]*Watch, 50)
	for i := range ws {
		wg.Add(1)
		go func() { defer wg.Done(); ws[i] = Register(c, p.probe, 10*time.Millisecond, time.Hour) }()
	}
	wg.Wait()
	registry.Lock()
	n := len(registry.m)
	registry.Unlock()
	if n != 1 {
		t.Fatalf("%d watchdogs for one connection", n)
	}
	waitFor(t, "a probe in flight", 10*time.Second, func() bool { return p.inFlight.Load() == 1 })
	for _, w := range ws {
		w.Done()
		w.Done()
	}
	waitFor(t, "the probe cancelled", 10*time.Second, func() bool { return p.inFlight.Load() == 0 })
	registry.Lock()
	n = len(registry.m)
	registry.Unlock()
	if n != 0 || c.closed.Load() {
		t.Fatalf("after the last Done: %d watchdogs, closed %v", n, c.closed.Load())
	}
}

// Every connection's watchdog runs: one that started before its first
// watch was on it would end at once (no watch) and leave the connection
// unwatched.
func TestEveryConnectionIsProbed(t *testing.T) {
	ws := make([]*Watch, 400)
	ps := make([]*prober, 400)
	var wg sync.WaitGroup
	for i := range ps {
		wg.Add(1)
		go func() {
			defer wg.Done()
			c := newConn()
			ps[i] = &prober{conn: c}
			ws[i] = Register(c, ps[i].probe, 10*time.Millisecond, time.Second)
		}()
	}
	wg.Wait()
	defer func() {
		for _, w := range ws {
			w.Done()
		}
	}()
	waitFor(t, "a probe on each of 400 connections", 20*time.Second, func() bool {
		for _, p := range ps {
			if p.n.Load() == 0 {
				return false
			}
		}
		return true
	})
}

// Each watch on a connection may ask for its own ProbeAfter: the
// watchdog probes after the shortest, whichever watch came first, and
// after the next shortest once that watch is done.
//
// The probes of the synctest tests take some of the bubble's time to
// answer: a watchdog that probed again at once would otherwise spin
// without the clock moving, and the test would hang instead of failing.
func TestWatchdogUsesShortestProbeAfter(t *testing.T) {
	for _, shortFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("short first %v", shortFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newConn()
				p := &prober{conn: c, delay: time.Second}
				var short, long *Watch
				if shortFirst {
					short = Register(c, p.probe, 5*time.Second, 5*time.Second)
					long = Register(c, p.probe, time.Minute, 5*time.Second)
				} else {
					long = Register(c, p.probe, time.Minute, 5*time.Second)
					short = Register(c, p.probe, 5*time.Second, 5*time.Second)
				}
				defer long.Done()
				defer short.Done() // done below; again if the test fails first
				time.Sleep(5500 * time.Millisecond)
				if n := p.n.Load(); n != 1 {
					t.Fatalf("%d probes after 5.5 s of silence, with watches asking for a probe after 5 s and after 1 min; want 1 (at 5 s)", n)
				}
				time.Sleep(1500 * time.Millisecond) // 7 s: answered at 6 s
				short.Done()
				time.Sleep(55 * time.Second) // 62 s: the answer at 6 s + 1 min is still ahead
				if n := p.n.Load(); n != 1 {
					t.Fatalf("%d probes 56 s after the answer, with only the watch asking for a probe after 1 min left; want 1", n)
				}
				time.Sleep(6 * time.Second) // 68 s
				if n := p.n.Load(); n != 2 {
					t.Fatalf("%d probes 62 s after the answer, with only the watch asking for a probe after 1 min left; want 2 (at 66 s)", n)
				}
			})
		})
	}
}

// A probe that fails at once (the connection reset or refused, a TLS
// error) is an answer of sorts, not a death: only a probe left
// unanswered until its timeout closes the connection.
func TestProbeErrorAtOnceIsNotDeath(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConn()
		var n atomic.Int32
		probe := func(ctx context.Context) (net.Conn, error) {
			n.Add(1)
			select {
			case <-time.After(10 * time.Millisecond): // a round trip
				return c, syscall.ECONNRESET
			case <-ctx.Done():
				return c, ctx.Err()
			}
		}
		w := Register(c, probe, 5*time.Second, 5*time.Second)
		time.Sleep(12 * time.Second) // probes at 5 and 10.01 s
		w.Done()
		if c.closed.Load() || w.Dead() {
			t.Fatalf("a probe that failed at once (%v) closed the connection (closed %v, Dead %v) after %d probe(s)",
				syscall.ECONNRESET, c.closed.Load(), w.Dead(), n.Load())
		}
		if got := n.Load(); got != 2 {
			t.Fatalf("%d probes in 12 s with ProbeAfter 5 s and every probe failing at once, want 2 (at 5 and 10.01 s)", got)
		}
	})
}

// An answer counts as activity: the next probe waits for a whole
// ProbeAfter of silence after it, not after the last event.
func TestAnswerRestartsTheSilence(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		c := newConn()
		p := &prober{conn: c, delay: time.Second}
		w := Register(c, p.probe, 5*time.Second, 5*time.Second)
		defer w.Done()
		time.Sleep(32 * time.Second)
		if n := p.n.Load(); n != 5 {
			t.Fatalf("%d probes in 32 s of silence, ProbeAfter 5 s, each answered in 1 s; want 5 (at 5, 11, 17, 23 and 29 s)", n)
		}
	})
}

// Watches on one connection that allow a probe different timeouts: the
// connection is closed only once the longest has passed unanswered, so
// that no watch is cut sooner than it asked.
func TestWatchdogUsesLongestProbeTimeout(t *testing.T) {
	for _, shortFirst := range []bool{true, false} {
		t.Run(fmt.Sprintf("short first %v", shortFirst), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				c := newConn()
				p := &prober{conn: c}
				p.hang.Store(true) // never answers
				timeouts := []time.Duration{2 * time.Second, 10 * time.Second}
				if !shortFirst {
					timeouts[0], timeouts[1] = timeouts[1], timeouts[0]
				}
				a := Register(c, p.probe, 5*time.Second, timeouts[0])
				b := Register(c, p.probe, 5*time.Second, timeouts[1])
				defer a.Done()
				defer b.Done()
				time.Sleep(5*time.Second + 3*time.Second) // probed at 5 s, unanswered for 3 s
				synctest.Wait()
				if c.closed.Load() {
					t.Fatal("closed 3 s into an unanswered probe, with a watch allowing it 10 s")
				}
				time.Sleep(7500 * time.Millisecond) // 10.5 s unanswered
				synctest.Wait()
				if !c.closed.Load() || !a.Dead() || !b.Dead() {
					t.Fatalf("10.5 s into an unanswered probe whose longest timeout is 10 s: closed %v, dead %v %v", c.closed.Load(), a.Dead(), b.Dead())
				}
			})
		})
	}
}
