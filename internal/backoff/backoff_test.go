package backoff

import (
	"testing"
	"time"
)

func TestBackoffSequence(t *testing.T) {
	b := New(Default())
	b.Rand = func() float64 { return 0 } // no jitter: exact sequence
	now := time.Unix(0, 0)
	var got []time.Duration
	for range 8 {
		got = append(got, b.Fail(now))
		now = now.Add(time.Second)
	}
	want := []time.Duration{800 * time.Millisecond, 1600 * time.Millisecond, 3200 * time.Millisecond,
		6400 * time.Millisecond, 12800 * time.Millisecond, 25600 * time.Millisecond, 30 * time.Second, 30 * time.Second}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("waits = %v, want %v", got, want)
		}
	}
	// Two minutes without a failure: back to the start.
	if d := b.Fail(now.Add(2 * time.Minute)); d != 800*time.Millisecond {
		t.Fatalf("after 2 min healthy, wait = %v", d)
	}
	// Jitter shortens by at most 25%.
	b.Rand = func() float64 { return 0.999 }
	if d := b.Fail(now.Add(2*time.Minute + time.Second)); d > 1600*time.Millisecond || d < 1200*time.Millisecond {
		t.Fatalf("jittered wait = %v, want in [1.2s, 1.6s]", d)
	}
}
