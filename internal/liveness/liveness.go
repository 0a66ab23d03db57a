// Package liveness tells a quiet HTTP/2 connection from a dead one by
// asking: when nothing has come on a connection that carries watches for a
// while, a small request is sent on that same connection, and if no answer
// comes in time the connection is closed, which ends every watch on it at
// once, so that their informers reconnect on a new one.
//
// A watch alone cannot tell: the API server sends nothing to a watch that
// has nothing to report (no bookmark either, while the watch is at the
// latest resourceVersion), and a connection that went silent without
// closing (a frozen proxy, a dropped NAT entry, a lost route) looks the
// same until a timeout minutes away. client-go's own HTTP/2 health check
// pings after 30 s of silence and waits 15 s.
//
// Each connection has one watchdog however many watches ride on it: at most
// one probe at a time per connection, and none while events flow. Only
// HTTP/2 connections are watched: over HTTP/1.1 a watch holds its
// connection alone, and a request cannot be sent on it.
package liveness

import (
	"context"
	"crypto/tls"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"
)

// Prober sends a small request through the client whose connection is
// watched, and returns the connection it went out on (nil if the transport
// did not say) and its error; any answer, whatever its status, is nil.
// It must return once ctx ends.
type Prober func(ctx context.Context) (net.Conn, error)

// Counts are what every watchdog of the process did: probes sent, and
// connections closed because a probe went unanswered.
type Counts struct {
	Probes, Dead uint64
}

var probes, dead atomic.Uint64

// Total returns the process's counts.
func Total() Counts { return Counts{Probes: probes.Load(), Dead: dead.Load()} }

// Watch is one watch's hold on its connection's watchdog.
type Watch struct {
	after, timeout time.Duration
	d              *watchdog // set by Register, before the watch is returned
	done           bool      // guarded by registry
}

// HTTP2 reports whether c is a TLS connection that negotiated HTTP/2: the
// only kind on which a probe shares the watches' connection.
func HTTP2(c net.Conn) bool {
	tc, ok := c.(interface{ ConnectionState() tls.ConnectionState })
	return ok && tc.ConnectionState().NegotiatedProtocol == "h2"
}

// Register puts a watch on conn under the connection's watchdog, which
// starts with the first watch and stops with the last: probe (through
// probe, once per silence; the first watch's prober serves all) after
// after without anything on the connection, and close conn if no answer
// comes within timeout. Each of the connection's watches may ask for its
// own durations: the watchdog probes after the shortest after and waits
// the longest timeout. It returns nil, and watches nothing, for a
// connection that is not HTTP/2 (see HTTP2), a nil prober or a
// non-positive duration.
func Register(conn net.Conn, probe Prober, after, timeout time.Duration) *Watch {
	if conn == nil || probe == nil || after <= 0 || timeout <= 0 || !HTTP2(conn) {
		return nil
	}
	w := &Watch{after: after, timeout: timeout}
	registry.Lock()
	defer registry.Unlock()
	w.join(conn, probe)
	return w
}

// join puts w on conn's watchdog, starting it if need be. registry held.
func (w *Watch) join(conn net.Conn, probe Prober) {
	d := registry.m[conn]
	start := d == nil
	if start {
		d = &watchdog{conn: conn, probe: probe, watches: map[*Watch]struct{}{}, wake: make(chan struct{}, 1)}
		d.ctx, d.cancel = context.WithCancel(context.Background())
		d.activity.Store(time.Now().UnixNano())
		registry.m[conn] = d
	}
	d.mu.Lock()
	d.watches[w] = struct{}{}
	d.mu.Unlock()
	w.d = d
	if start {
		go d.run() // with its first watch: run ends when it has none
	} else {
		d.poke()
	}
}

// Touch says something came on the watch's connection at t: no probe is
// due until the connection has been silent for a while again. It is one
// atomic store, cheap enough for every event.
func (w *Watch) Touch(t time.Time) {
	if w == nil {
		return
	}
	w.d.activity.Store(t.UnixNano())
}

// Dead reports whether the connection was closed because a probe went
// unanswered.
func (w *Watch) Dead() bool {
	if w == nil {
		return false
	}
	return w.d.dead.Load()
}

// Timeout is how long the probe waited before the connection was taken
// for dead.
func (w *Watch) Timeout() time.Duration {
	if w == nil {
		return 0
	}
	if _, t := w.d.durations(); t > 0 {
		return t
	}
	return w.timeout // the last watch of its connection, taken off
}

// Done takes the watch off its connection's watchdog, which stops with
// its last watch. Safe to call more than once.
func (w *Watch) Done() {
	if w == nil {
		return
	}
	registry.Lock()
	defer registry.Unlock()
	if w.done {
		return
	}
	w.done = true
	d := w.d
	d.mu.Lock()
	delete(d.watches, w)
	last := len(d.watches) == 0
	d.mu.Unlock()
	if last {
		if registry.m[d.conn] == d {
			delete(registry.m, d.conn)
		}
		d.cancel()
	} else {
		d.poke()
	}
}

var registry = struct {
	sync.Mutex
	m map[net.Conn]*watchdog
}{m: map[net.Conn]*watchdog{}}

// watchdog probes one connection.
type watchdog struct {
	conn     net.Conn
	probe    Prober
	ctx      context.Context // ends with the last watch
	cancel   context.CancelFunc
	activity atomic.Int64 // UnixNano of the last event or answer on the connection
	dead     atomic.Bool
	wake     chan struct{} // the watches changed: durations may have

	mu      sync.Mutex // guards watches
	watches map[*Watch]struct{}
}

func (d *watchdog) poke() {
	select {
	case d.wake <- struct{}{}:
	default:
	}
}

// durations returns the shortest silence and the longest timeout the
// watches ask for.
func (d *watchdog) durations() (after, timeout time.Duration) {
	d.mu.Lock()
	defer d.mu.Unlock()
	for w := range d.watches {
		if after == 0 || w.after < after {
			after = w.after
		}
		timeout = max(timeout, w.timeout)
	}
	return after, timeout
}

func (d *watchdog) run() {
	timer := time.NewTimer(time.Hour)
	defer timer.Stop()
	for {
		after, timeout := d.durations()
		if after == 0 {
			return // the last watch is gone
		}
		if wait := time.Until(time.Unix(0, d.activity.Load()).Add(after)); wait > 0 {
			timer.Reset(wait)
			select {
			case <-timer.C:
			case <-d.wake:
				timer.Stop() // Go 1.23 timers: nothing stale is left to drain
			case <-d.ctx.Done():
				return
			}
			continue
		}
		if d.check(timeout) {
			return
		}
	}
}

// check probes the connection once; it reports whether it closed it.
func (d *watchdog) check(timeout time.Duration) bool {
	ctx, cancel := context.WithTimeout(d.ctx, timeout)
	defer cancel()
	probes.Add(1)
	got, err := d.probe(ctx)
	if d.ctx.Err() != nil {
		return true // the last watch is gone: nothing to decide
	}
	// Dead only if the probe went out on this very connection and no
	// answer came in time: a probe that went elsewhere (the transport
	// opened another connection) says nothing about this one, and an
	// error that came at once is an answer of sorts (the watches see a
	// closed connection themselves).
	if err != nil && ctx.Err() != nil && got == d.conn {
		d.dead.Store(true)
		dead.Add(1)
		d.conn.Close()
		registry.Lock()
		if registry.m[d.conn] == d {
			delete(registry.m, d.conn)
		}
		registry.Unlock()
		return true
	}
	// Answered: the connection lives; the next silence counts from now.
	if now := time.Now().UnixNano(); now > d.activity.Load() {
		d.activity.Store(now)
	}
	return false
}

// ProbePath is what HTTPProber asks for: /livez, not /version, because the
// API server's priority and fairness exempts /healthz, /livez and /readyz
// from its queues for every user (the "probes" FlowSchema), where a
// /version waits in line with the other requests of its priority level:
// on a server under load it took 7 s, and a healthy connection was
// closed. With exclude=etcd: the probe asks whether the connection
// carries, not whether etcd is well.
const ProbePath = "/livez"

// HTTPProber returns the Prober that sends GET url (the API server's
// ProbePath, with exclude=etcd) straight on hc, the HTTP client whose
// connections carry the watches: not through a REST client's rate
// limiter, whose wait would count against the connection.
func HTTPProber(url string, hc *http.Client) Prober {
	return func(ctx context.Context) (net.Conn, error) {
		var got atomic.Pointer[net.Conn]
		ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
			GotConn: func(i httptrace.GotConnInfo) {
				if i.Conn != nil {
					got.Store(&i.Conn)
				}
			},
		})
		conn := func() net.Conn {
			if c := got.Load(); c != nil {
				return *c
			}
			return nil
		}
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
		if err != nil {
			return nil, err
		}
		req.Header.Set("Accept", "application/json")
		resp, err := hc.Do(req)
		if err != nil {
			return conn(), err
		}
		// The headers are the answer; the body is not read (a stream reset
		// over HTTP/2 is free, and a body that never ends cannot hold the
		// watchdog).
		resp.Body.Close()
		return conn(), nil // any status: the connection answered
	}
}
