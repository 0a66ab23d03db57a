// Package backoff is the retry policy of an informer's loop after a failed
// list or watch, and one informer's position in it. The root's Backoff
// (Options.Backoff) is this Policy, documented where users read it.
package backoff

import (
	"math/rand/v2"
	"time"
)

// Policy: the first wait is Initial, each next one Factor times longer up
// to Max, each shortened by a random fraction of up to Jitter; after
// ResetAfter without a failure the wait starts again from Initial.
type Policy struct {
	Initial    time.Duration
	Max        time.Duration
	Factor     float64
	Jitter     float64 // in [0, 1]
	ResetAfter time.Duration
}

// Default is the policy used for any zero field: 800 ms doubling to 30 s,
// up to 25 % shorter at random, reset after 2 minutes without a failure.
func Default() Policy {
	return Policy{
		Initial:    800 * time.Millisecond,
		Max:        30 * time.Second,
		Factor:     2,
		Jitter:     0.25,
		ResetAfter: 2 * time.Minute,
	}
}

// WithDefaults returns p with Default's value for each field that is
// zero or out of range.
func (p Policy) WithDefaults() Policy {
	def := Default()
	if p.Initial <= 0 {
		p.Initial = def.Initial
	}
	if p.Max <= 0 {
		p.Max = def.Max
	}
	if p.Max < p.Initial {
		p.Max = p.Initial
	}
	if !(p.Factor >= 1 && p.Factor <= 100) { // also NaN
		p.Factor = def.Factor
	}
	if !(p.Jitter > 0 && p.Jitter <= 1) { // also NaN
		p.Jitter = def.Jitter
	}
	if p.ResetAfter <= 0 {
		p.ResetAfter = def.ResetAfter
	}
	return p
}

// State is one informer's position in its policy. It is used by the watch
// loop's goroutine only.
type State struct {
	policy      Policy
	next        time.Duration // un-jittered wait for the next failure
	lastFailure time.Time
	// Rand is in [0, 1): the source of every jitter of the loop's waits;
	// tests set it.
	Rand func() float64
}

// New returns the start of policy p (with its defaults already applied).
func New(p Policy) *State {
	return &State{policy: p, next: p.Initial, Rand: rand.Float64}
}

// Fail records a failure at now and returns how long to wait before the
// next attempt.
func (s *State) Fail(now time.Time) time.Duration {
	if !s.lastFailure.IsZero() && now.Sub(s.lastFailure) >= s.policy.ResetAfter {
		s.next = s.policy.Initial
	}
	s.lastFailure = now
	d := s.next
	s.next = min(time.Duration(float64(s.next)*s.policy.Factor), s.policy.Max)
	return d - time.Duration(float64(d)*s.policy.Jitter*s.Rand())
}

// Reset starts the policy again from Initial: the server has shown itself
// well since the last failure.
func (s *State) Reset() { s.next = s.policy.Initial }

// Grown reports whether the failures in a row have grown the wait past
// its first steps (two failures: the third waits four times Initial).
func (s *State) Grown() bool { return s.next > 2*s.policy.Initial }

// Resume returns the wait before reconnecting after a connection lost
// under a watch that was live: the policy starts again from Initial,
// which it does not advance, and the wait is anywhere in [0, Initial),
// so that the informers of a process (or of a fleet) whose connections
// broke together do not all come back in the same instant. Should the
// new connection not answer, Fail goes on from Initial.
func (s *State) Resume(now time.Time) time.Duration {
	s.next = s.policy.Initial
	s.lastFailure = now
	return time.Duration(float64(s.policy.Initial) * s.Rand())
}

// Jittered returns period shortened by up to a tenth at random: the
// informers of a process (or a fleet) started together, with one resync
// period, do not re-list in step.
func Jittered(period time.Duration) time.Duration {
	return period - time.Duration(float64(period)*0.1*rand.Float64())
}
