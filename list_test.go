package kinformer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kinformer/kinformer/internal/describe"
)

func streamCounts(s *fakeServer) int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.streams)
}

func TestStreamingListSyncsAndGoesOnWatching(t *testing.T) {
	s := newFakeServer()
	s.streaming = true
	s.put(cm("ns", "a", "app", "web"))
	s.put(cm("ns", "b", "app", "web"))
	s.put(cm("ns", "other", "app", "db"))
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{LabelSelector: "app=web"})
	if got := strings.Join(rec.lines(true), ","); got != "ADDED ns/a,ADDED ns/b" {
		t.Fatalf("events after streaming sync: %s", got)
	}
	if inf.ResourceVersion() != "3" {
		t.Fatalf("resourceVersion %s, want the end marker's 3", inf.ResourceVersion())
	}
	s.put(cm("ns", "c", "app", "web"))
	eventually(t, "c over a plain watch", func() bool { _, ok := inf.Cache().GetByKey("ns/c"); return ok })
	lists, watches := s.counts()
	_, ws := s.calls()
	if lists != 0 || watches != 1 || streamCounts(s) != 1 || ws[0].ResourceVersion != "3" {
		t.Fatalf("%d lists, %d watches %+v, %d streams; want one stream, then one watch from its end marker's version", lists, watches, ws, streamCounts(s))
	}
	o := s.streams[0]
	if !*o.SendInitialEvents || o.ResourceVersionMatch != metav1.ResourceVersionMatchNotOlderThan || o.ResourceVersion != "" || !o.AllowWatchBookmarks || o.LabelSelector != "app=web" {
		t.Fatalf("stream options %+v", o)
	}
}

func TestStreamingRelistDiffsAfter410(t *testing.T) {
	s := newFakeServer()
	s.streaming = true
	for _, n := range []string{"keep", "change", "gone"} {
		s.put(cm("ns", n))
	}
	inf, rec := startInformer(t, s, nil)
	inf.Stop()
	rec.reset()
	s.put(cm("ns", "change", "v", "2"))
	s.del("ns", "gone")
	s.put(cm("ns", "new"))
	s.compact()
	inf.Start() // resumes a plain watch, gets 410, streams a new list
	eventually(t, "3 events", func() bool { return len(rec.lines(false, Added, Modified, Deleted)) == 3 })
	if got := strings.Join(rec.lines(true, Added, Modified, Deleted), ","); got != "ADDED ns/new,DELETED ns/gone,MODIFIED ns/change" {
		t.Fatalf("events = %s", got)
	}
	if n := streamCounts(s); n != 2 {
		t.Fatalf("%d streams, want 2", n)
	}
	if l, _ := s.counts(); l != 0 {
		t.Fatalf("%d paged lists", l)
	}
}

func TestStreamingRefusedFallsBackToPagingForGood(t *testing.T) {
	s := newFakeServer() // streaming off: the request is refused with 422
	s.put(cm("ns", "a"))
	_, rec := startInformer(t, s, nil)
	eventually(t, "the watch open", func() bool { return s.openWatches() == 1 }) // else the 410 reaches no one
	s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
	eventually(t, "re-list", func() bool { l, _ := s.counts(); return l == 2 })
	if n := streamCounts(s); n != 1 {
		t.Fatalf("%d streaming attempts, want 1 (then remembered)", n)
	}
	for _, e := range rec.all() {
		if e.Type == Error && !strings.Contains(e.Err.Error(), "too old") {
			t.Fatalf("the refused stream surfaced as an error: %v", e.Err)
		}
	}
}

// ignoringServer takes a streaming list for a plain watch, like a server
// before 1.27 or a fake client wrapped by the user: no end marker ever.
type ignoringServer struct{ *fakeServer }

func (i ignoringServer) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil {
		opts.SendInitialEvents = nil
		opts.ResourceVersion = "1"
	}
	return i.fakeServer.Watch(ctx, opts)
}

func TestStreamWithoutEndMarkerFallsBackToPaging(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](ignoringServer{s}, nil)
		inf.Start()
		defer inf.Stop()
		began := time.Now()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		if d := time.Since(began); d != watchListStartTimeout {
			t.Fatalf("synced after %v, want after the %v stream start timeout", d, watchListStartTimeout)
		}
		if l, _ := s.counts(); l != 1 || inf.Cache().Len() != 1 {
			t.Fatalf("%d paged lists, %d cached", l, inf.Cache().Len())
		}
	})
}

func TestStreamWithWatchEventsBeforeEndFallsBack(t *testing.T) {
	s := newFakeServer()
	s.put(cm("ns", "a"))
	// The first streaming request gets a plain watch that immediately sees a
	// change: a MODIFIED before any end marker.
	inf := New[*corev1.ConfigMap](ignoringServer{s}, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
	inf.Start()
	defer inf.Stop()
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	s.put(cm("ns", "a", "v", "2"))
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if l, _ := s.counts(); l != 1 {
		t.Fatalf("%d paged lists, want 1", l)
	}
}

// markedClient declares, with client-go's marker method, that it cannot
// stream lists.
type markedClient struct{ *fakeServer }

func (markedClient) IsWatchListSemanticsUnSupported() bool { return true }

func TestMayStream(t *testing.T) {
	dyn := dynfake.NewSimpleDynamicClient(runtime.NewScheme())
	for _, tc := range []struct {
		name string
		lw   any
		want bool
	}{
		{"a real-shaped client", newFakeServer(), true},
		{"client-go marker", markedClient{newFakeServer()}, false},
		{"typed fake clientset", fake.NewClientset().CoreV1().ConfigMaps("ns"), false},
		{"dynamic fake", dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}), false},
	} {
		if got := describe.Of(tc.lw).Streams; got != tc.want {
			t.Errorf("%s (%T): streams = %v, want %v", tc.name, tc.lw, got, tc.want)
		}
	}
}

// Which failures of a watch-list are the server's, or the network's, being
// unavailable (tried again after a backoff), and which are an answer that
// a paged list may get past at once (a proxy, a partial server, a fake).
func TestUnavailable(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{&url.Error{Op: "Get", URL: "https://x", Err: io.EOF}, true},
		{fmt.Errorf("watch: %w", io.ErrUnexpectedEOF), true},
		{errors.New("read tcp: connection reset by peer"), true},
		{apierrors.NewTooManyRequests("slow down", 1), true},
		{apierrors.NewServiceUnavailable("starting"), true},
		{apierrors.NewTimeoutError("busy", 1), true},
		{errors.New("proxy: streaming lists are not supported here"), false},
		{apierrors.NewInternalError(errors.New("boom")), false},
		{apierrors.NewForbidden(gr, "", errors.New("no")), false},
	} {
		if got := unavailable(tc.err); got != tc.want {
			t.Errorf("unavailable(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}

// Which failed watch-lists a paged list follows at once: not those of an
// unavailable server, nor persistent refusals, which the LIST would meet
// alike (a forbidden informer retries with backoff, one request a time).
func TestPageAfter(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	for _, tc := range []struct {
		err  error
		want bool
	}{
		{errors.New("proxy: streaming lists are not supported here"), true},
		{apierrors.NewInternalError(errors.New("boom")), true},
		{apierrors.NewServiceUnavailable("starting"), false},
		{fmt.Errorf("watch: %w", io.ErrUnexpectedEOF), false},
		{apierrors.NewForbidden(gr, "", errors.New("no")), false},
		{apierrors.NewUnauthorized("who are you"), false},
		{apierrors.NewNotFound(gr, ""), false},
	} {
		if got := pageAfter(tc.err); got != tc.want {
			t.Errorf("pageAfter(%v) = %v, want %v", tc.err, got, tc.want)
		}
	}
}
