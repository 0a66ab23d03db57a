package kinformer

import (
	"context"
)

// ListGate bounds how many informers sharing it make their initial list at
// once (Options.ListGate): a process that starts a hundred informers
// together does not send a hundred lists of whole collections to the API
// server in one instant, each taking seats of its priority level (a
// list of a large collection takes up to ten), but a few at a time. An
// informer takes a place for each list it makes before it first syncs
// (the initial list and its retries) and gives it back when that list
// ends; later lists (re-lists, resyncs) do not wait.
type ListGate struct{ places chan struct{} }

// DefaultMaxInitialLists is how many of a Factory's informers make their
// initial list at once unless FactoryOptions.MaxInitialLists says.
const DefaultMaxInitialLists = 8

// NewListGate returns a gate of n places; nil (no bound) if n < 1.
func NewListGate(n int) *ListGate {
	if n < 1 {
		return nil
	}
	return &ListGate{places: make(chan struct{}, n)}
}

// enter waits for a place; false if ctx ended first.
func (g *ListGate) enter(ctx context.Context) bool {
	select {
	case g.places <- struct{}{}:
		return true
	case <-ctx.Done():
		return false
	}
}

// leave gives a place back.
func (g *ListGate) leave() { <-g.places }
