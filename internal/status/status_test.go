package status

import (
	"context"
	"errors"
	"testing"
	"time"
)

// WaitRV returns once the resourceVersion reaches the one asked for, and
// a wait that ends with its context leaves no waiter behind.
func TestWaitRV(t *testing.T) {
	s := New()
	done := make(chan error, 1)
	go func() { done <- s.WaitRV(context.Background(), "10") }()
	waitFor(t, "the waiter", func() bool { return s.Waiters() == 1 })
	s.Advance("9")
	select {
	case err := <-done:
		t.Fatalf("returned at 9: %v", err)
	case <-time.After(20 * time.Millisecond):
	}
	s.Advance("11")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if s.ResourceVersion() != "11" || !s.Reached("10") || s.Reached("12") {
		t.Fatalf("resourceVersion %q", s.ResourceVersion())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Millisecond)
	defer cancel()
	if err := s.WaitRV(ctx, "99"); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a future version: %v", err)
	}
	if n := s.Waiters(); n != 0 {
		t.Fatalf("%d waiters left behind", n)
	}
}

// WaitSync returns a persistent error that stops the first sync, then
// nil once synced; with a newer configuration asked for, it waits until
// the loop has taken it.
func TestWaitSync(t *testing.T) {
	s := New()
	forbidden := errors.New("forbidden")
	s.SetSync(false, forbidden)
	if err := s.WaitSync(context.Background()); !errors.Is(err, forbidden) {
		t.Fatalf("before the sync: %v", err)
	}
	select {
	case <-s.WhenSynced():
		t.Fatal("WhenSynced closed before the sync")
	default:
	}
	s.SetSync(true, nil)
	if err := s.WaitSync(context.Background()); err != nil {
		t.Fatal(err)
	}
	<-s.WhenSynced()
	if !s.Synced.Load() || s.SyncedAt.Load() == 0 {
		t.Fatal("synced, but not said")
	}

	s.Asked.Store(2)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Millisecond)
	defer cancel()
	if err := s.WaitSync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("a configuration not yet taken: %v", err)
	}
	done := make(chan error, 1)
	go func() { done <- s.WaitSync(context.Background()) }()
	s.Take(2)
	if err := <-done; err != nil || !s.Current() {
		t.Fatalf("after Take: %v, current %v", err, s.Current())
	}
}

// Fail and OK keep the persistent error and since when; Waiting and OK
// the time without a list or watch.
func TestFailing(t *testing.T) {
	s := New()
	if err, since := s.LastError(); err != nil || !since.IsZero() {
		t.Fatalf("new: %v %v", err, since)
	}
	first := errors.New("first")
	s.Fail(first)
	_, since := s.LastError()
	s.Fail(errors.New("second"))
	err, again := s.LastError()
	if err == nil || err.Error() != "second" || !again.Equal(since) {
		t.Fatalf("after two failures: %v since %v (first since %v)", err, again, since)
	}
	now := time.Now()
	s.Waiting(now)
	s.Waiting(now.Add(time.Second)) // an earlier wait stands
	if !s.ReconnectingSince().Equal(time.Unix(0, now.UnixNano())) {
		t.Fatalf("reconnecting since %v, want %v", s.ReconnectingSince(), now)
	}
	if was := s.OK(); was == nil || was.Error() != "second" {
		t.Fatalf("OK cleared %v", was)
	}
	if err, _ := s.LastError(); err != nil || !s.ReconnectingSince().IsZero() {
		t.Fatalf("after OK: %v, reconnecting since %v", err, s.ReconnectingSince())
	}
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(time.Millisecond)
	}
}
