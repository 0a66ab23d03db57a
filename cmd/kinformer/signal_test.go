package main

import (
	"net"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/kinformer/kinformer/internal/testenv"
)

// silentServer accepts connections and never answers; it returns its
// address and the number of connections accepted so far.
func silentServer(t *testing.T) (string, *atomic.Int64) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		accepted atomic.Int64
		mu       sync.Mutex // guards conns
		conns    []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, c := range conns {
			c.Close()
		}
	})
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, c)
			mu.Unlock()
			accepted.Add(1)
		}
	}()
	return ln.Addr().String(), &accepted
}

// waitFor polls cond every 10 ms until it holds, failing after timeout.
func waitFor(t *testing.T, what string, timeout time.Duration, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(timeout); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("%s: not within %v", what, timeout)
		}
	}
}

// SIGINT while discovery hangs (a server that accepts and never answers)
// stops the command at once, not when discovery's 32 s timeout expires;
// a clean stop, as after syncing.
func TestInterruptDuringDiscovery(t *testing.T) {
	t.Parallel()
	for _, cmd := range []string{"watch", "serve"} {
		t.Run(cmd, func(t *testing.T) {
			t.Parallel()
			addr, accepted := silentServer(t)
			args := []string{cmd, "cm", "--server", "https://" + addr, "--insecure-skip-tls-verify"}
			if cmd == "serve" {
				args = append(args, "--listen", "127.0.0.1:0")
			}
			p := start(t, []string{"HOME=" + t.TempDir()}, args...)
			waitFor(t, "discovery's connection", 10*time.Second, func() bool { return accepted.Load() > 0 })
			time.Sleep(100 * time.Millisecond) // in the TLS handshake, waiting
			sent := time.Now()
			if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
				t.Fatal(err)
			}
			code := p.wait(10 * time.Second)
			if d := time.Since(sent); d > 2*time.Second {
				t.Errorf("exited %v after SIGINT, want at most 2s", d.Round(time.Millisecond))
			}
			if code != exitOK {
				t.Errorf("exit %d, want %d (a clean stop); stderr:\n%s", code, exitOK, p.stderr)
			}
		})
	}
}

// A second signal exits at once, while the first one's graceful stop is
// still waiting: here, serve's HTTP shutdown waits for a connection that
// has sent half a request.
func TestSecondSignalExitsAtOnce(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	p, base := startServe(t, "namespaces", kubeconfigArg(srv))
	conn, err := net.Dial("tcp", strings.TrimSuffix(strings.TrimPrefix(base, "http://"), "/"))
	if err != nil {
		t.Fatal(err)
	}
	defer conn.Close()
	if _, err := conn.Write([]byte("GET /healthz HTTP/1.1\r\nHost: 127.0.0.1\r\n")); err != nil {
		t.Fatal(err)
	}
	time.Sleep(100 * time.Millisecond) // the server has accepted it
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	select {
	case <-p.done:
		t.Fatalf("exited (code %d) after the first SIGINT, while a request was half sent; stderr:\n%s", p.code, p.stderr)
	case <-time.After(300 * time.Millisecond):
	}
	sent := time.Now()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	code := p.wait(10 * time.Second)
	if d := time.Since(sent); d > time.Second {
		t.Errorf("exited %v after the second SIGINT, want at once", d.Round(time.Millisecond))
	}
	if code != 130 || !strings.Contains(p.stderr.String(), "interrupted again, exiting at once") {
		t.Errorf("exit %d, want 130 and a message; stderr:\n%s", code, p.stderr)
	}
}

// The signal handler: the first signal cancels, a second one exits; after
// the command has returned, a signal does nothing.
func TestHandleSignals(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		name     string
		signals  int
		finish   bool // the command returns after the first cancel
		wantExit bool
	}{
		{"none", 0, true, false},
		{"one", 1, true, false},
		{"two", 2, false, true},
		{"one, then the command returns, then another", 2, true, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			sigs := make(chan os.Signal, 2)
			finished := make(chan struct{})
			cancelled := make(chan struct{})
			exited := make(chan int, 1)
			var once sync.Once
			done := make(chan struct{})
			go func() {
				defer close(done)
				handleSignals(sigs, func() { once.Do(func() { close(cancelled) }) }, finished, func(code int) { exited <- code })
			}()
			if tt.signals > 0 {
				sigs <- syscall.SIGINT
				<-cancelled
			}
			if tt.finish {
				close(finished)
				<-done
			}
			if tt.signals > 1 {
				sigs <- syscall.SIGINT
			}
			if !tt.finish {
				<-done
			}
			select {
			case code := <-exited:
				if !tt.wantExit || code != 130 {
					t.Errorf("exit(%d); want exit: %v", code, tt.wantExit)
				}
			default:
				if tt.wantExit {
					t.Errorf("no exit")
				}
			}
		})
	}
}
