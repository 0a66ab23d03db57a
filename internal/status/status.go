// Package status is what an informer's loop publishes to other
// goroutines: its resourceVersion, whether it has synced, when it last
// heard from the server, why it cannot sync or goes on failing, and who
// waits for which. The loop's writer changes it; anyone reads it.
package status

import (
	"context"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/util/resourceversion"
)

// Status is what the loop publishes to other goroutines: the informer's
// resourceVersion, whether it has synced, when it last heard from the
// server, why it cannot sync or goes on failing, and who waits for which.
// Once the informer runs, only the loop's writer changes it, but for
// Asked (the informer's reconfigure) and StartedAt (its start); before,
// New records there a configuration that cannot start (Fail, SetSync).
// Anyone reads it.
//
// What is read on every event or by every caller is an atomic; the rest,
// and every wait, is under the one mutex.
type Status struct {
	rv        atomic.Pointer[string] // the last resourceVersion seen
	Synced    atomic.Bool            // never false again once true
	lastEvent atomic.Int64           // UnixNano of the last thing received from the server
	nwait     atomic.Int32           // len(waiters): Advance takes mu only when someone waits
	// StartedAt and SyncedAt: when the informer first started and first
	// synced (UnixNano; 0: not yet); Expected, the objects the first list
	// was said to hold (0: unknown). The root's run.go reads them.
	StartedAt, SyncedAt, Expected atomic.Int64
	// reconnecting: UnixNano since the loop lost its list or watch and
	// waits to try again (0: it has one, or is getting one without a
	// wait); cleared when a list or watch works again (OK).
	reconnecting atomic.Int64
	Restored     atomic.Pointer[Restore] // the last restore from the state file (nil: none)
	// Asked is the generation of the last configuration the informer was
	// given while started, taken the last one its loop has taken (Take: a
	// list under it replaced the cache, for a wider projection): WaitSync
	// waits until taken reaches Asked.
	Asked, taken atomic.Uint64

	mu           sync.Mutex    // guards the fields below
	syncErr      error         // the last persistent error before the first sync
	syncCh       chan struct{} // closed (and replaced) when synced or syncErr change
	syncedCh     chan struct{} // closed once synced, never replaced
	waiters      []rvWaiter    // WaitForResourceVersion calls not yet satisfied
	failing      error         // the last persistent error not yet followed by success
	failingSince time.Time     // when the persistent failures began
}

// Restore is a restore from the state file: how many objects, from
// which file, at which resourceVersion (kinformer.StateRestore).
type Restore struct {
	Objects         int
	File            string
	ResourceVersion string
}

type rvWaiter struct {
	rv string
	ch chan struct{}
}

// New returns the status of an informer not yet started.
func New() *Status {
	return &Status{syncCh: make(chan struct{}), syncedCh: make(chan struct{})}
}

// Advance records rv as the last resourceVersion seen and wakes the
// WaitForResourceVersion calls it satisfies. Cheap when none wait.
func (s *Status) Advance(rv string) {
	if rv == "" {
		return
	}
	s.rv.Store(&rv)
	if s.nwait.Load() == 0 {
		return
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	kept := s.waiters[:0]
	for _, w := range s.waiters {
		if c, err := resourceversion.CompareResourceVersion(rv, w.rv); err == nil && c >= 0 {
			close(w.ch)
			continue
		}
		kept = append(kept, w)
	}
	clear(s.waiters[len(kept):])
	s.waiters = kept
	s.nwait.Store(int32(len(kept)))
}

// Heard records that the server has just been heard from.
func (s *Status) Heard() { s.lastEvent.Store(time.Now().UnixNano()) }

// LastEventTime is when the server was last heard from (zero: never).
func (s *Status) LastEventTime() time.Time {
	if n := s.lastEvent.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// ResourceVersion is the last resourceVersion seen ("": none yet).
func (s *Status) ResourceVersion() string {
	if p := s.rv.Load(); p != nil {
		return *p
	}
	return ""
}

// Reached reports whether the last resourceVersion seen is rv or later.
func (s *Status) Reached(rv string) bool {
	c, err := resourceversion.CompareResourceVersion(s.ResourceVersion(), rv)
	return err == nil && c >= 0
}

// WaitRV waits until the resourceVersion is rv or later, or ctx ends.
func (s *Status) WaitRV(ctx context.Context, rv string) error {
	if s.Reached(rv) {
		return nil
	}
	ch := make(chan struct{})
	s.mu.Lock()
	s.waiters = append(s.waiters, rvWaiter{rv, ch})
	s.nwait.Store(int32(len(s.waiters)))
	s.mu.Unlock()
	if s.Reached(rv) { // advanced before the waiter was seen
		s.forget(ch)
		return nil
	}
	select {
	case <-ch:
		return nil
	case <-ctx.Done():
		s.forget(ch)
		return ctx.Err()
	}
}

// forget drops the waiter whose channel is ch, if still there.
func (s *Status) forget(ch chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	for i, w := range s.waiters {
		if w.ch == ch {
			s.waiters = append(s.waiters[:i], s.waiters[i+1:]...)
			break
		}
	}
	s.nwait.Store(int32(len(s.waiters)))
}

// SetSync records the outcome of a list for WaitForSync: synced, or not
// yet and why (a persistent error, or nil for none known).
func (s *Status) SetSync(synced bool, persistent error) {
	if synced {
		// Before syncCh closes: a waiter woken by it finds it set.
		s.SyncedAt.CompareAndSwap(0, time.Now().UnixNano())
		s.Synced.Store(true)
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	s.syncErr = persistent
	close(s.syncCh)
	s.syncCh = make(chan struct{})
	if synced {
		select {
		case <-s.syncedCh:
		default:
			close(s.syncedCh)
		}
	}
}

// WhenSynced is closed once the informer has synced, and never replaced.
func (s *Status) WhenSynced() <-chan struct{} { return s.syncedCh }

// Waiters is how many WaitRV calls wait now.
func (s *Status) Waiters() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.waiters)
}

// Current reports whether the informer has synced and taken the last
// configuration it was given.
func (s *Status) Current() bool {
	return s.Synced.Load() && s.taken.Load() >= s.Asked.Load()
}

// Take records that the loop has taken the configuration gen (for a wider
// projection: a list under it has replaced the cache), waking the
// WaitForSync calls that wait for it.
func (s *Status) Take(gen uint64) {
	s.taken.Store(gen)
	s.mu.Lock()
	defer s.mu.Unlock()
	close(s.syncCh)
	s.syncCh = make(chan struct{})
}

// WaitSync waits until the informer has synced and taken the last
// configuration it was given (nil), a persistent error stops the first
// sync (that error), or ctx ends.
func (s *Status) WaitSync(ctx context.Context) error {
	for {
		if s.Current() {
			return nil
		}
		s.mu.Lock()
		err, ch := s.syncErr, s.syncCh
		s.mu.Unlock()
		if s.Current() {
			return nil
		}
		if err != nil {
			return err
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-ch:
		}
	}
}

// Fail records a persistent error; ok clears it.
func (s *Status) Fail(err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.failing == nil {
		s.failingSince = time.Now()
	}
	s.failing = err
}

// OK returns the persistent error it cleared (nil: none).
func (s *Status) OK() (was error) {
	s.reconnecting.Store(0)
	s.mu.Lock()
	defer s.mu.Unlock()
	was = s.failing
	s.failing, s.failingSince = nil, time.Time{}
	return was
}

// Waiting records that the loop waits before its next list or watch, at
// now, unless it already did since an earlier time.
func (s *Status) Waiting(now time.Time) {
	s.reconnecting.CompareAndSwap(0, now.UnixNano())
}

// ReconnectingSince is since when the loop has been without a list or
// watch that works, waiting to try again; zero if it is not.
func (s *Status) ReconnectingSince() time.Time {
	if n := s.reconnecting.Load(); n != 0 {
		return time.Unix(0, n)
	}
	return time.Time{}
}

// LastError is the persistent error that goes on, and since when.
func (s *Status) LastError() (error, time.Time) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.failing, s.failingSince
}
