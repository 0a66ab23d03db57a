package kinformer

import (
	"context"
	"crypto/tls"
	"log/slog"
	"net"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/liveness"
)

// h2Conn is a connection that says it negotiated HTTP/2, as the
// connections the probe watches are.
type h2Conn struct{ net.Conn }

func (h2Conn) ConnectionState() tls.ConnectionState {
	return tls.ConnectionState{NegotiatedProtocol: "h2"}
}

// The heartbeat deadline (heartbeatSilence after a bookmark the server
// sent on its own) is for a watch that holds its connection alone (HTTP/1.1).
// On an HTTP/2 connection under the probe's watchdog the probe finds a dead
// connection, and a quiet watch must not close one that other watches and
// requests share: a bookmark heard there leaves the watch's idle deadline
// as it was.
func TestHeartbeatNotArmedOnAProbedConnection(t *testing.T) {
	l := &loop[*corev1.ConfigMap]{log: slog.New(slog.DiscardHandler)}
	const timeout, idle = 5 * time.Minute, 5*time.Minute + 30*time.Second
	newStream := func() *stream[*corev1.ConfigMap] {
		return &stream[*corev1.ConfigMap]{timeout: timeout, idle: idle, started: time.Now()}
	}

	alone := newStream()
	l.heard(alone)
	if !alone.heartbeat || alone.idle != heartbeatSilence {
		t.Fatalf("a bookmark on a watch without a watchdog: heartbeat %v, idle %v; want armed, %v", alone.heartbeat, alone.idle, heartbeatSilence)
	}

	a, b := net.Pipe()
	defer a.Close()
	defer b.Close()
	probe := func(context.Context) (net.Conn, error) { return nil, context.Canceled } // never called: the watchdog probes after an hour
	probed := newStream()
	probed.live = liveness.Register(h2Conn{a}, probe, time.Hour, time.Minute)
	if probed.live == nil {
		t.Fatal("the watchdog did not take the HTTP/2 connection")
	}
	defer probed.live.Done()
	l.heard(probed)
	if probed.heartbeat || probed.idle != idle {
		t.Fatalf("a bookmark on a watch whose HTTP/2 connection the probe watches: heartbeat %v, idle %v; want not armed, idle still %v", probed.heartbeat, probed.idle, idle)
	}
}
