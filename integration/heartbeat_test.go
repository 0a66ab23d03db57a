package integration

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// http1Limit is issue 32's target: over HTTP/1.1, with default options, a
// silently dead connection is found and the watch resumed within 90 s.
const http1Limit = 90 * time.Second

// TestDeadConnectionHTTP1Defaults: over HTTP/1.1 a watch holds its
// connection alone, so no probe can ride it, and a dead one used to wait
// out the watch's timeout plus IdleMargin (5-10 minutes and more). The API
// server sends a watch that allows bookmarks one about every minute: once
// a watch has heard one, it is taken for dead once silent past
// heartbeatSilence (80 s). The informer stays quiet past the first heartbeat
// (the watch must be kept: no reconnect, no ERROR), then its connection
// goes silently dead (the proxy holds it for good; new connections work),
// ConfigMap updates follow, and the cache must hold one written after the
// fault within http1Limit of it.
//
// KINFORMER_MEASURE_QUIET=10m first keeps the watch quiet that long and
// logs the reconnects (the watch's own timeouts only: one each 5-10 min).
func TestDeadConnectionHTTP1Defaults(t *testing.T) {
	quiet := 70 * time.Second // past the first heartbeat (60 s)
	if v := os.Getenv("KINFORMER_MEASURE_QUIET"); v != "" {
		d, err := time.ParseDuration(v)
		if err != nil {
			t.Fatalf("KINFORMER_MEASURE_QUIET=%q: %v", v, err)
		}
		quiet = d
	}
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, admin, configMap(ns, "marker", nil, "0"))

	p := newFaultProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
	proto, calls := &protocols{}, &counting{}
	cfg := p.config(t, srv.Config())
	cfg.TLSClientConfig.NextProtos = []string{"http/1.1"}
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, proto.wrap(calls.wrap(cfg))).CoreV1().ConfigMaps(ns), nil) // default options
	var errs atomic.Int64
	var firstErr atomic.Pointer[string]
	inf.AddHandler(func(e cmEvent) {
		if e.Type == kinformer.Error {
			errs.Add(1)
			msg := e.Err.Error()
			firstErr.CompareAndSwap(nil, &msg)
		}
	})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}

	// Quiet: nothing changes in ns. Elsewhere the cluster lives (a
	// ConfigMap in another namespace every 10 s), as a real one does: the
	// watch cache sends a watch a bookmark only once the resource's
	// resourceVersion has moved past the watch's.
	other := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, admin, configMap(other, "life", nil, "0"))
	lifeCtx, stopLife := context.WithCancel(t.Context())
	lifeDone := make(chan struct{})
	defer func() { stopLife(); <-lifeDone }()
	go func() {
		defer close(lifeDone)
		for i := 1; ; i++ {
			select {
			case <-lifeCtx.Done():
				return
			case <-time.After(10 * time.Second):
			}
			cctx, ccancel := context.WithTimeout(lifeCtx, 5*time.Second)
			_, _ = admin.CoreV1().ConfigMaps(other).Patch(cctx, "life", types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"%d"}}`, i), metav1.PatchOptions{})
			ccancel()
		}
	}()
	_, w0 := calls.counts()
	time.Sleep(quiet)
	if !strings.Contains(proto.String(), "HTTP/1.1") || strings.Contains(proto.String(), "HTTP/2") {
		t.Fatalf("responses by protocol: %s, want HTTP/1.1 only", proto)
	}
	_, w1 := calls.counts()
	t.Logf("quiet for %v: %d watch requests, %d ERROR events", quiet, w1-w0, errs.Load())
	if limit := int(quiet/(5*time.Minute)) + 1; w1-w0 > limit || errs.Load() > 0 {
		m := "none"
		if p := firstErr.Load(); p != nil {
			m = *p
		}
		t.Fatalf("a quiet healthy watch over HTTP/1.1: %d watch requests in %v (the watch's timeouts allow %d), %d ERROR events (first: %s)", w1-w0, quiet, limit, errs.Load(), m)
	}

	// The connection dies silently; new ones work.
	began := time.Now()
	p.hold()
	time.Sleep(2 * time.Second)
	p.release(false)
	ended := time.Now()
	ctx, cancel := context.WithCancel(t.Context())
	written, done := make(chan time.Time, 1), make(chan struct{})
	defer func() { cancel(); <-done }()
	go func() {
		defer close(done)
		for i := 1; ctx.Err() == nil; i++ {
			cctx, ccancel := context.WithTimeout(ctx, 5*time.Second)
			_, err := admin.CoreV1().ConfigMaps(ns).Patch(cctx, "marker", types.MergePatchType, fmt.Appendf(nil, `{"data":{"v":"after-%d"}}`, i), metav1.PatchOptions{})
			ccancel()
			if err == nil && i == 1 {
				written <- time.Now()
			}
			time.Sleep(250 * time.Millisecond)
		}
	}()
	<-written
	for time.Since(began) < http1Limit+30*time.Second {
		if cm, ok := inf.Cache().GetByKey(ns + "/marker"); ok && strings.HasPrefix(cm.Data["v"], "after-") {
			took := time.Since(began)
			m := "none"
			if p := firstErr.Load(); p != nil {
				m = *p
			}
			t.Logf("HTTP/1.1, default options: recovered %v after the connection went dead (%v after new connections worked); first ERROR: %s; protocol %s",
				took.Round(100*time.Millisecond), time.Since(ended).Round(100*time.Millisecond), m, proto)
			if took > http1Limit {
				t.Fatalf("recovered after %v, want within %v", took.Round(100*time.Millisecond), http1Limit)
			}
			return
		}
		time.Sleep(100 * time.Millisecond)
	}
	t.Fatalf("HTTP/1.1, default options: not recovered within %v of the connection going dead", http1Limit+30*time.Second)
}
