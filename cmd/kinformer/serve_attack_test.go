package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	sigsyaml "sigs.k8s.io/yaml"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// serve tried as an attacker would: requests whose headers never end,
// connections by the thousand. The cheap checks run always; the heavy
// measurement of the real command (2,000 connections, 1 MiB header lines)
// runs with KINFORMER_MEASURE_FLOOD=1:
//
//	KINFORMER_MEASURE_FLOOD=1 go test -run TestServeHeaderFloodRSS -v -count=1 .

// flood is a header flood: connections that each send a request line and
// then one header line of up to lineBytes, never its end.
type flood struct {
	conns      []net.Conn
	mu         sync.Mutex     // guards conns
	wg         sync.WaitGroup // the writers
	readers    sync.WaitGroup // the readers of the answers: until the connection ends
	sent       atomic.Int64   // header bytes written, all connections
	tooLarge   atomic.Int64   // connections answered 431
	cut        atomic.Int64   // connections closed or reset by the server, without a 431
	dialFailed atomic.Int64
}

// startFlood opens n connections to addr, each sending up to lineBytes of
// one header line in 16 KiB writes, each write with a deadline of
// writeWait (a server that does not read stalls them). It returns at once;
// wait waits until every connection has sent all it could.
func startFlood(addr string, n, lineBytes int, writeWait time.Duration) *flood {
	f := &flood{}
	chunk := bytes.Repeat([]byte("a"), 16<<10)
	sem := make(chan struct{}, 256) // dials at once: the backlog is finite
	for range n {
		f.wg.Add(1)
		go func() {
			defer f.wg.Done()
			sem <- struct{}{}
			conn, err := net.DialTimeout("tcp", addr, 10*time.Second)
			<-sem
			if err != nil {
				f.dialFailed.Add(1)
				return
			}
			f.mu.Lock()
			f.conns = append(f.conns, conn)
			f.mu.Unlock()
			// Read what the server says, if anything: 431, or nothing
			// (the connection closed or reset).
			f.readers.Add(1)
			go func() {
				defer f.readers.Done()
				resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
				if err == nil {
					resp.Body.Close()
					if resp.StatusCode == http.StatusRequestHeaderFieldsTooLarge {
						f.tooLarge.Add(1)
						return
					}
				}
				if !isClosedByUs(err) {
					f.cut.Add(1)
				}
			}()
			_ = conn.SetWriteDeadline(time.Now().Add(writeWait))
			if _, err := io.WriteString(conn, "GET /healthz HTTP/1.1\r\nHost: localhost\r\nX-Flood: "); err != nil {
				return
			}
			for left := lineBytes; left > 0; {
				b := chunk[:min(left, len(chunk))]
				if _, err := conn.Write(b); err != nil {
					return
				}
				f.sent.Add(int64(len(b)))
				left -= len(b)
			}
		}()
	}
	return f
}

func isClosedByUs(err error) bool {
	return err != nil && strings.Contains(err.Error(), "use of closed network connection")
}

func (f *flood) wait() { f.wg.Wait() }

// close closes every connection, once the writers are done, and waits
// for the readers.
func (f *flood) close() {
	f.wg.Wait()
	f.mu.Lock()
	for _, c := range f.conns {
		c.Close()
	}
	f.conns = nil
	f.mu.Unlock()
	f.readers.Wait()
}

// procStatus reads a field of /proc/PID/status in KiB (VmRSS, VmHWM); 0
// where there is no /proc.
func procStatus(pid int, field string) int64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(l, field+":"); ok {
			n, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(v), " kB"), 10, 64)
			return n
		}
	}
	return 0
}

// The measurement behind the numbers in docs/reliability.md: the real
// command, 2,000 connections each sending a 1 MiB header line and never
// its end; the process's RSS at its peak, while the connections are held,
// and 20 s after they closed.
func TestServeHeaderFloodRSS(t *testing.T) {
	if os.Getenv("KINFORMER_MEASURE_FLOOD") == "" {
		t.Skip("a heavy measurement: set KINFORMER_MEASURE_FLOOD=1")
	}
	if runtime.GOOS != "linux" {
		t.Skip("reads /proc")
	}
	conns, line := 2000, 1<<20
	if v, err := strconv.Atoi(os.Getenv("KINFORMER_FLOOD_CONNS")); err == nil {
		conns = v
	}
	srv := testenv.Shared(t)
	p, base := startServe(t, "namespaces", kubeconfigArg(srv))
	waitReady(t, base)
	pid := p.cmd.Process.Pid
	addr := strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/")
	get(t, base+"stats")
	t.Logf("before: RSS %d MiB", procStatus(pid, "VmRSS")>>10)

	start := time.Now()
	f := startFlood(addr, conns, line, 30*time.Second)
	f.wait()
	held := procStatus(pid, "VmRSS")
	t.Logf("%d connections x %d KiB header line: sent %d MiB in %v; %d answered 431, %d cut, %d dials failed",
		conns, line>>10, f.sent.Load()>>20, time.Since(start).Round(time.Millisecond), f.tooLarge.Load(), f.cut.Load(), f.dialFailed.Load())
	t.Logf("while held: RSS %d MiB, peak (VmHWM) %d MiB", held>>10, procStatus(pid, "VmHWM")>>10)
	if code, _ := get(t, base+"healthz"); code != 200 {
		t.Errorf("/healthz during the flood: %d", code)
	}
	f.close()
	time.Sleep(20 * time.Second)
	t.Logf("20 s after closing: RSS %d MiB, peak (VmHWM) %d MiB", procStatus(pid, "VmRSS")>>10, procStatus(pid, "VmHWM")>>10)
	if code := p.interrupt(); code != 0 {
		t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
	}
}

// noGoroutinesLeft fails the test if goroutines it started are still
// running once it and its cleanups are done. Call it first, in a test that
// is not parallel.
func noGoroutinesLeft(t *testing.T) {
	before := goleak.IgnoreCurrent()
	t.Cleanup(func() { goleak.VerifyNone(t, before) })
}

// startHTTP serves h as serve does (newHTTPServer, at most maxConns
// connections) on a free loopback port, until the test ends.
func startHTTP(t *testing.T, h http.Handler, maxConns int) (addr string, conns *connLimit) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns = limitConnections(ln, maxConns)
	hs := newHTTPServer(h, nil, conns)
	served := make(chan struct{})
	go func() {
		defer close(served)
		_ = hs.Serve(conns)
	}()
	t.Cleanup(func() {
		// Shutdown, not Close: it waits for the connections' goroutines
		// (one that answered 431 lingers half a second before it closes).
		// Its context does not bound a connection's Close, which it calls
		// holding the server's lock: a Close that blocks (a slot given
		// back twice empties the slots, and the next one waits for a
		// token) would hang the test until go test's -timeout. So it is
		// waited for a while, then the test fails, leaving it blocked.
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		shut := make(chan error, 1)
		go func() { shut <- hs.Shutdown(ctx) }()
		select {
		case err := <-shut:
			if err != nil {
				t.Errorf("shutting the server down: %v", err)
				_ = hs.Close()
			}
		case <-time.After(time.Minute):
			t.Errorf("shutting the server down: not done within a minute, though its context ends after 30 s: "+
				"a connection's Close blocks (%d of %d connection slots taken; a slot given back twice?)", len(conns.slots), cap(conns.slots))
			return
		}
		select {
		case <-served:
		case <-time.After(time.Minute):
			t.Errorf("the server's Serve did not return within a minute of its shutdown")
		}
	})
	return ln.Addr().String(), conns
}

// listenLimited listens on a free loopback port, for at most max
// connections at once, until the test ends.
func listenLimited(t *testing.T, max int) *connLimit {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	conns := limitConnections(ln, max)
	t.Cleanup(func() { conns.Close() })
	return conns
}

// dialAccepted connects to conns and accepts the connection, a slot being
// free (Accept returns at once): the client's end, closed when the test
// ends, and the server's, left to the test (its Close gives the slot
// back: one more, where that is broken, would block the test's end).
func dialAccepted(t *testing.T, conns *connLimit) (client, server net.Conn) {
	t.Helper()
	c, err := net.Dial("tcp", conns.Addr().String())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { c.Close() })
	a, err := conns.Accept()
	if err != nil {
		t.Fatal(err)
	}
	return c, a
}

// A connection gives its slot back once, however many times it is closed
// (the HTTP server closes a connection from its goroutine and, shutting
// down, from Shutdown's): a slot given back twice takes another
// connection's, and a Close finding none blocks for ever.
func TestConnLimitSlotGivenBackOnce(t *testing.T) {
	t.Parallel()
	conns := listenLimited(t, 3)
	var accepted []net.Conn
	for range 3 {
		_, a := dialAccepted(t, conns)
		accepted = append(accepted, a)
	}
	// closeConn closes c, failing the test if Close blocks.
	closeConn := func(c net.Conn, what string) {
		t.Helper()
		done := make(chan struct{})
		go func() {
			defer close(done)
			_ = c.Close()
		}()
		select {
		case <-done:
		case <-time.After(30 * time.Second):
			t.Fatalf("%s: Close blocked for 30 s (%d of 3 slots taken)", what, len(conns.slots))
		}
	}
	// Each connection closed twice in turn.
	for i, want := range []int{2, 2, 1, 1, 0, 0} {
		what := fmt.Sprintf("connection %d's close %d", i/2+1, i%2+1)
		closeConn(accepted[i/2], what)
		if got := len(conns.slots); got != want {
			t.Fatalf("after %s: %d of 3 slots taken, want %d", what, got, want)
		}
	}
}

// A keep-alive connection that goes idle while every slot is taken is
// closed at once: a new connection may be waiting for its slot (Accept
// closed the idle ones before it waited, but this one was busy then). One
// that goes idle with a slot free is kept, until a connection finds every
// slot taken.
func TestConnLimitIdleClosedWhenFull(t *testing.T) {
	t.Parallel()
	conns := listenLimited(t, 2)
	// closed reports whether the server closed its end: the client reads
	// EOF (or a reset) rather than waiting.
	closed := func(c net.Conn) bool {
		t.Helper()
		_ = c.SetReadDeadline(time.Now().Add(100 * time.Millisecond))
		_, err := c.Read(make([]byte, 1))
		var ne net.Error
		return !(errors.As(err, &ne) && ne.Timeout())
	}

	c1, a1 := dialAccepted(t, conns)
	defer a1.Close()
	conns.track(a1, http.StateActive)
	conns.track(a1, http.StateIdle) // a slot free: kept
	if closed(c1) || len(conns.slots) != 1 {
		t.Fatalf("a connection idle with a slot free: closed %v, %d of 2 slots taken; want kept", closed(c1), len(conns.slots))
	}
	conns.track(a1, http.StateActive) // its next request

	c2, a2 := dialAccepted(t, conns)
	defer a2.Close()
	conns.track(a2, http.StateActive)
	if !conns.full() {
		t.Fatalf("%d of 2 slots taken, want 2", len(conns.slots))
	}
	conns.track(a1, http.StateIdle) // every slot taken
	if !closed(c1) || len(conns.slots) != 1 {
		t.Fatalf("a connection idle while every slot is taken: closed %v, %d of 2 slots taken; want closed, its slot given back", closed(c1), len(conns.slots))
	}
	if closed(c2) {
		t.Fatal("an active connection was closed")
	}
	conns.track(a1, http.StateClosed)
}

// Through the HTTP server: a new connection that finds every slot taken
// by connections busy with a request (none idle for Accept to close) is
// served as soon as they are done, when they go idle, not after their
// IdleTimeout (2 min).
func TestServeIdleAfterBusyMakesRoom(t *testing.T) {
	noGoroutinesLeft(t)
	const max = 2
	arrived, release := make(chan struct{}, max), make(chan struct{})
	addr, conns := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/busy" {
			arrived <- struct{}{}
			select {
			case <-release:
			case <-time.After(30 * time.Second):
			}
		}
		fmt.Fprintln(w, "ok")
	}), max)
	tr := &http.Transport{MaxIdleConnsPerHost: max} // keep-alive: the connections stay after their request
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	var wg sync.WaitGroup
	for range max {
		wg.Go(func() {
			resp, err := client.Get("http://" + addr + "/busy")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		})
	}
	for range max {
		select {
		case <-arrived:
		case <-time.After(30 * time.Second):
			t.Fatal("the busy requests did not arrive within 30 s")
		}
	}
	if !conns.full() {
		t.Fatalf("%d of %d slots taken, want all", len(conns.slots), max)
	}
	answered := make(chan int, 1)
	go func() {
		answered <- rawRequest(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	}()
	time.Sleep(200 * time.Millisecond) // it waits for a slot (if not yet, Accept closes the idle ones: passes anyway)
	close(release)
	wg.Wait()
	// rawRequest gives up after 30 s, far from the IdleTimeout.
	if code := <-answered; code != 200 {
		t.Fatalf("the connection waiting while every slot was busy: %d, want 200 once they went idle (0: no answer in 30 s)", code)
	}
}

// stalledClients opens n connections to addr that each send req and read
// nothing, with small receive buffers (the server's writes stall after a
// few MiB), until the test ends.
func stalledClients(t *testing.T, addr, req string, n int) []net.Conn {
	t.Helper()
	conns := make([]net.Conn, n)
	for i := range conns {
		conn, err := smallBufferDialer.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { conn.Close() })
		if _, err := io.WriteString(conn, req); err != nil {
			t.Fatal(err)
		}
		conns[i] = conn
	}
	return conns
}

// rawRequest sends req over a new connection to addr and returns the
// status code of the answer (0 if the connection ended without one).
func rawRequest(t *testing.T, addr, req string) int {
	t.Helper()
	conn, err := net.Dial("tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	_ = conn.SetDeadline(time.Now().Add(30 * time.Second))
	go func() { _, _ = io.WriteString(conn, req) }() // the server may answer before reading it all
	resp, err := http.ReadResponse(bufio.NewReader(conn), nil)
	if err != nil {
		return 0
	}
	resp.Body.Close()
	return resp.StatusCode
}

// Headers beyond 32 KiB get 431, and connections that never end their
// headers, by the hundred, do not make the heap grow with each one (Go's
// default, 1 MiB of headers per connection and no cap on connections, took
// 2,000 of them to 4.6 GB).
func TestServeHeaderFlood(t *testing.T) {
	// Not parallel: it measures the heap, and checks for goroutines left.
	noGoroutinesLeft(t)
	s, hs := configMaps(t, 1, 1)
	hs.Close() // unused: served by startHTTP instead
	addr, _ := startHTTP(t, s.handler(), 64)

	header := func(n int) string {
		return "GET /healthz HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\nX-A: " + strings.Repeat("a", n) + "\r\n\r\n"
	}
	if code := rawRequest(t, addr, header(16<<10)); code != 200 {
		t.Errorf("16 KiB of headers: %d, want 200", code)
	}
	if code := rawRequest(t, addr, header(40<<10)); code != http.StatusRequestHeaderFieldsTooLarge {
		t.Errorf("40 KiB of headers: %d, want 431", code)
	}

	const n, line = 300, 256 << 10
	before := heapInUse()
	f := startFlood(addr, n, line, 20*time.Second)
	f.wait()
	// What the server holds now: with no limit, every connection's header
	// line so far (75 MiB and more); with the limits, at most 64
	// connections' 32 KiB.
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d connections x %d KiB header line: the heap grew by %d KiB; %d answered 431, %d cut", n, line>>10, grown>>10, f.tooLarge.Load(), f.cut.Load())
	if grown > 24<<20 {
		t.Errorf("the heap grew by %d MiB with %d connections sending a %d KiB header line", grown>>20, n, line>>10)
	}
	waitFor(t, "every flooding connection answered or cut", 60*time.Second, func() bool { return f.tooLarge.Load()+f.cut.Load() == n })
	if f.tooLarge.Load() == 0 {
		t.Errorf("no connection was answered 431")
	}
	f.close()
	if code := rawRequest(t, addr, header(1)); code != 200 {
		t.Errorf("after the flood: %d, want 200", code)
	}
}

// At most --max-connections connections are open at once: one more waits
// until one closes. Idle keep-alive connections give way to it at once.
func TestServeMaxConnections(t *testing.T) {
	noGoroutinesLeft(t)
	const max = 8
	var inFlight atomic.Int64
	allIn := make(chan struct{})
	addr, conns := startHTTP(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/together" {
			// Answered once max are in flight: max connections.
			if inFlight.Add(1) == max {
				close(allIn)
			}
			select {
			case <-allIn:
			case <-time.After(30 * time.Second):
			}
		}
		fmt.Fprintln(w, "ok")
	}), max)

	// max connections in the middle of their headers hold every slot (for
	// slowHeadGrace: then they give way to one that waits, see
	// serve_slowhead_test.go).
	var held []net.Conn
	for range max {
		c, err := net.Dial("tcp", addr)
		if err != nil {
			t.Fatal(err)
		}
		defer c.Close()
		if _, err := io.WriteString(c, "GET / HTTP/1.1\r\nHost: localhost\r\n"); err != nil {
			t.Fatal(err)
		}
		held = append(held, c)
	}
	waitFor(t, "every slot taken", 10*time.Second, conns.full)
	answered := make(chan int, 1)
	go func() {
		answered <- rawRequest(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
	}()
	select {
	case code := <-answered:
		t.Fatalf("a connection beyond the cap was answered (%d) while all were held", code)
	case <-time.After(300 * time.Millisecond):
	}
	held[0].Close()
	select {
	case code := <-answered:
		if code != 200 {
			t.Errorf("the waiting request: %d, want 200", code)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the waiting request was not answered within 30 s of a slot freed")
	}
	for _, c := range held[1:] {
		c.Close()
	}

	// Keep-alive connections between requests: each made a request and
	// waits for the next. A new connection is served at once, not after
	// their IdleTimeout (2 min).
	tr := &http.Transport{MaxIdleConnsPerHost: max}
	defer tr.CloseIdleConnections()
	client := &http.Client{Transport: tr, Timeout: 30 * time.Second}
	waitFor(t, "the held connections closed", 10*time.Second, func() bool { return len(conns.slots) == 0 })
	var wg sync.WaitGroup
	start := make(chan struct{})
	for range max {
		wg.Add(1)
		go func() {
			defer wg.Done()
			<-start
			resp, err := client.Get("http://" + addr + "/together")
			if err != nil {
				t.Error(err)
				return
			}
			_, _ = io.Copy(io.Discard, resp.Body)
			resp.Body.Close()
		}()
	}
	close(start)
	wg.Wait()
	select {
	case <-allIn:
	default:
		t.Fatalf("%d requests in flight at once, want %d", inFlight.Load(), max)
	}
	if code := rawRequest(t, addr, "GET / HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n"); code != 200 {
		t.Errorf("with the slots held by idle keep-alive connections: %d, want 200", code)
	}
}

// --accept-hosts matches the whole host name: kinformer.internal must not
// let kinformer.internal.evil.example (a name anyone can point at
// 127.0.0.1) read the served objects.
func TestServeAcceptHostsAnchored(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		accept   string
		ok       []string
		rejected []string
	}{
		{`kinformer\.internal`,
			[]string{"kinformer.internal", "kinformer.internal:8080", "localhost"},
			[]string{"kinformer.internal.evil.example", "kinformer.internal.evil.example:8080", "evil-kinformer.internal", "xkinformer.internal"}},
		{`kinformer.internal`, // the dot unescaped: still the whole name
			[]string{"kinformer.internal", "kinformerxinternal"},
			[]string{"kinformer.internal.evil.example"}},
		{`a\.example|b\.example`, // each alternative anchored
			[]string{"a.example", "b.example:80"},
			[]string{"a.example.evil.example", "evil.b.example", "b.example.evil"}},
		{`.*\.svc\.cluster\.local`,
			[]string{"kinformer.ns.svc.cluster.local"},
			[]string{"kinformer.ns.svc.cluster.local.evil.example"}},
	} {
		t.Run(tt.accept, func(t *testing.T) {
			t.Parallel()
			re, err := compileAcceptHosts(tt.accept)
			if err != nil {
				t.Fatal(err)
			}
			checkHosts(t, true, re, tt.ok, tt.rejected)
		})
	}
	if _, err := compileAcceptHosts(`(`); err == nil || !strings.Contains(err.Error(), "`(`") {
		t.Errorf("a bad expression: %v, want an error quoting it as given", err)
	}
}

// While --max-sse-clients clients hold /events, the page's own feed is
// still served: the two are counted apart.
func TestServePageFeedNotStarved(t *testing.T) {
	t.Parallel()
	s, hs := configMaps(t, 1, 1)
	s.sseClients.max = 2
	hs.Config.Handler = s.handler()
	hs.Start()
	openSSE(t, hs.URL+"/events")
	openSSE(t, hs.URL+"/events")
	if code, _ := get(t, hs.URL+"/events"); code != http.StatusServiceUnavailable {
		t.Errorf("/events beyond --max-sse-clients: %d, want 503", code)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, hs.URL+"/events/feed", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("/events/feed while /events is full: %d %s, want 200", resp.StatusCode, b)
	}
	if l, err := bufio.NewReader(resp.Body).ReadString('\n'); err != nil || l != ": feed\n" {
		t.Errorf("/events/feed: first line %q, %v", l, err)
	}
}

// readStream reads an event stream to its end (at most 30 s) and returns
// its lines.
func readStream(t *testing.T, url, lastEventID string) []string {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatalf("GET %s: the stream did not end within 30 s (%v), after %q", url, err, b)
	}
	return strings.Split(string(b), "\n")
}

// An event stream ends at its lifetime, saying so ("event: reconnect"), so
// that a client that holds one without reading frees its slot; the feed's
// client resumes where it stopped.
func TestServeStreamLifetime(t *testing.T) {
	noGoroutinesLeft(t)
	s, hs := configMaps(t, 3, 1)
	s.streamLifetime = 300 * time.Millisecond
	hs.Config.Handler = s.handler()
	hs.Start()

	lines := readStream(t, hs.URL+"/events", "")
	if !slices.Contains(lines, "event: reconnect") {
		t.Errorf("/events ended without event: reconnect: %q", lines)
	}
	lines = readStream(t, hs.URL+"/events/feed", "")
	if !slices.Contains(lines, "event: reconnect") {
		t.Errorf("/events/feed ended without event: reconnect: %q", lines)
	}
	last := ""
	for _, l := range lines {
		if id, ok := strings.CutPrefix(l, "id: "); ok {
			last = id
		}
	}
	if last == "" {
		t.Fatalf("/events/feed: no id in %q", lines)
	}
	// Reconnected with the last id: nothing missed, nothing again.
	lines = readStream(t, hs.URL+"/events/feed", last)
	for _, l := range lines {
		if strings.HasPrefix(l, "data: {\"seq\"") || l == "event: missed" {
			t.Errorf("/events/feed resumed after %s: %q", last, l)
		}
	}
	waitFor(t, "the streams' slots free", 10*time.Second, func() bool {
		return s.sseClients.n.Load() == 0 && s.feedClients.n.Load() == 0
	})
}

// An /events client that stops reading is cut when a write stalls past
// the write deadline, with events still short of its buffer.
func TestServeEventsStalledClient(t *testing.T) {
	noGoroutinesLeft(t)
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	s, hs := configMaps(t, 1, 1)
	s.writeTimeout = 500 * time.Millisecond
	hs.Config.Handler = s.handler()
	hs.Start()
	r := s.resources[0]

	stalledClients(t, strings.TrimPrefix(hs.URL, "http://"), "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n", 1)
	waitFor(t, "the client subscribed", 10*time.Second, func() bool { return r.hub.len() == 1 })
	// Two events of 4 MiB: more than the sockets hold, fewer than the
	// client's buffer (8 events).
	big := configMap("big", strings.Repeat("x", 4<<20))
	for range 2 {
		r.hub.publish(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Modified, Object: big, ResourceVersion: "1"})
	}
	waitFor(t, "the stalled client cut", 30*time.Second, func() bool { return s.sseClients.n.Load() == 0 && r.hub.len() == 0 })
	if n := r.sseDropped.Load(); n != 0 {
		t.Errorf("%d clients dropped for falling behind: the write deadline should have cut it", n)
	}
}

// Answers that hold the cluster's data (objects, Secrets among them; names;
// errors) say Cache-Control: no-store, so that no cache keeps a copy, the
// browser's included; no-cache lets it keep one. The page, which holds
// none, may be cached and revalidated.
func TestServeNoStore(t *testing.T) {
	t.Parallel()
	s, hs := configMaps(t, 1, 1)
	hs.Config.Handler = s.handler()
	hs.Start()
	for _, path := range []string{"/objects", "/objects?resource=cm&label=a%3Db", "/objects/cm/ns/cm-0000", "/objects/cm/ns/cm-0000?format=yaml",
		"/objects/cm/ns/nope", "/objects/nope/x", "/events/recent", "/stats", "/readyz", "/healthz", "/metrics", "/nope"} {
		status, h := answerHeaders(t, hs.URL+path)
		if got := h.Get("Cache-Control"); got != "no-store" {
			t.Errorf("%s (%d): Cache-Control %q, want no-store", path, status, got)
		}
	}
	for _, path := range []string{"/events", "/events/feed"} {
		status, h := answerHeaders(t, hs.URL+path)
		if got := h.Get("Cache-Control"); status != 200 || got != "no-store" {
			t.Errorf("%s (%d): Cache-Control %q, want no-store", path, status, got)
		}
	}
	if _, h := answerHeaders(t, hs.URL+"/"); h.Get("Cache-Control") != "no-cache" {
		t.Errorf("the page: Cache-Control %q, want no-cache", h.Get("Cache-Control"))
	}
}

// openStream opens an event stream with a Last-Event-ID ("" for none),
// until the test ends; its first line is not read.
func openStream(t *testing.T, url, lastEventID string) *sse {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if lastEventID != "" {
		req.Header.Set("Last-Event-ID", lastEventID)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { resp.Body.Close() })
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	return &sse{t: t, resp: resp, r: bufio.NewReaderSize(resp.Body, 1<<20)}
}

// message returns the next message of an event stream that has an id or
// data: its event, id and data. Keepalives do not make it wait longer
// than lineTimeout.
func (s *sse) message() (event, id, data string) {
	s.t.Helper()
	for deadline := time.Now().Add(lineTimeout); ; {
		if time.Now().After(deadline) {
			s.t.Fatalf("event stream: no message for %v", lineTimeout)
		}
		l := s.line()
		switch k, v, _ := strings.Cut(l, ": "); {
		case l == "" && (id != "" || data != ""):
			return event, id, data
		case k == "event":
			event = v
		case k == "id":
			id = v
		case k == "data":
			data = v
		}
	}
}

// A Last-Event-ID beyond the feed's last id (EPOCH-18446744073709551615)
// is not resumed after: the seq after it wrapped to 0, and the whole ring
// was sent again, with "event: missed", on every new event.
func TestServeFeedIDBeyondCounter(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 8, 3)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	for _, name := range []string{"a", "b", "c", "d"} {
		s.recent.add(feedEvent{Resource: "configmaps", Type: kinformer.Added, Namespace: "ns", Name: name})
	}
	// The largest id, and the next one, not given yet.
	for _, beyond := range []func() string{
		func() string { return s.recent.epoch + "-18446744073709551615" },
		func() string { return s.recent.id(s.recent.next) },
	} {
		from := beyond()
		feed := openStream(t, hs.URL+"/events/feed", from)
		// Started afresh: the ring once (the last 3), then each new event
		// once.
		for seq := s.recent.next - 3; seq < s.recent.next; seq++ {
			if event, id, data := feed.message(); event != "" || id != s.recent.id(seq) {
				t.Fatalf("Last-Event-ID %s: %s id %s %s; want id %s", from, event, id, data, s.recent.id(seq))
			}
		}
		s.recent.add(feedEvent{Resource: "configmaps", Type: kinformer.Modified, Namespace: "ns", Name: "a"})
		next := s.recent.id(s.recent.next - 1)
		if event, id, data := feed.message(); event != "" || id != next {
			t.Fatalf("Last-Event-ID %s, then a new event: %s id %s %s; want only id %s", from, event, id, data, next)
		}
		feed.resp.Body.Close()
	}
}

// An unescaped "." in --accept-hosts matches any character:
// kinformer.internal accepts kinformerXinternal, a name anyone may
// register. serve warns of a "." that is not repeated (.* and .+ are
// meant as they are), once, at the start.
func TestServeAcceptHostsLoneDot(t *testing.T) {
	for _, tt := range []struct {
		expr string
		want bool
	}{
		{`kinformer.internal`, true},
		{`a\.example|b.example`, true},
		{`(kinformer|cache).internal`, true},
		{`kinformer\.internal`, false},
		{`kinformer[.]internal`, false},
		{`.*\.svc\.cluster\.local`, false},
		{`.+\.example`, false},
		{`localhost`, false},
	} {
		if got := hasLoneDot(tt.expr); got != tt.want {
			t.Errorf("hasLoneDot(%q) = %v, want %v", tt.expr, got, tt.want)
		}
	}

	srv := testenv.Shared(t)
	warning := `warning: --accept-hosts kinformer.internal: "." matches any character`
	for _, tt := range []struct {
		expr string
		warn bool
	}{{`kinformer.internal`, true}, {`kinformer\.internal`, false}} {
		p, _ := startServe(t, "namespaces", "--accept-hosts", tt.expr, kubeconfigArg(srv))
		stderr := p.stderr.String()
		if got := strings.Count(stderr, "warning: --accept-hosts"); got != map[bool]int{true: 1}[tt.warn] || tt.warn && !strings.Contains(stderr, warning) {
			t.Errorf("--accept-hosts %s: stderr %q; want the warning %v", tt.expr, stderr, tt.warn)
		}
		if code := p.interrupt(); code != 0 {
			t.Errorf("exit %d; stderr:\n%s", code, p.stderr)
		}
	}
}

// A name of any length (Roles take one) made every summary of the feed as
// long: a 200 KB name patched 500 times made /events/recent a 100 MB
// answer, and each /events/feed client that did not read held a copy of
// the whole ring. Names beyond 253 bytes are cut, visibly and told apart
// by a digest: the ring, its answers and its clients hold about 2 KiB an
// event at most.
func TestServeFeedLongNames(t *testing.T) {
	// Not parallel: it measures the heap.
	noGoroutinesLeft(t)
	const events, nameLen = 200, 100 << 10
	s := mustNewServer(t, 8, events)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	role := func(name string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetNamespace("ns")
		o.SetName(name)
		return o
	}
	long := strings.Repeat("r", nameLen)
	valid := strings.Repeat("v", maxNameBytes)
	before := heapInUse()
	for i := range events {
		obj := role(long)
		switch i {
		case events - 2:
			obj = role(long[:nameLen-1] + "s") // differs at its end only
		case events - 1:
			obj = role(valid)
		}
		s.recent.add(newFeedEvent("roles.rbac.authorization.k8s.io", time.Now(), kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Modified, Object: obj, ResourceVersion: "1"}))
	}
	if grown := int64(heapInUse()) - int64(before); grown > 4<<20 {
		t.Errorf("the ring grew the heap by %d MiB: %d events of a %d KiB name", grown>>20, events, nameLen>>10)
	}

	code, body := get(t, hs.URL+"/events/recent")
	if code != 200 || len(body) > 1<<20 {
		t.Errorf("/events/recent: %d, %d bytes; want 200 and at most 1 MiB", code, len(body))
	}
	var recent struct{ Events []feedEvent }
	if err := json.Unmarshal([]byte(body), &recent); err != nil || len(recent.Events) != events {
		t.Fatalf("/events/recent: %v, %d events", err, len(recent.Events))
	}
	first, other, last := recent.Events[0], recent.Events[events-2], recent.Events[events-1]
	if len(first.Name) > maxNameBytes || !strings.HasPrefix(first.Name, "rrrr") || !strings.Contains(first.Name, fmt.Sprintf("…[%d bytes, sha256:", nameLen)) || first.NameBytes != nameLen {
		t.Errorf("a %d-byte name: %q (%d bytes), nameBytes %d; want it cut, visibly, to at most %d", nameLen, first.Name, len(first.Name), first.NameBytes, maxNameBytes)
	}
	if other.Name == first.Name {
		t.Errorf("two long names that differ at their end: both %q", other.Name)
	}
	if last.Name != valid || last.NameBytes != 0 {
		t.Errorf("a %d-byte name: %q, nameBytes %d; want it whole", maxNameBytes, last.Name, last.NameBytes)
	}

	// Feed clients that do not read hold no copy of the ring.
	if smallBufferDialer == nil {
		return
	}
	before = heapInUse()
	const clients = 5
	stalledClients(t, strings.TrimPrefix(hs.URL, "http://"), "GET /events/feed HTTP/1.1\r\nHost: localhost\r\n\r\n", clients)
	waitFor(t, "the feed's clients served", 10*time.Second, func() bool { return s.feedClients.n.Load() == clients })
	time.Sleep(300 * time.Millisecond) // writing until the sockets are full
	if grown := int64(heapInUse()) - int64(before); grown > 4<<20 {
		t.Errorf("%d feed clients that do not read grew the heap by %d MiB", clients, grown>>20)
	}
}

// A feed client is written the ring in chunks: one that does not read
// holds a chunk, not the ring's 65,536 events (--recent-events' most) as
// one buffer and a copy of the ring. One that reads gets every event, in
// order.
func TestServeFeedBacklogInChunks(t *testing.T) {
	// Not parallel: it measures the heap.
	noGoroutinesLeft(t)
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	const events = maxRecentEvents
	s := mustNewServer(t, 8, events)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	for i := range events {
		name := fmt.Sprintf("%05d-%s", i, strings.Repeat("n", maxNameBytes-6))
		s.recent.add(feedEvent{Time: time.Now(), Resource: "configmaps", Type: kinformer.Modified, Namespace: "ns", Name: name, ResourceVersion: "1"})
	}
	before := heapInUse()
	const clients = 5
	stalledClients(t, strings.TrimPrefix(hs.URL, "http://"), "GET /events/feed HTTP/1.1\r\nHost: localhost\r\n\r\n", clients)
	waitFor(t, "the feed's clients served", 10*time.Second, func() bool { return s.feedClients.n.Load() == clients })
	time.Sleep(500 * time.Millisecond) // writing until the sockets are full
	// Without chunks, each held its ring's 29 MiB and a copy of the
	// ring's events (11 MiB): 200 MiB. Under the race detector the heap
	// grows by some 5 MiB a client even so: the bound is checked without.
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d feed clients that do not read, of a ring of %d events: the heap grew by %d KiB", clients, events, grown>>10)
	if grown > 16<<20 && !raceEnabled {
		t.Errorf("%d feed clients that do not read, of a ring of %d events, grew the heap by %d MiB", clients, events, grown>>20)
	}

	feed := openStream(t, hs.URL+"/events/feed", "")
	for seq := uint64(1); seq <= events; seq++ {
		if event, id, _ := feed.message(); event != "" || id != s.recent.id(seq) {
			t.Fatalf("the feed: %s id %s, want id %s", event, id, s.recent.id(seq))
		}
	}
	s.close()
	if event, _, _ := feed.message(); event != "shutdown" {
		t.Errorf("after the ring: %s, want shutdown", event)
	}
}

// watch -o table grew a column to its widest cell: after one name of
// 400,000 characters, every row was padded to as many. A column is laid
// out over the first rows 64 characters wide at most, a longer cell later
// shifts only its own row, and a cell beyond 253 bytes is cut, visibly.
func TestTableLongName(t *testing.T) {
	t.Parallel()
	for _, burst := range []bool{false, true} {
		var stdout, stderr bytes.Buffer
		o := newOutput(&env{prog: "kinformer", stdout: &stdout, stderr: &stderr}, "table", false)
		names := []string{"short", strings.Repeat("n", 400000), strings.Repeat("m", 100), "short"}
		for i, name := range names {
			obj := &unstructured.Unstructured{}
			obj.SetName(name)
			obj.SetResourceVersion("7")
			// burst: all four before the first flush, laid out together.
			o.event(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Modified, Object: obj}, !burst || i == len(names)-1)
		}
		lines := strings.Split(strings.TrimSuffix(stdout.String(), "\n"), "\n")
		if len(lines) != 5 {
			t.Fatalf("burst %v: %d lines, want a header and 4 rows:\n%.2000s", burst, len(lines), stdout.String())
		}
		if !strings.Contains(lines[2], "…[400000 bytes, sha256:") || len(lines[2]) > 400 {
			t.Errorf("burst %v: the row of a 400,000-character name: %d bytes, %.300q; want it cut, visibly", burst, len(lines[2]), lines[2])
		}
		if !strings.Contains(lines[3], strings.Repeat("m", 100)+"   <unknown>") {
			t.Errorf("burst %v: a 100-character name: %q; want it whole", burst, lines[3])
		}
		// The NAME column: laid out over the first row (40, its least),
		// or over the burst (64 characters, no more); a row after the
		// long names as the first.
		width := minColumnWidths["NAME"]
		if burst {
			width = maxColumnWidth
		}
		if want := "MODIFIED   short" + strings.Repeat(" ", width-len("short")+3) + "<unknown>   7"; lines[4] != want || lines[1] != want {
			t.Errorf("burst %v: the rows of a short name:\n%q\n%q\nwant\n%q", burst, lines[1], lines[4], want)
		}
	}
}

// An /events client's buffer is bounded in bytes too, not only in events:
// 20 clients that did not read held 200 updates of a 1 MB object (73 MB
// to 289 MB). A client caught up still gets an event larger than the
// bound.
func TestHubDropsByBytes(t *testing.T) {
	t.Parallel()
	drops := 0
	h := newHub(1024, func() { drops++ })
	h.maxBytes = 10
	slow, fast := h.subscribe(), h.subscribe()
	send := func(b string) {
		h.mu.Lock()
		h.send([]byte(b))
		h.mu.Unlock()
	}
	for _, b := range []string{"aaaa", "bbbb", "cccc"} {
		send(b)
		if got, _ := h.pop(fast); string(got) != b {
			t.Fatalf("fast client got %q, want %q", got, b)
		}
	}
	select {
	case <-slow.dropped:
	default:
		t.Fatal("a client 12 bytes behind, of 10: not dropped")
	}
	if drops != 1 || slow.bytes != 8 || len(slow.queue) != 2 {
		t.Errorf("drops %d; the slow client holds %d events, %d bytes", drops, len(slow.queue), slow.bytes)
	}
	big := strings.Repeat("x", 100)
	send(big) // larger than the bound, to a client caught up
	if got, ok := h.pop(fast); string(got) != big || !ok || fast.bytes != 0 {
		t.Errorf("a caught-up client, an event of 100 bytes: got %d bytes, %v; %d left", len(got), ok, fast.bytes)
	}
	select {
	case <-fast.dropped:
		t.Error("the caught-up client was dropped")
	default:
	}
}

// /events clients that do not read, while a large object changes: the
// heap grows by their buffers' bytes (16 MiB), not by what they would
// hold of --sse-buffer events (1,024 of 512 KiB).
func TestServeEventsBufferBytes(t *testing.T) {
	// Not parallel: it measures the heap.
	noGoroutinesLeft(t)
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	s, hs := configMaps(t, 1, 1)
	// Long enough that no client is cut for its stalled socket before the
	// updates below are published: in CI's loaded run (race detector) they
	// took longer than a 2 s deadline, the clients were cut first, and
	// none was left to drop.
	s.writeTimeout = 15 * time.Second
	hs.Config.Handler = s.handler()
	hs.Start()
	r := s.resources[0]
	r.hub.size = 1024 // --sse-buffer's default
	const clients, updates, size = 4, 100, 512 << 10
	stalledClients(t, strings.TrimPrefix(hs.URL, "http://"), "GET /events HTTP/1.1\r\nHost: localhost\r\n\r\n", clients)
	waitFor(t, "the clients subscribed", 10*time.Second, func() bool { return r.hub.len() == clients })
	before := heapInUse()
	big := configMap("big", "")
	for i := range updates {
		_ = unstructured.SetNestedField(big.Object, strings.Repeat(string(rune('a'+i%26)), size), "data", "v")
		r.hub.publish(kinformer.Event[*unstructured.Unstructured]{Type: kinformer.Modified, Object: big, ResourceVersion: strconv.Itoa(i)})
	}
	// Without a bound in bytes: every update, 50 MiB.
	grown := int64(heapInUse()) - int64(before)
	t.Logf("%d /events clients that do not read, %d updates of %d KiB: the heap grew by %d MiB; %d dropped", clients, updates, size>>10, grown>>20, r.sseDropped.Load())
	if grown > 24<<20 && !raceEnabled {
		t.Errorf("the heap grew by %d MiB", grown>>20)
	}
	if n := r.sseDropped.Load(); n != clients {
		t.Errorf("%d clients dropped for falling behind, want %d", n, clients)
	}
	waitFor(t, "the stalled clients cut", time.Minute, func() bool { return s.sseClients.n.Load() == 0 })
}

// serveObjects serves objs as configmaps, from an in-memory server, and
// returns the server started, once its informer has synced.
func serveObjects(t *testing.T, objs ...*unstructured.Unstructured) (*server, *httptest.Server) {
	t.Helper()
	s := syncedServer(t, false, objs...)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	return s, hs
}

// YAML indents every level of nesting: a custom resource of 54 KB nested
// 9,000 deep became 81 MB of YAML, in 8 s and 300 MB for each request
// (the page's YAML button sends them). YAML beyond 8 MiB is refused, as
// soon as it is, with 406 saying why; JSON is still served, and at most 4
// YAML answers are made at once. Other objects' YAML is as before.
func TestServeYAMLDeep(t *testing.T) {
	// Not parallel: it logs the heap. No goroutine check: goleak cannot
	// parse the stack of one walking the deep object as the test ends.
	const levels = 9000
	deep := configMap("deep", "")
	inner := map[string]any{"v": "x"}
	for range levels - 1 {
		inner = map[string]any{"a": inner}
	}
	deep.Object["spec"] = inner
	plain := configMap("plain", "")
	plain.SetLabels(map[string]string{"app": "web", "yes": "no"})
	_ = unstructured.SetNestedField(plain.Object, map[string]any{"n": int64(3), "f": 1.5, "s": "a long text with spaces " + strings.Repeat("word ", 40), "t": "true", "list": []any{"a", int64(1), map[string]any{"k": nil}}}, "spec")
	s, hs := serveObjects(t, deep, plain)

	start := time.Now()
	before := heapInUse()
	code, body := get(t, hs.URL+"/objects/cm/ns/deep?format=yaml")
	t.Logf("YAML of an object nested %d deep: %d, %d bytes in %v; the heap grew by %d MiB", levels, code, len(body), time.Since(start).Round(time.Millisecond), (int64(heapInUse())-int64(before))>>20)
	var errBody struct{ Error string }
	if code != http.StatusNotAcceptable || json.Unmarshal([]byte(body), &errBody) != nil ||
		!strings.Contains(errBody.Error, "longer than 8 MiB") || !strings.Contains(errBody.Error, fmt.Sprintf("nests %d levels deep", levels+1)) || !strings.Contains(errBody.Error, "format=json") {
		t.Errorf("YAML of an object nested %d deep: %d %.300s; want 406 saying why, and to ask for JSON", levels, code, body)
	}
	if code, body := get(t, hs.URL+"/objects/cm/ns/deep"); code != 200 || len(body) > 100<<10 {
		t.Errorf("JSON of the object nested %d deep: %d, %d bytes; want 200", levels, code, len(body))
	}

	code, body = get(t, hs.URL+"/objects/cm/ns/plain?format=yaml")
	cached, _ := s.resources[0].src.get("ns/plain")
	want, err := sigsyaml.Marshal(cached.Object)
	if err != nil {
		t.Fatal(err)
	}
	if code != 200 || body != string(want) {
		t.Errorf("YAML of a plain object: %d\n%s\nwant sigs.k8s.io/yaml's\n%s", code, body, want)
	}

	s.yamlRenders.max = 0 // as if 4 were being made
	resp, err := httpClient.Get(hs.URL + "/objects/cm/ns/plain?format=yaml")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusServiceUnavailable || resp.Header.Get("Retry-After") == "" {
		t.Errorf("YAML while 4 are being made: %d, Retry-After %q; want 503 with Retry-After", resp.StatusCode, resp.Header.Get("Retry-After"))
	}
	if code, _ := get(t, hs.URL+"/objects/cm/ns/plain"); code != 200 {
		t.Errorf("JSON while 4 YAML answers are being made: %d, want 200", code)
	}
}

// The work of making YAML is bounded by the object before it starts: a
// custom resource of 1.1 MB with 60,000 keys was 1.5 MB of YAML, under
// the byte cap, but took 450 MB to convert. An object of more than
// maxYAMLNodes fields and items is refused with 406 saying why (JSON is
// still served); one within is converted as before.
func TestServeYAMLManyKeys(t *testing.T) {
	t.Parallel()
	many := configMap("many", "")
	data := map[string]any{}
	for i := range maxYAMLNodes {
		data[fmt.Sprintf("key-%06d", i)] = "v"
	}
	many.Object["data"] = data
	some := configMap("some", "")
	data = map[string]any{}
	for i := range maxYAMLNodes / 4 { // 7,500 fields and items, and the metadata
		data[fmt.Sprintf("key-%06d", i)] = []any{"v", int64(i)}
	}
	some.Object["data"] = data
	s, hs := serveObjects(t, many, some)

	code, body := get(t, hs.URL+"/objects/cm/ns/many?format=yaml")
	if code != http.StatusNotAcceptable || !strings.Contains(body, fmt.Sprintf("more than %d fields", maxYAMLNodes)) || !strings.Contains(body, "format=json") {
		t.Errorf("YAML of %d keys: %d %.300s; want 406 saying why, and to ask for JSON", maxYAMLNodes, code, body)
	}
	if code, _ := get(t, hs.URL+"/objects/cm/ns/many"); code != http.StatusOK {
		t.Errorf("JSON of %d keys: %d, want 200", maxYAMLNodes, code)
	}
	code, body = get(t, hs.URL+"/objects/cm/ns/some?format=yaml")
	cached, _ := s.resources[0].src.get("ns/some")
	want, err := sigsyaml.Marshal(cached.Object)
	if err != nil {
		t.Fatal(err)
	}
	if code != http.StatusOK || body != string(want) {
		t.Errorf("YAML of %d keys of two items each: %d, %d bytes; want sigs.k8s.io/yaml's %d", maxYAMLNodes/4, code, len(body), len(want))
	}
}

func TestNodes(t *testing.T) {
	t.Parallel()
	v := map[string]any{"a": []any{int64(1), map[string]any{"b": "c"}}, "d": nil}
	if n := nodes(v, 100); n != 5 {
		t.Errorf("nodes = %d, want 5 (a, its 2 items, b, d)", n)
	}
	if n := nodes(v, 2); n != 3 {
		t.Errorf("nodes with limit 2 = %d, want 3 (stopped past the limit)", n)
	}
}
