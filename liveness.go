package kinformer

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"

	"github.com/kinformer/kinformer/internal/liveness"
)

// Dead connections (internal/liveness): a watch whose HTTP/2 connection
// has carried nothing for Options.ProbeAfter gets its connection checked by
// a GET /livez?exclude=etcd sent on it through the same HTTP client; no
// answer within ProbeTimeout closes the connection, and every watch on it
// resumes on a new one. /livez, not /version: the API server's priority
// and fairness exempts /healthz, /livez and /readyz from its queues for
// every user (the "probes" FlowSchema), where a /version waits in line
// with the other requests of its priority level: on a server under load
// it took 7 s, and a healthy connection was closed. etcd excluded: the
// probe asks whether the connection carries, not whether etcd is well. The probe needs the client's HTTP client: a clientset's typed
// client, client-go's dynamic client, a Factory's informers (metadata ones
// included), or a ListerWatcher with a ProbeClient() rest.Interface
// method. Other sources rely on the transport's own health checks and the
// idle deadline (IdleMargin).

// probePath is what the probe asks for (see above).
const probePath = "/livez"

// proberFor returns the liveness prober of lw's HTTP client, or nil when
// kinformer cannot reach it.
func proberFor(src described) liveness.Prober {
	rc, hc := src.rest, src.http
	if rc == nil {
		return nil
	}
	url := rc.Get().AbsPath(probePath).Param("exclude", "etcd").URL().String()
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
		// Straight on the HTTP client: not through the REST client's rate
		// limiter, whose wait would count against the connection.
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
