package kinformer

import (
	"context"
	"fmt"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/backoff"
)

// timedLister takes 30 ms for each List, counting those in flight.
type timedLister struct {
	*fakeServer
	inFlight, most *atomic.Int32
}

func (s timedLister) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	n := s.inFlight.Add(1)
	defer s.inFlight.Add(-1)
	for m := s.most.Load(); n > m && !s.most.CompareAndSwap(m, n); m = s.most.Load() {
	}
	time.Sleep(30 * time.Millisecond)
	return s.fakeServer.List(ctx, opts)
}

// Informers sharing a ListGate of 2 make their initial lists two at a
// time, and all sync; later lists (a resync) do not wait for the gate.
func TestListGateBoundsInitialLists(t *testing.T) {
	for _, bound := range []int{2, 0} {
		t.Run(fmt.Sprint("bound ", bound), func(t *testing.T) {
			var inFlight, most atomic.Int32
			gate := NewListGate(bound)
			var infs []*Informer[*corev1.ConfigMap]
			for i := range 8 {
				s := newFakeServer()
				s.put(cm("ns", fmt.Sprint("cm-", i)))
				inf := New[*corev1.ConfigMap](timedLister{s, &inFlight, &most}, &Options[*corev1.ConfigMap]{Backoff: fastBackoff, ListGate: gate})
				infs = append(infs, inf)
			}
			for _, inf := range infs {
				inf.Start()
				t.Cleanup(inf.Stop)
			}
			for _, inf := range infs {
				contractSync(t, inf)
			}
			switch m := most.Load(); {
			case bound > 0 && m > int32(bound):
				t.Fatalf("%d initial lists at once through a gate of %d", m, bound)
			case bound == 0 && m < 3:
				t.Fatalf("without a gate, at most %d lists at once: the test does not overlap them", m)
			}
		})
	}
	if NewListGate(0) != nil || NewListGate(-1) != nil {
		t.Fatal("a gate of no places is not nil (no bound)")
	}
}

func TestJittered(t *testing.T) {
	seen := map[time.Duration]bool{}
	for range 100 {
		d := backoff.Jittered(time.Minute)
		if d > time.Minute || d < 54*time.Second {
			t.Fatalf("backoff.Jittered(1m) = %v, want within the last tenth", d)
		}
		seen[d] = true
	}
	if len(seen) < 10 {
		t.Fatalf("%d distinct periods in 100: not jittered", len(seen))
	}
}
