package kinformer

import (
	"context"
	"log/slog"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A view's access reviewer (Namespaces.IfAllowed): whether the client may
// list and watch the resource in a candidate namespace, asked once
// cluster-wide and then per namespace, and asked again every Recheck on
// its own goroutine, letting in or out the namespaces whose answer
// changed.

// review asks whether the client may list and watch the resource in
// namespace, and why not; an error is logged, and leaves the answer as it
// was.
func (n *viewNamespaces[T]) review(namespace string) (bool, string, error) {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	n.revMu.Lock()
	if time.Now().After(n.everywhereUntil) {
		all, _, err := n.may(ctx, metav1.NamespaceAll)
		n.everywhere = err == nil && all
		n.everywhereUntil = time.Now().Add(n.recheckEvery)
	}
	everywhere := n.everywhere
	n.revMu.Unlock()
	if everywhere {
		return true, "", nil
	}
	ok, why, err := n.may(ctx, namespace)
	if err != nil {
		n.logf(slog.LevelError, "kinformer: could not review the permission to list and watch "+n.resName+" in a namespace (SelfSubjectAccessReview); its answer stays as it was until a recheck", "namespace", namespace, "error", err.Error())
	}
	return ok, why, err
}

// recheck reviews the candidates' permissions every period until Close,
// and lets in or out those whose answer changed.
func (n *viewNamespaces[T]) recheck(period time.Duration) {
	t := time.NewTicker(period)
	defer t.Stop()
	for {
		select {
		case <-n.closing:
			return
		case <-t.C:
		}
		n.mu.Lock()
		var candidates []string
		for ns := range n.named {
			candidates = append(candidates, ns)
		}
		for ns := range n.selected {
			if !n.named[ns] {
				candidates = append(candidates, ns)
			}
		}
		n.mu.Unlock()
		type answer struct {
			ok  bool
			why string
		}
		answers := make(map[string]answer, len(candidates))
		for _, ns := range candidates {
			select {
			case <-n.closing:
				return
			default:
			}
			if ok, why, err := n.review(ns); err == nil {
				answers[ns] = answer{ok, why}
			}
		}
		n.mu.Lock()
		for ns, a := range answers {
			if n.closed {
				break
			}
			prev, known := n.allowed[ns]
			if !known || prev == a.ok || !(n.named[ns] || n.selected[ns]) {
				continue // no longer a candidate, or unchanged
			}
			n.allowed[ns] = a.ok
			if a.ok {
				n.logf(slog.LevelInfo, "kinformer: may now list and watch "+n.resName+" in a namespace: it joins the view", "namespace", ns)
			} else {
				n.logf(slog.LevelInfo, "kinformer: may no longer list and watch "+n.resName+" in a namespace: it leaves the view", "namespace", ns, "reason", a.why)
			}
			if err := n.applyLocked(ns); err != nil {
				n.logf(slog.LevelError, "kinformer: a namespace now allowed could not join the view", "namespace", ns, "error", err.Error())
			}
		}
		n.mu.Unlock()
	}
}
