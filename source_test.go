package kinformer

import (
	"context"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// eventsReader is a direct stream whose events come at once.
type eventsReader struct{ closes int }

func (r *eventsReader) Next() (watch.Event, error) {
	return watch.Event{Type: watch.Added, Object: &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a"}}}, nil
}

func (r *eventsReader) Close() { r.closes++ }

// A stopped direct stream's deadline timer holds nothing of its reader.
// The runtime may keep a stopped timer, and its function, until it cleans
// the timer heap it is on; through the reader, the function held the
// decoder and the informer it decodes for, whole cache included, after
// the informer had stopped and been let go (seen in a heap dump of the
// integration tests: a namespace's informer that left a view was freed
// only 3 to 29 s later, when another timer ran out;
// TestSharedViewRapidFlipsFreeEveryInformer).
func TestStoppedDirectSourceAlarmHoldsNoReader(t *testing.T) {
	ctx, cancel := context.WithCancel(t.Context())
	defer cancel()
	r := &eventsReader{}
	s := newDirectSource(ctx, r, false)
	for range 3 { // the alarm armed for an hour, stopped as each event comes
		if _, err := s.next(ctx, time.Now().Add(time.Hour)); err != nil {
			t.Fatal(err)
		}
	}
	if s.alarm == nil || s.alarmed.r == nil {
		t.Fatal("no alarm armed on the reader")
	}
	s.stop()
	if r.closes != 1 {
		t.Fatalf("stop closed the reader %d times, want 1", r.closes)
	}
	if s.alarmed.r != nil {
		t.Fatal("the stopped alarm's function still holds the reader")
	}
	s.alarmed.close() // the alarm, had it run after all
	if r.closes != 1 {
		t.Fatal("the stopped alarm's function closed the reader")
	}
}
