package nsmember

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"maps"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// applied records the set's Apply calls, and fails those of namespaces
// in fail.
type applied struct {
	mu      sync.Mutex
	calls   []string // "+ns", "-ns"
	members map[string]bool
	fail    map[string]bool
}

func (a *applied) apply(_ context.Context, ns string, in bool) error {
	a.mu.Lock()
	defer a.mu.Unlock()
	if a.fail[ns] {
		return errors.New("apply failed")
	}
	if in {
		a.calls = append(a.calls, "+"+ns)
		a.members[ns] = true
	} else {
		a.calls = append(a.calls, "-"+ns)
		delete(a.members, ns)
	}
	return nil
}

func (a *applied) now() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Sorted(maps.Keys(a.members))
}

func (a *applied) log() []string {
	a.mu.Lock()
	defer a.mu.Unlock()
	return slices.Clone(a.calls)
}

func newApplied() *applied { return &applied{members: map[string]bool{}, fail: map[string]bool{}} }

// A namespace is a member while it is named or selected: Apply is called
// only when that changes, and a named namespace the selector lets go
// stays (and one unnamed that the selector holds).
func TestNamedAndSelected(t *testing.T) {
	a := newApplied()
	s := New(Config{Apply: a.apply})
	defer s.Close(nil)
	ctx := context.Background()
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	s.Select("a", true) // named already: no change
	s.Select("b", true)
	s.Select("b", true) // again: no change
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if err := s.Add(ctx, "b"); err != nil { // selected, now named too
		t.Fatal(err)
	}
	s.Select("b", false) // named: stays
	s.Select("a", false) // leaves
	if got, want := a.log(), []string{"+a", "+b", "-a"}; !slices.Equal(got, want) {
		t.Fatalf("Apply calls %v, want %v", got, want)
	}
	if got := a.now(); !slices.Equal(got, []string{"b"}) {
		t.Fatalf("members %v, want [b]", got)
	}
	if !s.Named("b") || s.Named("a") {
		t.Fatalf("named: a %v, b %v; want b alone", s.Named("a"), s.Named("b"))
	}
}

// An Apply that fails leaves the membership as it was: Add returns the
// error and the namespace is not named; Remove keeps it named.
func TestApplyErrorChangesNothing(t *testing.T) {
	a := newApplied()
	s := New(Config{Apply: a.apply})
	defer s.Close(nil)
	ctx := context.Background()
	a.fail["x"] = true
	if err := s.Add(ctx, "x"); err == nil {
		t.Fatal("Add succeeded with Apply failing")
	}
	if s.Named("x") {
		t.Fatal("x named after a failed Add")
	}
	delete(a.fail, "x")
	if err := s.Add(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	a.fail["x"] = true
	if err := s.Remove(ctx, "x"); err == nil {
		t.Fatal("Remove succeeded with Apply failing")
	}
	if !s.Named("x") {
		t.Fatal("x unnamed after a failed Remove")
	}
	delete(a.fail, "x")
	if err := s.Remove(ctx, "x"); err != nil {
		t.Fatal(err)
	}
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v, want none", got)
	}
}

// SetNamed removes those not listed, then adds the rest; bad names are
// refused before anything changes.
func TestSetNamed(t *testing.T) {
	a := newApplied()
	s := New(Config{Apply: a.apply})
	defer s.Close(nil)
	ctx := context.Background()
	if err := s.SetNamed(ctx, []string{"a", "b"}); err != nil {
		t.Fatal(err)
	}
	if err := s.SetNamed(ctx, []string{"b", "Bad_Name"}); err == nil {
		t.Fatal("SetNamed took a bad name")
	}
	if got := a.now(); !slices.Equal(got, []string{"a", "b"}) {
		t.Fatalf("members %v after a refused SetNamed, want [a b]", got)
	}
	if err := s.SetNamed(ctx, []string{"b", "c"}); err != nil {
		t.Fatal(err)
	}
	if got, want := a.log(), []string{"+a", "+b", "-a", "+c"}; !slices.Equal(got, want) {
		t.Fatalf("Apply calls %v, want %v", got, want)
	}
	for _, bad := range []string{"", "UPPER", "a.b"} {
		if err := s.Add(ctx, bad); err == nil {
			t.Errorf("Add(%q) succeeded", bad)
		}
	}
}

// After Close nothing changes: Add fails with ErrClosed, Select and
// Remove do nothing; a second Close says it did not close.
func TestClose(t *testing.T) {
	a := newApplied()
	s := New(Config{Apply: a.apply, Review: func(context.Context, string) (bool, string, error) { return true, "", nil }, Recheck: time.Millisecond})
	ctx := context.Background()
	if err := s.Add(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	ran := false
	if !s.Close(func() { ran = true }) || !ran {
		t.Fatal("the first Close did not close, or did not run its last step")
	}
	if s.Close(func() { t.Error("a second Close ran its last step") }) {
		t.Error("a second Close said it closed")
	}
	if err := s.Add(ctx, "b"); !errors.Is(err, ErrClosed) {
		t.Errorf("Add after Close: %v, want ErrClosed", err)
	}
	s.Select("c", true)
	if err := s.Remove(ctx, "a"); err != nil {
		t.Fatal(err)
	}
	if got, want := a.log(), []string{"+a"}; !slices.Equal(got, want) {
		t.Fatalf("Apply calls %v, want %v", got, want)
	}
}

// With a reviewer (IfAllowed), a namespace whose access review fails (a
// 500 from the server, a timeout) stays out: an error is not a yes. It
// joins once a recheck's review says yes, and leaves once one says no.
func TestReviewErrorKeepsTheNamespaceOut(t *testing.T) {
	var flaky atomic.Int32 // 0: its review errs; 1: allowed; 2: refused
	review := func(_ context.Context, namespace string) (bool, string, error) {
		switch {
		case namespace == "ok":
			return true, "", nil
		case namespace == "flaky" && flaky.Load() == 0:
			return false, "", errors.New("the review failed")
		case namespace == "flaky" && flaky.Load() == 1:
			return true, "", nil
		}
		return false, "no Role", nil // every namespace (""), and the others
	}
	a := newApplied()
	s := New(Config{Apply: a.apply, Review: review, Recheck: 10 * time.Millisecond})
	defer s.Close(nil)
	ctx := context.Background()
	for _, ns := range []string{"ok", "flaky", "no"} {
		if err := s.Add(ctx, ns); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.now(); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("members %v while flaky's review errs; want ok alone", got)
	}
	time.Sleep(50 * time.Millisecond) // a few rechecks, erring too
	if got := a.now(); !slices.Equal(got, []string{"ok"}) {
		t.Fatalf("members %v after rechecks that erred; want ok alone", got)
	}
	flaky.Store(1)
	eventually(t, "flaky to join once a recheck says yes", func() bool { return slices.Equal(a.now(), []string{"flaky", "ok"}) })
	flaky.Store(2)
	eventually(t, "flaky to leave once a recheck says no", func() bool { return slices.Equal(a.now(), []string{"ok"}) })
}

// A reviewer that allows every namespace ("") is asked once per Recheck,
// not per namespace.
func TestReviewEverywhereAsksOnce(t *testing.T) {
	var asked atomic.Int32
	review := func(_ context.Context, namespace string) (bool, string, error) {
		asked.Add(1)
		return namespace == "", "", nil
	}
	a := newApplied()
	s := New(Config{Apply: a.apply, Review: review, Recheck: time.Hour})
	defer s.Close(nil)
	for _, ns := range []string{"a", "b", "c"} {
		if err := s.Add(context.Background(), ns); err != nil {
			t.Fatal(err)
		}
	}
	if got := a.now(); !slices.Equal(got, []string{"a", "b", "c"}) {
		t.Fatalf("members %v, want [a b c]", got)
	}
	if n := asked.Load(); n != 1 {
		t.Fatalf("%d reviews, want 1 (everywhere)", n)
	}
}

func eventually(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// A Driven set reviews again only when its owner calls Recheck (one
// goroutine for many sets: the controller-runtime adapter's gate per
// kind): no goroutine of its own lets a namespace in or out meanwhile.
func TestDrivenRechecksOnlyWhenAsked(t *testing.T) {
	var allowed atomic.Bool
	review := func(_ context.Context, namespace string) (bool, string, error) {
		return namespace == "a" && allowed.Load(), "no Role", nil
	}
	a := newApplied()
	s := New(Config{Apply: a.apply, Review: review, Recheck: time.Millisecond, Driven: true})
	s.Select("a", true)
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v, want none (refused)", got)
	}
	allowed.Store(true)
	time.Sleep(20 * time.Millisecond) // many Rechecks' worth
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v before Recheck, want none: a Driven set has no goroutine of its own", got)
	}
	s.Recheck(context.Background())
	if got := a.now(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("members %v after Recheck, want [a]", got)
	}
	allowed.Store(false)
	s.Recheck(context.Background())
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v after a Recheck that refuses, want none", got)
	}
	s.Close(nil)
	allowed.Store(true)
	s.Recheck(context.Background()) // a no-op after Close
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v after Close, want none", got)
	}
}

// A namespace allowed whose Apply failed (the informer could not be
// made) is applied again at each recheck until it joins, though its
// review's answer has not changed.
func TestFailedApplyIsRetriedAtRecheck(t *testing.T) {
	allow := func(context.Context, string) (bool, string, error) { return true, "", nil }
	a := newApplied()
	a.mu.Lock()
	a.fail["a"] = true
	a.mu.Unlock()
	s := New(Config{Apply: a.apply, Review: func(ctx context.Context, ns string) (bool, string, error) {
		if ns == "" {
			return false, "", nil // not everywhere: each namespace is reviewed
		}
		return allow(ctx, ns)
	}, Driven: true})
	defer s.Close(nil)
	s.Select("a", true)
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v, want none (Apply failed)", got)
	}
	s.Recheck(context.Background())
	if got := a.now(); len(got) != 0 {
		t.Fatalf("members %v while Apply still fails", got)
	}
	a.mu.Lock()
	a.fail["a"] = false
	a.mu.Unlock()
	s.Recheck(context.Background())
	if got := a.now(); !slices.Equal(got, []string{"a"}) {
		t.Fatalf("members %v after a recheck with Apply working, want [a]", got)
	}
}

// An Apply that says ErrLater keeps the namespace out without an error
// logged, and the next recheck applies it again.
func TestErrLaterIsQuietAndRetried(t *testing.T) {
	var later atomic.Bool
	later.Store(true)
	var joined []string
	apply := func(_ context.Context, ns string, in bool) error {
		if in && later.Load() {
			return fmt.Errorf("still leaving: %w", ErrLater)
		}
		joined = append(joined, ns)
		return nil
	}
	var logged bytes.Buffer
	s := New(Config{Apply: apply, Driven: true, Log: slog.New(slog.NewTextHandler(&logged, nil)),
		Review: func(_ context.Context, ns string) (bool, string, error) { return ns != "", "", nil }})
	defer s.Close(nil)
	s.Select("a", true)
	s.Recheck(context.Background())
	if len(joined) != 0 || strings.Contains(logged.String(), "level=ERROR") {
		t.Fatalf("joined %v, log %q: want none, and no error logged", joined, logged.String())
	}
	later.Store(false)
	s.Recheck(context.Background())
	if !slices.Equal(joined, []string{"a"}) {
		t.Fatalf("joined %v after a recheck, want [a]", joined)
	}
}
