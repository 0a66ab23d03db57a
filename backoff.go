package kinformer

import (
	"math/rand/v2"
	"time"
)

// Backoff is the retry policy after a failed list or watch: the first wait is
// Initial, each next one Factor times longer up to Max, and each is shortened
// by a random fraction of up to Jitter so that informers restarted together
// spread out. After ResetAfter without a failure the wait starts again from
// Initial.
//
// The defaults (DefaultBackoff) follow the Kubernetes clients' experience:
// 800 ms is short enough not to be noticed after a blip, 30 s long enough
// that thousands of clients do not flatten a recovering API server, and two
// minutes of health means the last trouble is over.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Factor     float64
	Jitter     float64 // in [0, 1]
	ResetAfter time.Duration
}

// DefaultBackoff returns the policy used for any zero field of
// Options.Backoff: 800 ms doubling to 30 s, up to 25 % shorter at random,
// reset after 2 minutes without a failure.
func DefaultBackoff() Backoff {
	return Backoff{
		Initial:    800 * time.Millisecond,
		Max:        30 * time.Second,
		Factor:     2,
		Jitter:     0.25,
		ResetAfter: 2 * time.Minute,
	}
}

func (b Backoff) withDefaults() Backoff {
	def := DefaultBackoff()
	if b.Initial <= 0 {
		b.Initial = def.Initial
	}
	if b.Max <= 0 {
		b.Max = def.Max
	}
	if b.Max < b.Initial {
		b.Max = b.Initial
	}
	if !(b.Factor >= 1 && b.Factor <= 100) { // also NaN
		b.Factor = def.Factor
	}
	if !(b.Jitter > 0 && b.Jitter <= 1) { // also NaN
		b.Jitter = def.Jitter
	}
	if b.ResetAfter <= 0 {
		b.ResetAfter = def.ResetAfter
	}
	return b
}

// backoffState is one informer's position in its Backoff policy. It is used
// by the watch loop's goroutine only.
type backoffState struct {
	policy      Backoff
	next        time.Duration // un-jittered wait for the next failure
	lastFailure time.Time
	rand        func() float64 // in [0, 1); injectable for tests
}

func newBackoffState(p Backoff) *backoffState {
	return &backoffState{policy: p, next: p.Initial, rand: rand.Float64}
}

// fail records a failure at now and returns how long to wait before the
// next attempt.
func (s *backoffState) fail(now time.Time) time.Duration {
	if !s.lastFailure.IsZero() && now.Sub(s.lastFailure) >= s.policy.ResetAfter {
		s.next = s.policy.Initial
	}
	s.lastFailure = now
	d := s.next
	s.next = min(time.Duration(float64(s.next)*s.policy.Factor), s.policy.Max)
	return d - time.Duration(float64(d)*s.policy.Jitter*s.rand())
}

// reset starts the policy again from Initial: the server has shown itself
// well since the last failure.
func (s *backoffState) reset() { s.next = s.policy.Initial }

// grown reports whether the failures in a row have grown the wait past
// its first steps (two failures: the third waits four times Initial).
func (s *backoffState) grown() bool { return s.next > 2*s.policy.Initial }

// resume returns the wait before reconnecting after a connection lost
// under a watch that was live (outcome.connLost): the policy starts again
// from Initial, which it does not advance, and the wait is anywhere in
// [0, Initial), so that the informers of a process (or of a fleet) whose
// connections broke together do not all come back in the same instant.
// Should the new connection not answer, fail goes on from Initial.
func (s *backoffState) resume(now time.Time) time.Duration {
	s.next = s.policy.Initial
	s.lastFailure = now
	return time.Duration(float64(s.policy.Initial) * s.rand())
}
