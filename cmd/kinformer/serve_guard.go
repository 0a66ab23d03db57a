package main

import (
	"crypto/tls"
	"fmt"
	"log"
	"net"
	"net/http"
	"regexp"
	"regexp/syntax"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// serve's defences. It may hold Secrets and has no authentication, so it
// trusts nothing about its clients: not the Host they name (DNS
// rebinding), not that they read what they asked for (write deadlines),
// not that they are few (caps on the requests that cost memory).

const (
	// maxSSEBuffer caps --sse-buffer: a client's buffer grows as it falls
	// behind, up to this many events, then it is disconnected.
	maxSSEBuffer = 1 << 16
	// maxRecentEvents caps --recent-events: the feed's ring holds that
	// many summaries of at most about 2 KiB each (names cut at 253
	// bytes, errors at 1 KiB): 128 MiB at most, 1 MiB at the default 500.
	maxRecentEvents = 1 << 16
	// maxSSEBufferBytes caps the bytes of an /events client's buffer as
	// --sse-buffer caps its events: 20 clients that did not read held 200
	// updates of a 1 MB object. The clients share an event's bytes, and
	// their buffers are the latest events: together those being served
	// hold 16 MiB and an event at most (one dropped keeps its buffer
	// until it is written, or the write deadline cuts the client). A
	// client caught up is sent any event, however large.
	maxSSEBufferBytes = 16 << 20
	// maxYAMLBytes caps an object's YAML (?format=yaml): its length grows
	// with the square of the object's depth. An object is at most 1.5 MB
	// (etcd's limit), and its YAML about as long unless it nests deep;
	// beyond, 406 and JSON is still served. maxYAMLRenders caps the YAML
	// answers made at once, each holding up to maxYAMLBytes and the
	// object decoded again: beyond, 503 with Retry-After.
	maxYAMLBytes   = 8 << 20
	maxYAMLRenders = 4
	// maxYAMLNodes caps the fields and list items of an object made into
	// YAML: converting costs about 2.7 KB of memory for each (go-yaml's
	// decoding and encoding), 27 MB at the cap, where a 1.1 MB object of
	// 60,000 keys took 450 MB. Beyond, 406 and JSON is still served.
	maxYAMLNodes = 10000
	// maxSelectorLen caps ?label=: a selector is parsed and matched
	// against every object; real ones are a few dozen bytes.
	maxSelectorLen = 4 << 10
	// defaultWriteTimeout is how long one write to a client may take: a
	// chunk of /objects, an event. A client that reads nothing for that
	// long is cut off, and frees what its answer holds.
	defaultWriteTimeout = 30 * time.Second
	// defaultObjectRequests caps the /objects requests served at once:
	// each holds a sorted list of its objects' keys until written.
	defaultObjectRequests = 16
	// defaultSSEClients is --max-sse-clients' default: each event-stream
	// client holds a connection, a goroutine and its buffer. /events and
	// /events/feed have a cap each: clients of one cannot starve the
	// other, and the page's feed stays reachable.
	defaultSSEClients = 256
	// defaultStreamLifetime is how long an event stream is served before
	// it ends with "event: reconnect". A client that holds a stream
	// without reading it is cut when a write stalls past the write
	// deadline, but a quiet stream writes little (a keepalive every 20 s):
	// its socket's buffers may take days to fill. The lifetime bounds how
	// long such a client holds a slot. Clients reconnect by design
	// (EventSource does it by itself, after the stream's "retry:"), and
	// /events/feed resumes where it stopped (Last-Event-ID).
	defaultStreamLifetime = 10 * time.Minute
	// maxHeaderBytes caps a request's head (its request line and headers):
	// Go's default, 1 MiB, let 2,000 connections that never ended their
	// headers take 4.6 GB. serve's requests are small: a label selector
	// is at most 4 KiB (12 KiB percent-encoded), and browsers' headers a
	// few more. Beyond, 431 and the connection is closed.
	maxHeaderBytes = 32 << 10
	// defaultMaxConnections is --max-connections' default: enough for
	// --max-sse-clients clients of /events and as many of /events/feed,
	// the /objects requests and the page's. Each connection costs at most
	// about 100 KiB while its head is read (the head, Go's buffers, its
	// goroutine), so the cap bounds a flood's memory at about 100 MiB.
	defaultMaxConnections = 1024
	// slowHeadGrace is how long a new connection may take over its first
	// request head before it gives way, while every slot is taken, to a
	// connection waiting for one. A client writes its head as soon as it
	// has connected, right behind the handshake's last packet: a head of
	// a few KiB is there within milliseconds of the accept, wherever the
	// client is; the largest we take, 32 KiB, needs two more round trips
	// of TCP's slow start (its first window is about 14 KiB): 2 s covers
	// them even over a satellite link (600 ms round trips). A browser's
	// socket opened ahead of its request is closed like an idle one: it
	// opens another. Connections trickling their heads (Slowloris) held
	// every slot until ReadHeaderTimeout (10 s) cut them, and
	// reconnected: the clients behind waited as long as the flood went
	// on. Now such a connection gives way after slowHeadGrace to one that
	// waits. Nothing is closed while a slot is free.
	slowHeadGrace = 2 * time.Second
	// slowHeadRetry is how often a connection waiting for a slot looks
	// again for a head slower than slowHeadGrace: the ones there when it
	// came may have been younger.
	slowHeadRetry = 200 * time.Millisecond
	// retryAfter is the Retry-After, in seconds, of a request refused
	// because too many are in flight.
	retryAfter = "2"
)

// newHTTPServer is serve's HTTP server, for connections from conns (see
// connLimit; nil: no cap). WriteTimeout bounds every answer; the streaming
// ones (/objects, the event streams) extend their deadline before each
// write. There is no ReadTimeout: it would also expire the connection's
// background read during a long event stream, and cancel it.
func newHTTPServer(h http.Handler, errorLog *log.Logger, conns *connLimit) *http.Server {
	hs := &http.Server{
		Handler:           h,
		ReadHeaderTimeout: 10 * time.Second, // slow headers (Slowloris)
		MaxHeaderBytes:    maxHeaderBytes,   // headers that never end
		WriteTimeout:      2 * defaultWriteTimeout,
		IdleTimeout:       2 * time.Minute, // idle keep-alive connections
		ErrorLog:          errorLog,
	}
	if conns != nil {
		hs.ConnState = conns.track
	}
	return hs
}

// connLimit is serve's listener: at most max connections are served at
// once. Beyond, a new connection waits, unread, until one closes, and
// the next ones in the kernel's backlog (a client sees a slow answer, not
// an error): a flood costs the connections' memory only up to the cap.
// Connections that do not use their slot give way to one that waits:
// keep-alive connections between requests are closed at once (a client
// reconnects for its next request, as after IdleTimeout), and those still
// reading their first request head after slowHeadGrace, oldest first (a
// real client's head arrives in milliseconds).
type connLimit struct {
	net.Listener
	slots     chan struct{} // a token for each open connection
	done      chan struct{} // closed by Close: Accept waits no more
	closeOnce sync.Once

	mu      sync.Mutex // guards idle and reading
	idle    map[net.Conn]struct{}
	reading map[net.Conn]time.Time // reading their first request head, since
}

func limitConnections(ln net.Listener, max int) *connLimit {
	return &connLimit{
		Listener: ln,
		slots:    make(chan struct{}, max),
		done:     make(chan struct{}),
		idle:     map[net.Conn]struct{}{},
		reading:  map[net.Conn]time.Time{},
	}
}

// Accept accepts a connection, then waits for a free slot for it. The
// connection is accepted first so that others are closed only for a
// client that is there; while it waits, it is not read from, and the next
// ones wait in the backlog. It closes the idle connections once, and
// looks for a slow first head every slowHeadRetry: closing one gives its
// slot to this connection (Accept is called by one goroutine, the
// server's).
func (l *connLimit) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	select {
	case l.slots <- struct{}{}:
		return &limitedConn{Conn: c, l: l}, nil
	default:
	}
	l.closeIdle() // full: idle keep-alive connections make room
	retry := time.NewTicker(slowHeadRetry)
	defer retry.Stop()
	for {
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		default:
		}
		l.closeSlowHead(time.Now().Add(-slowHeadGrace))
		select {
		case l.slots <- struct{}{}:
			return &limitedConn{Conn: c, l: l}, nil
		case <-retry.C:
		case <-l.done:
			c.Close()
			return nil, net.ErrClosed
		}
	}
}

func (l *connLimit) Close() error {
	l.closeOnce.Do(func() { close(l.done) })
	return l.Listener.Close()
}

// full reports whether every slot is taken.
func (l *connLimit) full() bool { return len(l.slots) == cap(l.slots) }

// track is the HTTP server's ConnState hook: it keeps the sets of idle
// connections and of those reading their first request head (StateNew
// until a head has been read; a keep-alive connection reading its next
// one is idle), and closes one that becomes idle while all slots are
// taken (a connection may be waiting for one).
func (l *connLimit) track(c net.Conn, state http.ConnState) {
	l.mu.Lock()
	defer l.mu.Unlock()
	delete(l.idle, c)
	delete(l.reading, c)
	switch state {
	case http.StateNew:
		l.reading[c] = time.Now()
	case http.StateIdle:
		if l.full() {
			closeConn(c)
			return
		}
		l.idle[c] = struct{}{}
	}
}

func (l *connLimit) closeIdle() {
	l.mu.Lock()
	defer l.mu.Unlock()
	for c := range l.idle {
		closeConn(c)
		delete(l.idle, c)
	}
}

// closeSlowHead closes the connection that has been reading its first
// request head the longest, if it began before since and every slot is
// still taken: one connection waits, one makes room.
func (l *connLimit) closeSlowHead(since time.Time) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if !l.full() {
		return
	}
	var oldest net.Conn
	for c, t := range l.reading {
		if t.Before(since) {
			oldest, since = c, t
		}
	}
	if oldest != nil {
		closeConn(oldest)
		delete(l.reading, oldest)
	}
}

// closeConn closes c, a TLS connection by its TCP connection: tls.Conn's
// Close first sends an alert, which blocks (up to 5 s) when the client
// does not read, and connLimit closes connections holding its lock.
func closeConn(c net.Conn) {
	if tc, ok := c.(*tls.Conn); ok {
		tc.NetConn().Close()
		return
	}
	c.Close()
}

// limitedConn gives its slot back when closed.
type limitedConn struct {
	net.Conn
	l         *connLimit
	closeOnce sync.Once
}

func (c *limitedConn) Close() error {
	err := c.Conn.Close()
	c.closeOnce.Do(func() { <-c.l.slots })
	return err
}

// CloseWrite half-closes a TCP connection, as the HTTP server does before
// it closes one it answered with an error (431): the client reads the
// answer before the connection is reset.
func (c *limitedConn) CloseWrite() error {
	if cw, ok := c.Conn.(interface{ CloseWrite() error }); ok {
		return cw.CloseWrite()
	}
	return nil
}

// limiter caps how many of something are in flight; its zero value
// refuses everything.
type limiter struct {
	max int64 // set before use
	n   atomic.Int64
}

// acquire takes a slot, false if all are taken; release gives it back.
func (l *limiter) acquire() bool {
	if l.n.Add(1) > l.max {
		l.n.Add(-1)
		return false
	}
	return true
}

func (l *limiter) release() { l.n.Add(-1) }

// tooMany answers 503 with Retry-After: too many requests of a kind.
func tooMany(w http.ResponseWriter, format string, args ...any) {
	w.Header().Set("Retry-After", retryAfter)
	writeError(w, http.StatusServiceUnavailable, format, args...)
}

// setHostCheck makes the server answer only requests whose Host is a
// loopback name (localhost, 127.0.0.1, [::1], any port) or matches
// accept, when it is bound to a loopback address (loopback) or when
// accept is given. Off loopback without accept, any Host is answered:
// the server is reachable by name from elsewhere, and says so at start.
func (s *server) setHostCheck(loopback bool, accept *regexp.Regexp) {
	if !loopback && accept == nil {
		s.hostAllowed = nil
		return
	}
	s.hostAllowed = func(host string) bool {
		return isLoopbackHost(host) || accept != nil && accept.MatchString(hostname(host))
	}
}

// compileAcceptHosts compiles --accept-hosts, anchored: it must match a
// host name as a whole. Unanchored, kinformer.internal would also match
// kinformer.internal.evil.example, a name any site can point at
// 127.0.0.1.
func compileAcceptHosts(expr string) (*regexp.Regexp, error) {
	if _, err := regexp.Compile(expr); err != nil {
		return nil, err // the error quotes expr as given
	}
	return regexp.Compile(`^(?:` + expr + `)$`)
}

// hasLoneDot reports whether expr, a valid regular expression, has a "."
// that is not repeated (not in .* or .+): most likely meant as the dot of
// a domain name, it matches any character, so kinformer.internal also
// accepts kinformerXinternal, a name anyone may register and point at
// 127.0.0.1.
func hasLoneDot(expr string) bool {
	re, err := syntax.Parse(expr, syntax.Perl)
	if err != nil {
		return false
	}
	var lone func(re *syntax.Regexp, repeated bool) bool
	lone = func(re *syntax.Regexp, repeated bool) bool {
		switch re.Op {
		case syntax.OpAnyChar, syntax.OpAnyCharNotNL:
			return !repeated
		case syntax.OpStar, syntax.OpPlus, syntax.OpQuest, syntax.OpRepeat:
			repeated = true
		default:
			repeated = false
		}
		return slices.ContainsFunc(re.Sub, func(sub *syntax.Regexp) bool { return lone(sub, repeated) })
	}
	return lone(re, false)
}

// hostname is the Host header without its port or brackets.
func hostname(host string) string {
	if h, _, err := net.SplitHostPort(host); err == nil {
		return h
	}
	return strings.TrimSuffix(strings.TrimPrefix(host, "["), "]")
}

// isLoopbackHost reports whether a Host header names this machine in a way
// no other site can: "localhost" or a loopback address. A page from
// evil.example whose name was rebound to 127.0.0.1 still sends Host:
// evil.example.
func isLoopbackHost(host string) bool {
	h := hostname(host)
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// guard wraps the handler with what every response needs: nosniff, no-store
// and the Host check. Answers hold the cluster's objects (Secrets among
// them), its names and its errors: no cache, the browser's included, may
// keep a copy ("no-cache" lets them keep one, to revalidate). The page
// itself, which holds none, says no-cache instead.
func (s *server) guard(next http.Handler) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		w.Header().Set("X-Content-Type-Options", "nosniff")
		w.Header().Set("Cache-Control", "no-store")
		if s.hostAllowed != nil && !s.hostAllowed(req.Host) {
			writeError(w, http.StatusForbidden, "Host %q is not allowed: this server is bound to a loopback address and answers only "+
				"requests for localhost, 127.0.0.1 or [::1], so that a web page cannot read it through DNS rebinding; "+
				"allow other names with --accept-hosts", req.Host)
			return
		}
		if !s.token.check(w, req, func() bool { return len(s.notReady()) == 0 }, s.clientCerts, s.clientCertNames) {
			return
		}
		next.ServeHTTP(w, req)
	})
}

// deadlineWriter writes to a response, each write with a fresh deadline:
// a client may be slow, but not stalled.
type deadlineWriter struct {
	w       http.ResponseWriter
	rc      *http.ResponseController
	timeout time.Duration
}

func (d deadlineWriter) Write(p []byte) (int, error) {
	if err := d.rc.SetWriteDeadline(time.Now().Add(d.timeout)); err != nil && err != http.ErrNotSupported {
		return 0, fmt.Errorf("setting the write deadline: %w", err)
	}
	return d.w.Write(p)
}

// keepaliveInterval is how often an event stream writes a comment when it
// has nothing else to write: proxies keep it open, and a client that
// stopped reading is found out when its socket is full.
const keepaliveInterval = 20 * time.Second

// lifetimeMessage is why an event stream ended at its lifetime.
func (s *server) lifetimeMessage() string {
	return fmt.Sprintf("event streams are served for %v at most; reconnect", s.streamLifetime)
}
