package testenv

import (
	"net"
	"net/http"
	"net/url"
	"sync"
	"testing"

	"k8s.io/client-go/rest"
)

// CutProxy is a TCP proxy in front of an API server whose connections a
// test can cut: Down resets every open connection and each new one until
// Up, as a network that drops everything for a while. (integration's
// faultProxy has more faults: black holes, slow and half-open links.)
type CutProxy struct {
	ln    net.Listener
	wg    sync.WaitGroup
	mu    sync.Mutex // guards to, down and conns
	to    string
	down  bool
	conns map[net.Conn]struct{}
}

// NewCutProxy starts a proxy to cfg's server, stopped when t ends, and
// returns it with a copy of cfg that goes through it, on a transport of
// its own (none client-go caches for these credentials).
func NewCutProxy(t testing.TB, cfg *rest.Config) (*CutProxy, *rest.Config) {
	t.Helper()
	u, err := url.Parse(cfg.Host)
	if err != nil {
		t.Fatal(err)
	}
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	p := &CutProxy{ln: ln, to: u.Host, conns: map[net.Conn]struct{}{}}
	p.wg.Go(p.accept)
	t.Cleanup(func() {
		_ = ln.Close()
		p.Down() // and stays down: nothing is added after the cut
		p.wg.Wait()
	})
	cfg = rest.CopyConfig(cfg)
	cfg.TLSClientConfig.ServerName = u.Hostname()
	u.Host = ln.Addr().String()
	cfg.Host = u.String()
	cfg.Proxy = func(*http.Request) (*url.URL, error) { return nil, nil }
	return p, cfg
}

// Down resets every open connection, and every new one until Up.
func (p *CutProxy) Down() {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.down = true
	for c := range p.conns {
		resetConn(c)
	}
}

// SwitchTo makes new connections lead to the server of cfg, and resets
// every open one: the name a client knows now names another server (a
// DNS name, a load balancer moved to another cluster). With the same
// certificate authority and credentials (testenv.WithPKIOf) the client
// goes on without an error.
func (p *CutProxy) SwitchTo(cfg *rest.Config) error {
	u, err := url.Parse(cfg.Host)
	if err != nil {
		return err
	}
	p.mu.Lock()
	p.to = u.Host
	for c := range p.conns {
		resetConn(c)
	}
	p.mu.Unlock()
	return nil
}

// Up lets new connections through again.
func (p *CutProxy) Up() {
	p.mu.Lock()
	p.down = false
	p.mu.Unlock()
}

func (p *CutProxy) accept() {
	for {
		c, err := p.ln.Accept()
		if err != nil {
			return
		}
		p.wg.Go(func() { p.serve(c) })
	}
}

func (p *CutProxy) serve(c net.Conn) {
	if !p.track(c) {
		resetConn(c)
		return
	}
	p.mu.Lock()
	to := p.to
	p.mu.Unlock()
	s, err := net.Dial("tcp", to)
	if err != nil || !p.track(s) {
		if s != nil {
			resetConn(s)
		}
		resetConn(c)
		p.untrack(c)
		return
	}
	done := make(chan struct{}, 2)
	pipe := func(dst, src net.Conn) {
		buf := make([]byte, 32<<10)
		for {
			n, err := src.Read(buf)
			if n > 0 {
				if _, err := dst.Write(buf[:n]); err != nil {
					break
				}
			}
			if err != nil {
				break
			}
		}
		done <- struct{}{}
	}
	go pipe(s, c)
	go pipe(c, s)
	<-done
	resetConn(c)
	resetConn(s)
	<-done
	p.untrack(c)
	p.untrack(s)
}

// track adds c to the open connections, unless the proxy is down.
func (p *CutProxy) track(c net.Conn) bool {
	p.mu.Lock()
	defer p.mu.Unlock()
	if p.down {
		return false
	}
	p.conns[c] = struct{}{}
	return true
}

func (p *CutProxy) untrack(c net.Conn) {
	p.mu.Lock()
	delete(p.conns, c)
	p.mu.Unlock()
}

// resetConn closes c with a TCP reset, as a dropped link is seen.
func resetConn(c net.Conn) {
	if tc, ok := c.(*net.TCPConn); ok {
		_ = tc.SetLinger(0)
	}
	_ = c.Close()
}
