package crdwait

import (
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"

	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
)

// crdServer answers the CRD wait's requests: the list of the CRD (list),
// then a watch that sends events, one after the other, and ends.
type crdServer struct {
	t       *testing.T
	list    []map[string]any // the CRDs listed
	events  []map[string]any // the watch's events
	mu      sync.Mutex
	watches int
}

const crdName = "widgets.example.com"

// crd is a CustomResourceDefinition serving v1, with conditions (type,
// status, type, status, …).
func crd(conds ...string) map[string]any {
	var cs []any
	for i := 0; i+1 < len(conds); i += 2 {
		cs = append(cs, map[string]any{"type": conds[i], "status": conds[i+1]})
	}
	return map[string]any{
		"metadata": map[string]any{"name": crdName, "resourceVersion": "7"},
		"spec":     map[string]any{"versions": []any{map[string]any{"name": "v1", "served": true}}},
		"status":   map[string]any{"conditions": cs},
	}
}

func (s *crdServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path != listPath || r.URL.Query().Get("fieldSelector") != "metadata.name="+crdName {
		s.t.Errorf("request %s", r.URL)
		http.NotFound(w, r)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	if r.URL.Query().Get("watch") != "true" {
		b, _ := json.Marshal(map[string]any{"metadata": map[string]any{"resourceVersion": "7"}, "items": s.list})
		w.Write(b)
		return
	}
	s.mu.Lock()
	s.watches++
	s.mu.Unlock()
	for _, ev := range s.events {
		b, _ := json.Marshal(ev)
		if _, err := w.Write(append(b, '\n')); err != nil {
			return
		}
		w.(http.Flusher).Flush()
	}
}

func (s *crdServer) watchCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.watches
}

func (s *crdServer) await(t *testing.T) (Result, error) {
	t.Helper()
	hs := httptest.NewServer(s)
	t.Cleanup(hs.Close)
	c, err := rest.UnversionedRESTClientFor(&rest.Config{Host: hs.URL,
		ContentConfig: rest.ContentConfig{NegotiatedSerializer: scheme.Codecs.WithoutConversion()}})
	if err != nil {
		t.Fatal(err)
	}
	return Await(t.Context(), c, crdName, "v1", nil, func(error) bool { return false })
}

// The CRD wait: one already established and serving the version when
// listed tells nothing (the 404 came from a server not yet serving it: a
// backoff paces the next list, no watch); one whose conditions come in
// turn ends the wait only once Established is True, not on an event
// where it is not yet (or False); a watch that ends before is no news.
func TestAwaitCRD(t *testing.T) {
	modified := func(obj map[string]any) map[string]any { return map[string]any{"type": "MODIFIED", "object": obj} }

	t.Run("established when listed", func(t *testing.T) {
		s := &crdServer{t: t, list: []map[string]any{crd("NamesAccepted", "True", "Established", "True")}}
		got, err := s.await(t)
		if got != Unknown || err != nil || s.watchCount() != 0 {
			t.Fatalf("a CRD established when listed: %v, %v, %d watches; want Unknown (a backoff, then list), no error, no watch", got, err, s.watchCount())
		}
	})
	t.Run("not established when listed", func(t *testing.T) {
		s := &crdServer{t: t, list: []map[string]any{crd("NamesAccepted", "True", "Established", "False")},
			events: []map[string]any{modified(crd("NamesAccepted", "True", "Established", "True"))}}
		got, err := s.await(t)
		if got != Back || err != nil || s.watchCount() != 1 {
			t.Fatalf("a CRD not established when listed, then established: %v, %v, %d watches; want Back from the watch", got, err, s.watchCount())
		}
	})
	t.Run("conditions in turn", func(t *testing.T) {
		s := &crdServer{t: t, events: []map[string]any{
			{"type": "ADDED", "object": crd()},
			modified(crd("NamesAccepted", "True")),
			modified(crd("NamesAccepted", "True", "Established", "False")),
			modified(crd("NamesAccepted", "True", "Established", "True")),
		}}
		got, err := s.await(t)
		if got != Back || err != nil {
			t.Fatalf("conditions in turn, Established last: %v, %v; want Back", got, err)
		}
	})
	t.Run("never established", func(t *testing.T) {
		s := &crdServer{t: t, events: []map[string]any{
			{"type": "ADDED", "object": crd()},
			modified(crd("NamesAccepted", "True", "Established", "False")),
		}}
		got, err := s.await(t)
		if got != Unknown || err == nil || !strings.Contains(err.Error(), "ended early") {
			t.Fatalf("a watch that ended with the CRD not established: %v, %v; want Unknown, ended early", got, err)
		}
	})
}
