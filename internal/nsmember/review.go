package nsmember

import (
	"context"
	"errors"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// The access reviewer (Config.Review, a view's Namespaces.IfAllowed):
// whether the client may list and watch the resource in a candidate
// namespace, asked once cluster-wide and then per namespace, and asked
// again every Recheck (on a goroutine of its own, or by the owner of a
// Driven set), letting in or out the namespaces whose answer changed.

// review asks whether the client may list and watch the resource in
// namespace, and why not, within 30 s or until ctx ends; an error is
// logged, and leaves the answer as it was.
func (s *Set) review(ctx context.Context, namespace string) (bool, string, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	s.revMu.Lock()
	if time.Now().After(s.everywhereUntil) {
		all, _, err := s.c.Review(ctx, metav1.NamespaceAll)
		s.everywhere = err == nil && all
		s.everywhereUntil = time.Now().Add(s.c.Recheck)
	}
	everywhere := s.everywhere
	s.revMu.Unlock()
	if everywhere {
		return true, "", nil
	}
	ok, why, err := s.c.Review(ctx, namespace)
	if err != nil {
		s.logf(slog.LevelError, "kinformer: could not review the permission to list and watch "+s.c.Resource+" in a namespace (SelfSubjectAccessReview); its answer stays as it was until a recheck", "namespace", namespace, "error", err.Error())
	}
	return ok, why, err
}

// recheck reviews the candidates' permissions every Recheck until Close
// (a Set not Driven).
func (s *Set) recheck() {
	t := time.NewTicker(s.c.Recheck)
	defer t.Stop()
	for {
		select {
		case <-s.closing:
			return
		case <-t.C:
		}
		s.Recheck(s.life)
	}
}

// Recheck reviews the candidates' permissions now, until ctx ends, and
// lets in or out those whose answer changed, and those whose last change
// failed to apply: a Driven set's owner calls it every Recheck; a set
// not Driven does on a goroutine of its own. After Close, a no-op.
func (s *Set) Recheck(ctx context.Context) {
	s.mu.Lock()
	if s.closed || s.c.Review == nil {
		s.mu.Unlock()
		return
	}
	var candidates []string
	for ns := range s.named {
		candidates = append(candidates, ns)
	}
	for ns := range s.selected {
		if !s.named[ns] {
			candidates = append(candidates, ns)
		}
	}
	s.mu.Unlock()
	type answer struct {
		ok  bool
		why string
	}
	answers := make(map[string]answer, len(candidates))
	for _, ns := range candidates {
		select {
		case <-s.closing:
			return
		case <-ctx.Done():
			return
		default:
		}
		if ok, why, err := s.review(ctx, ns); err == nil {
			answers[ns] = answer{ok, why}
		}
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	for ns, a := range answers {
		if s.closed {
			break
		}
		if !(s.named[ns] || s.selected[ns]) {
			continue // no longer a candidate
		}
		prev, known := s.allowed[ns]
		s.allowed[ns] = a.ok
		switch {
		case known && prev != a.ok && a.ok:
			s.logf(slog.LevelInfo, "kinformer: may now list and watch "+s.c.Resource+" in a namespace: it joins "+s.c.Holder, "namespace", ns)
		case known && prev != a.ok:
			s.logf(slog.LevelInfo, "kinformer: may no longer list and watch "+s.c.Resource+" in a namespace: it leaves "+s.c.Holder, "namespace", ns, "reason", a.why)
		}
		if s.members[ns] == a.ok {
			continue // as it should be
		}
		// The answer changed, or the change it asked for last time
		// failed (Apply erred): apply it now.
		if err := s.applyLocked(s.life, ns); err != nil && !errors.Is(err, ErrLater) {
			s.logf(slog.LevelError, "kinformer: a namespace now allowed could not join "+s.c.Holder+"; tried again at the next recheck", "namespace", ns, "error", err.Error())
		}
	}
}
