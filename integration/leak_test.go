package integration

import (
	"fmt"
	"testing"
	"time"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Stop and Run's return leave no goroutine behind against the real server:
// not the watch loop, not a handler, not the watch's stream decoder. Only
// the HTTP client's pooled keep-alive connections may stay.
func TestNoGoroutineLeftAfterStop(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	ignore := leakIgnores()
	for round := range 3 {
		inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)
		rec := &recorder[*corev1.ConfigMap]{}
		inf.AddHandler(rec.handle)
		_, _ = inf.AddEventHandler(kinformer.Added, func(kinformer.Event[*corev1.ConfigMap]) { time.Sleep(time.Millisecond) })
		inf.Start()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%d", round), nil, "x"))
		eventually(t, 10*time.Second, "event", func() bool { return rec.count(kinformer.Added) == round+1 })
		inf.Stop()
	}
	if err := goleak.Find(ignore...); err != nil {
		t.Fatal(err)
	}
}

// leakIgnores is what a leak check lets stay: the goroutines running now,
// and the HTTP client's pooled connections.
func leakIgnores() []goleak.Option {
	return []goleak.Option{
		goleak.IgnoreCurrent(),
		goleak.IgnoreTopFunction("net/http.(*persistConn).readLoop"),
		goleak.IgnoreTopFunction("net/http.(*persistConn).writeLoop"),
		goleak.IgnoreTopFunction("internal/poll.runtime_pollWait"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*clientConnReadLoop).run"),
		goleak.IgnoreAnyFunction("golang.org/x/net/http2.(*ClientConn).readLoop"),
		goleak.IgnoreAnyFunction("net/http.(*http2ClientConn).readLoop"),
	}
}
