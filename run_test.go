package kinformer

import (
	"fmt"
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
)

func slowHandlerOfTheTest(cmEvent) { time.Sleep(2 * time.Millisecond) }

// The start as a budget: the informer's first list (how long, how many
// objects of how many the server said), each handler's initial pass (by
// name: how many handled, how long, how long inside it), and the same as
// metrics.
func TestStartupFigures(t *testing.T) {
	s := newFakeServer()
	for i := range 50 {
		s.put(cm("ns", fmt.Sprintf("cm-%02d", i)))
	}
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Name: "configmaps", Metrics: m, PageSize: 20, Backoff: fastBackoff})
	if st := inf.Startup(); st.Started || st.Synced {
		t.Fatalf("before Start: %+v", st)
	}
	r := inf.AddHandler(slowHandlerOfTheTest)
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	eventually(t, "the handler's initial pass", r.HasSynced)
	st := inf.Startup()
	if !st.Started || !st.Synced || !st.HandlersDone || st.Objects != 50 || st.Expected != 50 || st.ListTook <= 0 || st.HandlersTook < 100*time.Millisecond {
		t.Fatalf("Startup() = %+v; want started, synced, handlers done, 50 of 50 objects, handlers 100ms or more", st)
	}
	h := r.Startup()
	if !strings.Contains(h.Name, "slowHandlerOfTheTest") || !h.Done || h.Handled != 50 || h.Pending != 0 || h.InHandler < 100*time.Millisecond || h.Took < h.InHandler {
		t.Fatalf("Registration.Startup() = %+v; want named, done, 50 handled, 100ms or more inside", h)
	}
	got := gather(t, reg)
	if got[`kinformer_startup_done{resource=configmaps}`] != 1 || got[`kinformer_startup_handler_busy_seconds{resource=configmaps}`] < 0.1 ||
		got[`kinformer_startup_handlers_seconds{resource=configmaps}`] < 0.1 || got[`kinformer_startup_list_seconds{resource=configmaps}`] <= 0 {
		t.Fatalf("startup metrics: %v", got)
	}
}

// A handler still on its initial pass after StartupLogAfter is named in
// one Info line, with how far it is; so is a first list not complete.
func TestStartupLogNamesTheLateOne(t *testing.T) {
	s := newFakeServer()
	for i := range 5 {
		s.put(cm("ns", fmt.Sprintf("cm-%d", i)))
	}
	var buf syncBuffer
	log := slog.New(slog.NewTextHandler(&buf, nil))
	release := make(chan struct{})
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Logger: log, StartupLogAfter: 100 * time.Millisecond, Backoff: fastBackoff})
	r := inf.AddHandler(func(e cmEvent) { <-release })
	inf.Start()
	t.Cleanup(inf.Stop)
	t.Cleanup(func() { close(release) })
	contractSync(t, inf)
	eventually(t, "the log line", func() bool { return strings.Contains(buf.String(), "still on its initial pass") })
	line := buf.String()
	if !strings.Contains(line, "TestStartupLogNamesTheLateOne") || !strings.Contains(line, "handled=0") || !strings.Contains(line, "pending=") {
		t.Fatalf("log: %s; want the handler named, and how far it is", line)
	}
	if r.Startup().Done {
		t.Fatal("a handler blocked on its first event is done")
	}

	// A first list that does not complete.
	s2 := newFakeServer()
	s2.listErr = fmt.Errorf("the server is slow today")
	var buf2 syncBuffer
	inf2 := New[*corev1.ConfigMap](s2, &Options[*corev1.ConfigMap]{Logger: slog.New(slog.NewTextHandler(&buf2, nil)), StartupLogAfter: 100 * time.Millisecond, Backoff: fastBackoff})
	inf2.Start()
	t.Cleanup(inf2.Stop)
	eventually(t, "the log line", func() bool { return strings.Contains(buf2.String(), "first list is not complete") })
	if st := inf2.Startup(); st.Synced || !st.Started || st.ListTook < 100*time.Millisecond {
		t.Fatalf("Startup() of a list that fails: %+v", st)
	}
}
