package integration

import (
	"math/rand/v2"
	"net"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"k8s.io/client-go/rest"
)

// faultProxy is a TCP proxy on loopback between an informer and the API
// server, for the chaos soak. It forwards bytes as they come (TLS passes
// through untouched: the client still negotiates HTTP/2 with the server),
// and on demand it
//   - holds: stops forwarding in both directions without closing anything,
//     on the connections open and on those accepted meanwhile (a black hole:
//     the kernel still acknowledges what the client sends, so TCP keepalive
//     sees nothing wrong; only the application can tell);
//   - releases: forwards again, on every held connection (the partition
//     healed), or only on new ones, leaving the held connections stalled
//     for good (a middlebox that lost their state: the client must notice
//     by itself);
//   - cuts: resets every open connection, both sides, at once.
type faultProxy struct {
	ln       net.Listener
	upstream string // host:port of the API server

	mu    sync.Mutex // guards conns, gate
	conns map[*proxyConn]struct{}
	gate  chan struct{} // closed while forwarding; open (blocking) while holding

	accepted atomic.Int64 // connections accepted, ever
	wg       sync.WaitGroup

	// lag delays every chunk from the server by this many nanoseconds
	// (a slow server, or a long way to it); see pipeLagged.
	lag atomic.Int64
	// flap, while set, resets every connection accepted 1-3 s after it
	// opens (a flapping link: a middlebox that drops its connections).
	flap atomic.Bool
}

// proxyConn is one client connection and its upstream.
type proxyConn struct {
	client net.Conn
	gate   chan struct{} // forwarding while closed; guarded by faultProxy.mu
	stuck  bool          // held for good; guarded by faultProxy.mu
	dead   chan struct{} // closed by close

	mu     sync.Mutex // guards server and closed
	server net.Conn
	closed bool
}

// setServer records the upstream connection; false (and s reset) if c was
// closed meanwhile.
func (c *proxyConn) setServer(s net.Conn) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		reset(s)
		return false
	}
	c.server = s
	return true
}

func (c *proxyConn) close() {
	c.mu.Lock()
	if c.closed {
		c.mu.Unlock()
		return
	}
	c.closed = true
	server := c.server
	c.mu.Unlock()
	close(c.dead)
	reset(c.client)
	if server != nil {
		reset(server)
	}
}

// reset closes conn with a TCP RST, not a FIN: abruptly.
func reset(conn net.Conn) {
	if tc, ok := conn.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = conn.Close()
}

func closedGate() chan struct{} {
	c := make(chan struct{})
	close(c)
	return c
}

// newFaultProxy starts a proxy to upstream (host:port) and closes it in
// t.Cleanup.
func newFaultProxy(t testing.TB, upstream string) *faultProxy {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &faultProxy{ln: ln, upstream: upstream, conns: map[*proxyConn]struct{}{}, gate: closedGate()}
	p.wg.Add(1)
	go p.accept()
	t.Cleanup(p.close)
	return p
}

// Addr returns the proxy's host:port.
func (p *faultProxy) Addr() string { return p.ln.Addr().String() }

// config returns a copy of cfg that reaches the server through the proxy,
// still verifying the server's certificate for the server's own host name.
func (p *faultProxy) config(t testing.TB, cfg *rest.Config) *rest.Config {
	t.Helper()
	cfg = rest.CopyConfig(cfg)
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	cfg.TLSClientConfig.ServerName = u.Hostname()
	u.Host = p.Addr()
	cfg.Host = u.String()
	// A Proxy func keeps client-go from sharing a cached transport (and
	// its connections) with other clients of the same credentials.
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return cfg
}

func (p *faultProxy) accept() {
	defer p.wg.Done()
	for {
		client, err := p.ln.Accept()
		if err != nil {
			return // closed
		}
		p.accepted.Add(1)
		c := &proxyConn{client: client, dead: make(chan struct{})}
		p.mu.Lock()
		c.gate = p.gate
		p.conns[c] = struct{}{}
		p.mu.Unlock()
		if p.flap.Load() {
			time.AfterFunc(time.Second+rand.N(2*time.Second), c.close)
		}
		p.wg.Add(1)
		go p.serve(c)
	}
}

func (p *faultProxy) serve(c *proxyConn) {
	defer p.wg.Done()
	defer func() {
		c.close()
		p.mu.Lock()
		delete(p.conns, c)
		p.mu.Unlock()
	}()
	// A held proxy does not even dial: a new connection hangs in its TLS
	// handshake, as behind a partition.
	if !p.wait(c) {
		return
	}
	server, err := net.Dial("tcp", p.upstream)
	if err != nil {
		return // the server is down: the client sees the connection close
	}
	if !c.setServer(server) {
		return
	}
	done := make(chan struct{}, 2)
	go func() { p.pipe(c, server, c.client); done <- struct{}{} }()
	go func() { p.pipeLagged(c, c.client, server); done <- struct{}{} }()
	<-done // either side ended: end both
	c.close()
	<-done
}

// pipe copies src to dst, passing each chunk through c's gate.
func (p *faultProxy) pipe(c *proxyConn, dst, src net.Conn) {
	buf := make([]byte, 32<<10)
	for {
		n, err := src.Read(buf)
		if n > 0 {
			if !p.wait(c) {
				return
			}
			if _, werr := dst.Write(buf[:n]); werr != nil {
				return
			}
		}
		if err != nil {
			return // EOF or reset: serve ends both sides
		}
	}
}

// pipeLagged is pipe with each chunk written p.lag after it was read:
// a reader goroutine takes chunks as they come, so that a lag does not add
// up from one chunk to the next.
func (p *faultProxy) pipeLagged(c *proxyConn, dst, src net.Conn) {
	type chunk struct {
		at time.Time
		b  []byte
	}
	chunks := make(chan chunk, 1024)
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		defer close(chunks)
		for {
			buf := make([]byte, 32<<10)
			n, err := src.Read(buf)
			if n > 0 {
				select {
				case chunks <- chunk{time.Now(), buf[:n]}:
				case <-c.dead:
					return
				}
			}
			if err != nil {
				return
			}
		}
	}()
	for ch := range chunks {
		if d := time.Until(ch.at.Add(time.Duration(p.lag.Load()))); d > 0 {
			select {
			case <-time.After(d):
			case <-c.dead:
				return
			}
		}
		if !p.wait(c) {
			return
		}
		if _, err := dst.Write(ch.b); err != nil {
			return
		}
	}
}

// wait blocks while c is held; false if c was closed meanwhile.
func (p *faultProxy) wait(c *proxyConn) bool {
	for {
		p.mu.Lock()
		g := c.gate
		p.mu.Unlock()
		select {
		case <-g:
			p.mu.Lock()
			same := c.gate == g
			p.mu.Unlock()
			if same {
				return true
			}
		case <-c.dead:
			return false
		}
	}
}

// holding reports whether the proxy holds new connections. p.mu held.
func (p *faultProxy) holding() bool {
	select {
	case <-p.gate:
		return false
	default:
		return true
	}
}

// hold stops forwarding on every connection, open or new.
func (p *faultProxy) hold() {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.holding() {
		return
	}
	p.gate = make(chan struct{})
	for c := range p.conns {
		if !c.stuck {
			c.gate = p.gate
		}
	}
}

// release forwards again: on every held connection if heal, else only on
// connections accepted from now on (the held ones stay stalled until they
// are cut or their client closes them).
func (p *faultProxy) release(heal bool) {
	p.mu.Lock()
	defer p.mu.Unlock()
	if !p.holding() {
		return
	}
	if heal {
		close(p.gate)
	} else {
		for c := range p.conns {
			if c.gate == p.gate {
				c.stuck = true
			}
		}
	}
	p.gate = closedGate()
}

// cut resets every open connection, both sides.
func (p *faultProxy) cut() int {
	p.mu.Lock()
	conns := make([]*proxyConn, 0, len(p.conns))
	for c := range p.conns {
		conns = append(conns, c)
		delete(p.conns, c)
	}
	p.mu.Unlock()
	for _, c := range conns {
		c.close()
	}
	return len(conns)
}

// open returns the number of open connections.
func (p *faultProxy) open() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return len(p.conns)
}

func (p *faultProxy) close() {
	_ = p.ln.Close()
	p.cut()
	p.wg.Wait()
}
