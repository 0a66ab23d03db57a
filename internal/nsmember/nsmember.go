// Package nsmember is the membership of namespaces that changes while a
// cache runs: those named (added and removed by hand), those a label
// selector of Namespace objects matches, and, with a reviewer, only those
// of them the client may list and watch the resource in. kinformer's
// namespaced views (SharedView, DynamicView) and the controller-runtime
// adapter's caches (kcr's AddNamespace, NamespaceSelector) both keep their
// namespaces with a Set, and kcr's IfAllowed keeps, with one Set per kind
// whose candidates are the cache's namespaces, where each kind may be
// held; what joining and leaving means (acquiring an informer, starting a
// namespace cache, holding a kind there) is theirs, given as Config.Apply.
package nsmember

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/util/validation"
)

// Config is what a Set is made with; it does not change.
type Config struct {
	// Apply makes namespace a member (in) or not: called with the set's
	// lock held, one change at a time, only when namespace's membership
	// changes. On an error the membership stays as it was.
	Apply func(ctx context.Context, namespace string, in bool) error
	// Members are members from the start, named: the caller has made
	// them so (no Apply, no review).
	Members []string
	// Review, if set (IfAllowed), says whether the client may list and
	// watch the resource in namespace (metav1.NamespaceAll: everywhere),
	// and why not. Only the candidates (named or selected) it allows are
	// members; they are reviewed as they become candidates and again
	// every Recheck.
	Review func(ctx context.Context, namespace string) (bool, string, error)
	// Recheck is how often Review is asked again. Default 1 minute.
	Recheck time.Duration
	// Driven sets have no goroutine of their own: their owner calls
	// Recheck every Recheck (one goroutine for many sets).
	Driven bool
	// Log, Resource and Holder name things in log lines: "the view of
	// pods", "the cache". Log may be nil.
	Log      *slog.Logger
	Resource string
	Holder   string
}

// ErrClosed is returned by Add after Close.
var ErrClosed = errors.New("closed")

// ErrLater, wrapped in an error of Config.Apply, says the change cannot be
// made yet (a namespace still leaving): the membership stays as it was,
// nothing is logged, and a Set with a reviewer applies it again at its
// next recheck (one without a reviewer never does: it is for reviewed
// sets).
var ErrLater = errors.New("not yet: applied again at the next recheck")

// Set is a changing membership of namespaces.
type Set struct {
	c Config

	// mu guards everything below, and is held while Apply runs, so that
	// changes happen one at a time (in the order of the Namespace events,
	// for the selector's).
	mu       sync.Mutex
	named    map[string]bool
	selected map[string]bool
	members  map[string]bool
	closed   bool
	// allowed holds, with a reviewer, the answers for the candidates
	// reviewed so far.
	allowed map[string]bool

	// everywhere caches, until everywhereUntil, whether the client may
	// list and watch the resource in every namespace: then no namespace
	// needs a review of its own.
	revMu           sync.Mutex // guards everywhere and everywhereUntil
	everywhere      bool
	everywhereUntil time.Time

	closing  chan struct{}
	life     context.Context // ends with Close: the reviews in flight stop
	end      context.CancelFunc
	rechecks sync.WaitGroup
}

// New returns an empty Set; with c.Review, it reviews its candidates
// again every c.Recheck on a goroutine of its own until Close (unless
// c.Driven).
func New(c Config) *Set {
	s := &Set{c: c, named: map[string]bool{}, selected: map[string]bool{}, members: map[string]bool{}, closing: make(chan struct{})}
	s.life, s.end = context.WithCancel(context.Background())
	for _, ns := range c.Members {
		s.named[ns], s.members[ns] = true, true
	}
	if c.Review != nil {
		if s.c.Recheck <= 0 {
			s.c.Recheck = time.Minute
		}
		s.allowed = map[string]bool{}
		for _, ns := range c.Members {
			s.allowed[ns] = true
		}
		if !c.Driven {
			s.rechecks.Go(s.recheck)
		}
	}
	return s
}

// CheckName says what is wrong with namespace as a member's name.
func CheckName(namespace string) error {
	if namespace == "" {
		return errors.New(`namespace "": a set of namespaces holds named namespaces (for all of them use one informer of every namespace)`)
	}
	if errs := validation.IsDNS1123Label(namespace); len(errs) > 0 {
		return fmt.Errorf("namespace %q: %s", namespace, errs[0])
	}
	return nil
}

// Add names namespace: a member until Remove (or SetNamed) takes it out.
// A namespace already named is a no-op; one the selector holds becomes
// named too.
func (s *Set) Add(ctx context.Context, namespace string) error {
	if err := CheckName(namespace); err != nil {
		return err
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return ErrClosed
	}
	if s.named[namespace] {
		return nil
	}
	s.named[namespace] = true
	if err := s.applyLocked(ctx, namespace); err != nil {
		delete(s.named, namespace)
		return err
	}
	return nil
}

// Remove unnames namespace: it leaves unless the selector holds it.
// Unknown: a no-op.
func (s *Set) Remove(ctx context.Context, namespace string) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed || !s.named[namespace] {
		return nil
	}
	delete(s.named, namespace)
	if err := s.applyLocked(ctx, namespace); err != nil {
		s.named[namespace] = true
		return err
	}
	return nil
}

// SetNamed makes namespaces the named ones, as Add and Remove do for each
// difference: the others are removed first. On an error the namespaces
// before it are set.
func (s *Set) SetNamed(ctx context.Context, namespaces []string) error {
	for _, ns := range namespaces {
		if err := CheckName(ns); err != nil {
			return err
		}
	}
	s.mu.Lock()
	var gone []string
	for ns := range s.named {
		if !slices.Contains(namespaces, ns) {
			gone = append(gone, ns)
		}
	}
	s.mu.Unlock()
	slices.Sort(gone)
	for _, ns := range gone {
		if err := s.Remove(ctx, ns); err != nil {
			return err
		}
	}
	for _, ns := range namespaces {
		if err := s.Add(ctx, ns); err != nil {
			return err
		}
	}
	return nil
}

// Select records that the selector matches namespace (in), or no longer
// does, and changes the membership to follow; an error of Apply is
// logged (a selected namespace that cannot join stays out until the
// selector's next change of it or, with a reviewer, a recheck).
func (s *Set) Select(namespace string, in bool) {
	s.SelectNow(namespace, func() bool { return in })
}

// SelectNow is Select with in asked under the set's lock: callers that
// race to select a namespace after a change of what in reads leave the
// set as the last change says, whatever order they run in.
func (s *Set) SelectNow(namespace string, inFn func() bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	in := inFn()
	if s.closed || s.selected[namespace] == in {
		return
	}
	if in {
		s.selected[namespace] = true
	} else {
		delete(s.selected, namespace)
	}
	if err := s.applyLocked(s.life, namespace); err != nil && !errors.Is(err, ErrLater) {
		s.logf(slog.LevelError, "kinformer: a namespace selected for "+s.c.Holder+" could not join it", "namespace", namespace, "error", err.Error())
	}
}

// Locked runs fn with the set's lock held: no change runs meanwhile (a
// selector's handler, registered in fn, applies its first change after
// fn returns).
func (s *Set) Locked(fn func()) {
	s.mu.Lock()
	defer s.mu.Unlock()
	fn()
}

// Named reports whether namespace is named.
func (s *Set) Named(namespace string) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.named[namespace]
}

// Close ends the set: no more changes, no more reviews. It runs last,
// if not nil, with the set's lock held (no Apply runs meanwhile), and
// returns once the rechecks have ended. It reports whether it closed the
// set: a second Close is a no-op, and returns false.
func (s *Set) Close(last func()) bool {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return false
	}
	s.closed = true
	close(s.closing)
	s.end()
	if last != nil {
		last()
	}
	s.mu.Unlock()
	s.rechecks.Wait()
	return true
}

// applyLocked makes namespace's membership what named and selected (and,
// with a reviewer, allowed) say; it reviews a new candidate's permission.
func (s *Set) applyLocked(ctx context.Context, namespace string) error {
	want := s.named[namespace] || s.selected[namespace]
	if s.c.Review != nil {
		if !want {
			delete(s.allowed, namespace)
		} else if _, known := s.allowed[namespace]; !known {
			ok, why, err := s.review(ctx, namespace)
			if err == nil && !ok {
				s.logf(slog.LevelInfo, "kinformer: may not list and watch "+s.c.Resource+" in a namespace: left out of "+s.c.Holder+" until a recheck finds otherwise", "namespace", namespace, "reason", why)
			}
			s.allowed[namespace] = ok // an error: no, until a recheck answers
		}
		want = want && s.allowed[namespace]
	}
	if s.members[namespace] == want {
		return nil
	}
	if err := s.c.Apply(ctx, namespace, want); err != nil {
		return err
	}
	if want {
		s.members[namespace] = true
	} else {
		delete(s.members, namespace)
	}
	return nil
}

func (s *Set) logf(level slog.Level, msg string, args ...any) {
	if s.c.Log != nil {
		s.c.Log.Log(context.Background(), level, msg, args...)
	}
}
