package clusterid

import (
	"context"
	"errors"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
)

// server answers GETs of Path as answer says, counting them, each after
// delay.
type server struct {
	*httptest.Server
	gets   atomic.Int64
	mu     sync.Mutex
	answer func(w http.ResponseWriter)
	delay  time.Duration
}

func newServer(t *testing.T) *server {
	s := &server{answer: func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(`{"kind":"Namespace","metadata":{"name":"kube-system","uid":"uid-1"}}`))
	}}
	s.Server = httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != Path {
			http.NotFound(w, r)
			return
		}
		s.gets.Add(1)
		s.mu.Lock()
		answer, delay := s.answer, s.delay
		s.mu.Unlock()
		time.Sleep(delay)
		answer(w)
	}))
	s.EnableHTTP2 = true
	s.StartTLS()
	t.Cleanup(s.Close)
	return s
}

func (s *server) set(delay time.Duration, answer func(w http.ResponseWriter)) {
	s.mu.Lock()
	defer s.mu.Unlock()
	s.delay = delay
	if answer != nil {
		s.answer = answer
	}
}

// connOf makes a request to s with hc and returns its connection.
func connOf(t *testing.T, s *server, hc *http.Client) net.Conn {
	t.Helper()
	var conn net.Conn
	ctx := httptrace.WithClientTrace(t.Context(), &httptrace.ClientTrace{GotConn: func(i httptrace.GotConnInfo) { conn = i.Conn }})
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL+"/other", nil)
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if conn == nil {
		t.Fatal("no connection traced")
	}
	return conn
}

// Many informers of one client asking at once make one GET; an ask
// about the connection a GET went on makes none; an ask about another
// connection makes its own.
func TestOneGetForManyAsks(t *testing.T) {
	s := newServer(t)
	s.set(100*time.Millisecond, nil)
	hc := s.Client()
	a := For(hc, s.URL+Path)
	if For(hc, s.URL+Path) != a {
		t.Fatal("For gave two askers for one client and URL")
	}
	if For(&http.Client{}, s.URL+Path) == a {
		t.Fatal("For gave one asker to two clients")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 20)
	for range 20 {
		wg.Go(func() {
			uid, err := a.UID(t.Context(), nil)
			if err == nil && uid != "uid-1" {
				err = errors.New("uid " + uid)
			}
			if err != nil {
				errs <- err
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if n := s.gets.Load(); n != 1 {
		t.Fatalf("20 asks at once made %d GETs, want 1", n)
	}

	// HTTP/2: the client's requests share the GET's connection.
	conn := connOf(t, s, hc)
	if uid, err := a.UID(t.Context(), conn); err != nil || uid != "uid-1" {
		t.Fatalf("UID(conn) = %q, %v", uid, err)
	}
	if n := s.gets.Load(); n != 1 {
		t.Fatalf("an ask about the GET's connection made a GET (%d in all)", n)
	}

	// Another client: another connection, asked anew.
	other := &http.Client{Transport: hc.Transport.(*http.Transport).Clone()}
	if uid, err := a.UID(t.Context(), connOf(t, s, other)); err != nil || uid != "uid-1" {
		t.Fatalf("UID(another conn) = %q, %v", uid, err)
	}
	if n := s.gets.Load(); n != 2 {
		t.Fatalf("an ask about an unknown connection made %d GETs in all, want 2", n)
	}
}

// A refusal (403) answers for its connection; a failure (500) answers
// for nothing: the next ask asks again. A 200 without a uid is ErrNoUID.
func TestRefusalsAndFailures(t *testing.T) {
	s := newServer(t)
	hc := s.Client()
	a := For(hc, s.URL+Path)
	conn := connOf(t, s, hc)

	s.set(0, func(w http.ResponseWriter) { http.Error(w, "busy", http.StatusInternalServerError) })
	for range 2 {
		if _, err := a.UID(t.Context(), conn); !apierrors.IsInternalError(err) {
			t.Fatalf("500: err %v, want an InternalError", err)
		}
	}
	if n := s.gets.Load(); n != 2 {
		t.Fatalf("two asks after 500s made %d GETs, want 2 (a failure answers nothing)", n)
	}

	s.set(0, func(w http.ResponseWriter) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(http.StatusForbidden)
		w.Write([]byte(`{"kind":"Status","apiVersion":"v1","status":"Failure","reason":"Forbidden","code":403,"message":"namespaces \"kube-system\" is forbidden"}`))
	})
	for range 2 {
		if _, err := a.UID(t.Context(), conn); !apierrors.IsForbidden(err) {
			t.Fatalf("403: err %v, want Forbidden", err)
		}
	}
	if _, err := a.UID(t.Context(), nil); !apierrors.IsForbidden(err) {
		t.Fatalf("403, another connection: err %v, want Forbidden", err)
	}
	if n := s.gets.Load(); n != 3 {
		t.Fatalf("three asks after a 403 made %d GETs in all, want 3 (the refusal answers for the client)", n)
	}

	b := For(&http.Client{Transport: hc.Transport}, s.URL+Path) // a new client: a new asker
	s.set(0, func(w http.ResponseWriter) { w.Write([]byte(`{"kind":"Namespace","metadata":{}}`)) })
	if _, err := b.UID(t.Context(), nil); !errors.Is(err, ErrNoUID) {
		t.Fatalf("no uid: err %v, want ErrNoUID", err)
	}
}

// An ask waiting for another's GET, whose asker stops meanwhile, asks
// again rather than failing with the other's cancellation.
func TestWaiterOutlivesTheAskerThatMadeTheGet(t *testing.T) {
	s := newServer(t)
	s.set(300*time.Millisecond, nil)
	a := For(s.Client(), s.URL+Path)
	ctx, cancel := context.WithCancel(t.Context())
	first := make(chan error, 1)
	go func() { _, err := a.UID(ctx, nil); first <- err }()
	for s.gets.Load() == 0 {
		time.Sleep(5 * time.Millisecond)
	}
	second := make(chan error, 1)
	go func() {
		uid, err := a.UID(t.Context(), nil)
		if err == nil && uid != "uid-1" {
			err = errors.New("uid " + uid)
		}
		second <- err
	}()
	time.Sleep(50 * time.Millisecond) // the second waits for the first's GET
	cancel()
	if err := <-first; !errors.Is(err, context.Canceled) {
		t.Fatalf("the stopped asker: %v", err)
	}
	if err := <-second; err != nil {
		t.Fatalf("the waiter: %v, want the uid", err)
	}
}
