package kinformer

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"sync"
	"testing"
	"testing/synctest"
	"time"

	"github.com/kinformer/kinformer/internal/protowatch"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

// ctxDeafRT answers like protoServer, but its watch bodies ignore the
// request context (as a recording/fake transport's or a proxy's might);
// Close still ends a blocked Read.
type ctxDeafRT struct {
	t       *testing.T
	mu      sync.Mutex
	scripts [][]byte
	pipes   []*io.PipeWriter
}

type pipeBody struct {
	io.Reader
	pr *io.PipeReader
}

func (b pipeBody) Close() error { return b.pr.Close() }

func (rt *ctxDeafRT) RoundTrip(r *http.Request) (*http.Response, error) {
	h := http.Header{}
	if r.URL.Path == "/api/v1" {
		b, _ := json.Marshal(metav1.APIResourceList{GroupVersion: "v1", APIResources: watchableConfigMaps()})
		h.Set("Content-Type", "application/json")
		return &http.Response{StatusCode: 200, Header: h, Body: io.NopCloser(bytes.NewReader(b)), Request: r}, nil
	}
	if r.URL.Path == "/api/v1/namespaces/kube-system" {
		return &http.Response{StatusCode: http.StatusNotFound, Header: h, Body: http.NoBody, Request: r}, nil
	}
	rt.mu.Lock()
	script := rt.scripts[0]
	if len(rt.scripts) > 1 {
		rt.scripts = rt.scripts[1:]
	}
	pr, pw := io.Pipe()
	rt.pipes = append(rt.pipes, pw)
	rt.mu.Unlock()
	h.Set("Content-Type", protowatch.MediaType)
	return &http.Response{StatusCode: 200, Header: h, Request: r,
		Body: pipeBody{Reader: io.MultiReader(bytes.NewReader(script), pr), pr: pr}}, nil
}

func TestStopClosesADirectBodyThatIgnoresTheContext(t *testing.T) {
	var list bytes.Buffer
	list.Write(wireEvent(t, "ADDED", managedCM("a")))
	list.Write(wireEvent(t, "BOOKMARK", endMarker("10")))
	rt := &ctxDeafRT{t: t, scripts: [][]byte{list.Bytes(), {}}}
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: "http://fake", Transport: rt})
	if err != nil {
		t.Fatal(err)
	}
	inf, _ := startInformer(t, cs.CoreV1().ConfigMaps("ns"), nil)
	eventually(t, "the plain watch open", func() bool { rt.mu.Lock(); defer rt.mu.Unlock(); return len(rt.pipes) == 2 })
	done := make(chan struct{})
	go func() { inf.Stop(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		rt.mu.Lock()
		for _, p := range rt.pipes {
			p.Close()
		}
		rt.mu.Unlock()
		<-done
		t.Fatal("Stop blocked on a direct read whose body ignores the request context")
	}
}

// slowOpen opens watches slowly (a new TLS connection, a busy server) and
// they are closed at once.
type slowOpen struct{ *fakeServer }

func (c slowOpen) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	time.Sleep(1500 * time.Millisecond)
	w, err := c.fakeServer.Watch(ctx, opts)
	if err == nil {
		w.Stop()
	}
	return w, err
}

func TestSlowOpenClosedAtOnceBacksOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](slowOpen{s}, nil)
		inf.Start()
		defer inf.Stop()
		time.Sleep(20 * time.Second)
		synctest.Wait()
		// With backoff: 1.5 + 0.6-0.8 + 1.5 + 1.2-1.6 + 1.5 + 2.4-3.2 + 1.5 + 4.8-6.4 + 1.5 ... ≈ 6 in 20 s.
		if _, w := s.counts(); w > 7 {
			t.Fatalf("%d watches in 20 s: no backoff for watches closed at once after a slow open", w)
		}
	})
}

// The first-event deadline passes just as the first event arrives: the
// next wait must not report another deadline (here idle, an hour away).
func TestDeadlineAsAnEventArrivesIsNotMislabelled(t *testing.T) {
	bad, raced := 0, 0
	for range 200 {
		synctest.Test(t, func(t *testing.T) {
			pr, pw := io.Pipe()
			r := protowatch.NewReader(pipeBody{Reader: pr, pr: pr}, &protowatch.Format{Kind: "ConfigMap",
				New: func() protowatch.Object { return &corev1.ConfigMap{} }})
			now := time.Now()
			s := &stream[*corev1.ConfigMap]{src: newDirectSource(t.Context(), r, false), cancel: func() {}, idle: time.Hour, started: now, last: now}
			defer s.stop()
			frame := wireEvent(t, "ADDED", managedCM("a"))
			go func() {
				time.Sleep(10 * time.Second)
				pw.Write(frame) // fails once the body is closed
			}()
			_, why := s.next(t.Context(), deadlines{first: now.Add(10 * time.Second)})
			if why != nil {
				// The alarm won: the deadline, and nothing else, is reported.
				if why != errFirst {
					t.Errorf("the first-event deadline passed and next reported %v", why)
				}
				return
			}
			raced++
			t0 := time.Now()
			_, why = s.next(t.Context(), deadlines{}) // received: only idle (1h) left
			if why == ErrIdle && time.Since(t0) < time.Hour {
				bad++
			}
		})
	}
	if bad > 0 {
		t.Fatalf("%d/200: an event came as the first-event deadline passed; the next wait reported ErrIdle though idle is an hour away", bad)
	}
	if raced == 0 {
		t.Fatal("in 200 runs the event never arrived with the deadline: the race was not exercised")
	}
	t.Logf("the event came with the deadline in %d of 200 runs", raced)
}
