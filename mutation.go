package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"reflect"
	"runtime/debug"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer/internal/objdiff"
)

// The cache mutation detector (Options.DetectMutations): a deep copy of
// every cached object, compared with the object when the writer replaces
// or removes it and every second while the informer runs. A difference is
// someone's change to a shared object (handlers and readers must copy
// first): reported once, as an Error event wrapping ErrMutated and an
// error log line, and in "panic" mode by a panic.

// EnvMutationDetector names the environment variable read by New for every
// informer: "true" or "1" turns the mutation detector on
// (Options.DetectMutations) whatever the options say; "panic" turns it on
// and makes each detection panic after it is reported, to fail a test
// binary loudly. Any other value, or none, leaves it to the options.
const EnvMutationDetector = "KINFORMER_CACHE_MUTATION_DETECTOR"

// mutationEnv reads EnvMutationDetector.
func mutationEnv() (on, panics bool) {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvMutationDetector))) {
	case "true", "1":
		return true, false
	case "panic":
		return true, true
	}
	return false, false
}

// mutationHook is what the writer tells of the objects it caches (put),
// replaces and removes (retire), or swaps in and out with a re-list: the
// detector, or noMutationHook.
type mutationHook[T Object] interface {
	put(emit func(Event[T]), key string, old T, existed bool, obj T)
	retire(emit func(Event[T]), key string, old T)
	swap(emit func(Event[T]), old, items map[string]ref[T])
}

// noMutationHook is the hook of an informer without the detector: nothing
// is copied or compared.
type noMutationHook[T Object] struct{}

func (noMutationHook[T]) put(func(Event[T]), string, T, bool, T)                    {}
func (noMutationHook[T]) retire(func(Event[T]), string, T)                          {}
func (noMutationHook[T]) swap(func(Event[T]), map[string]ref[T], map[string]ref[T]) {}

// mutationDetecting is what a ListerWatcher implements to turn the
// detector on for informers over it (kinformertest.Server does).
type mutationDetecting interface{ DetectMutations() bool }

const (
	// defaultMutationPeriod is how often every cached object is compared
	// with its copy.
	defaultMutationPeriod = time.Second
	// mutationChunk is how many objects the periodic check takes from the
	// detector's table at a time: the writer, which updates the table as
	// it changes the cache, waits at most for one chunk to be copied out.
	mutationChunk = 256
)

// detector keeps, for every cached object, the instance cached and a deep
// copy made as it was cached (after Transform and sharing). Entries are
// pairs: the periodic check compares an instance with its own copy, never
// with the copy of another state of the object, whatever the writer does
// meanwhile; and it never takes the cache's lock, so readers do not wait
// for it.
//
// The writer (the loop's goroutine) tracks objects as it caches them and
// retires them as it replaces or removes them, comparing each retired one
// with its copy first: a mutation is caught before the object leaves the
// cache. Whoever finds a difference in an entry first reports it: the
// writer, which removes the entry, or the periodic check, which replaces
// the entry's copy with a copy of the mutated object (refresh), so the
// same mutation is reported once and the next one is caught again.
type detector[T Object] struct {
	period time.Duration
	log    *slog.Logger // error level: the informer's handler logger, never discarded
	obs    *observer    // nil without metrics
	rv     func() string
	// emit queues an Error event from the periodic check (the writer passes
	// its publisher's).
	emit func(Event[T])
	// fence makes the handler calls that have ended happen before the
	// comparisons that follow (dispatcher.fence): a handler that modified
	// its object and returned is reported, not left to the race detector.
	fence func()
	// fail is called with the message after a report in "panic" mode.
	fail func(msg string)
	// tick, if set, replaces the period's ticker (tests).
	tick <-chan time.Time

	mu      sync.Mutex     // guards index and entries
	index   map[string]int // key -> its entry
	entries []watched[T]

	buf    []watched[T] // the periodic check's chunk
	copies atomic.Int64 // deep copies made (tests)
	// inexact reports the first copy that is not equal to its object.
	inexact sync.Once
	// found is raised by each report: it is the Stale of the informer's
	// Sharer, which then forgets the maps it shares (one may be the map
	// changed) before it shares one again.
	found atomic.Bool
	// off is set when the periodic check failed (broke): the detector
	// then tracks nothing more, and the informer goes on without it.
	off atomic.Bool
}

// detectorFail is the panic of "panic" mode (detector.fail): the periodic
// check lets it through, where it recovers from any other.
type detectorFail struct{ msg string }

func (f detectorFail) Error() string { return f.msg }

// watched is one cached object and its copy.
type watched[T Object] struct {
	key          string
	cached, copy T
}

func newDetector[T Object](log *slog.Logger, obs *observer, panics bool) *detector[T] {
	d := &detector[T]{period: defaultMutationPeriod, log: log, obs: obs, index: map[string]int{}}
	if panics {
		d.fail = func(msg string) { panic(detectorFail{"kinformer: " + msg}) }
	}
	obs.detecting()
	return d
}

// copyOf returns a deep copy of obj, the object under key, and whether
// it is equal to obj: a DeepCopyObject that is not exact (a JSON round
// trip turns int64s into float64s) would have every object reported for
// ever, each check after each refresh; such copies are not kept, and the
// first is reported (inexact).
func (d *detector[T]) copyOf(key string, obj T) (T, bool) {
	d.copies.Add(1)
	cp := obj.DeepCopyObject().(T)
	if diff := objdiff.Diff(cp, obj); diff != "" {
		d.inexact.Do(func() {
			msg := fmt.Sprintf("the mutation detector cannot check objects of type %T: their DeepCopyObject is not exact (%s, copy: %s); objects whose copy differs are not checked",
				obj, key, diff)
			d.log.Error("kinformer: " + msg)
			if d.fail != nil {
				d.fail(msg)
			}
		})
		return cp, false
	}
	return cp, true
}

// track starts watching obj, just cached under key, in place of what was.
func (d *detector[T]) track(key string, obj T) {
	if d.off.Load() {
		return
	}
	cp, exact := d.copyOf(key, obj)
	w := watched[T]{key: key, cached: obj, copy: cp}
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := d.index[key]
	switch {
	case !exact:
		if ok {
			d.dropLocked(i)
		}
	case ok:
		d.entries[i] = w
	default:
		d.index[key] = len(d.entries)
		d.entries = append(d.entries, w)
	}
}

// dropLocked removes entry i (moving the last one there).
func (d *detector[T]) dropLocked(i int) {
	delete(d.index, d.entries[i].key)
	last := len(d.entries) - 1
	if i != last {
		d.entries[i] = d.entries[last]
		d.index[d.entries[i].key] = i
	}
	d.entries[last] = watched[T]{}
	d.entries = d.entries[:last]
}

// retire stops watching old under key and compares it with its copy;
// emit queues the Error event of a difference.
func (d *detector[T]) retire(emit func(Event[T]), key string, old T) {
	if d.off.Load() {
		return
	}
	d.mu.Lock()
	i, ok := d.index[key]
	if !ok || !sameObject(d.entries[i].cached, old) {
		d.mu.Unlock()
		return
	}
	cp := d.entries[i].copy
	d.dropLocked(i)
	d.mu.Unlock()
	if diff := objdiff.Diff(old, cp); diff != "" {
		d.report(emit, key, diff)
	}
}

// put follows the writer's put: obj replaced old (if existed) under key.
func (d *detector[T]) put(emit func(Event[T]), key string, old T, existed bool, obj T) {
	if existed {
		d.retire(emit, key, old)
	}
	d.track(key, obj)
}

// swap follows the writer's swap of the cache's content, old, for items:
// the objects replaced or dropped are retired, the new ones tracked; an
// object a re-list kept (the same instance) stays watched.
func (d *detector[T]) swap(emit func(Event[T]), old, items map[string]ref[T]) {
	for key, o := range old {
		if n, ok := items[key]; !ok || !sameObject(o.object(), n.object()) {
			d.retire(emit, key, o.object())
		}
	}
	for key, r := range items {
		if o, ok := old[key]; !ok || !sameObject(o.object(), r.object()) {
			d.track(key, r.object())
		}
	}
}

// run compares every cached object with its copy each period until ctx
// ends, or until a check fails.
func (d *detector[T]) run(ctx context.Context) {
	tick := d.tick
	if tick == nil {
		t := time.NewTicker(d.period)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if !d.check(ctx) {
				return
			}
		}
	}
}

// check compares every watched object with its copy, a chunk at a time,
// outside the detector's lock. It reports false if it failed: a panic in
// the check (a DeepCopyObject or String method of the objects' type that
// panics, a bug of the detector) is reported, as an Error event and an
// error log line, and turns the detector off; the informer goes on. The
// panic of "panic" mode is not one: it goes through.
func (d *detector[T]) check(ctx context.Context) (ok bool) {
	defer func() {
		clear(d.buf) // do not pin objects until the next check
		if r := recover(); r != nil {
			if _, fail := r.(detectorFail); fail {
				panic(r)
			}
			d.broke(r, debug.Stack())
			ok = false
		}
	}()
	for i := 0; ctx.Err() == nil && !d.off.Load(); i += mutationChunk {
		d.fence()
		if !d.chunk(i) {
			break
		}
		for _, w := range d.buf {
			if diff := objdiff.Diff(w.cached, w.copy); diff != "" && d.refresh(w) {
				d.report(d.emit, w.key, diff)
			}
		}
	}
	return true
}

// chunk copies the entries from i on, at most mutationChunk, to buf;
// false if there are none.
func (d *detector[T]) chunk(i int) bool {
	d.mu.Lock()
	defer d.mu.Unlock() // also if it panics: the writer must not wait for ever
	if i >= len(d.entries) {
		return false
	}
	d.buf = append(d.buf[:0], d.entries[i:min(i+mutationChunk, len(d.entries))]...)
	return true
}

// broke reports the failure of a check, which panicked with r, and turns
// the detector off: what it holds may be what made the check fail.
func (d *detector[T]) broke(r any, stack []byte) {
	d.off.Store(true)
	d.mu.Lock()
	d.index, d.entries = map[string]int{}, nil
	d.mu.Unlock()
	err := fmt.Errorf("the mutation detector's check panicked, and the detector is off: %v", r)
	d.log.Error("kinformer: "+err.Error(), "stack", string(stack))
	d.emit(Event[T]{Type: Error, Err: err, ResourceVersion: d.rv()})
}

// refresh replaces w's copy with a copy of its object as it is now, if w
// is still the entry of its key: not retired (the writer then compares
// and reports it itself) nor refreshed meanwhile. It reports whether it
// did, that is whether the caller reports the difference. A copy that is
// not exact is not kept: the object is no longer checked.
func (d *detector[T]) refresh(w watched[T]) bool {
	cp, exact := d.copyOf(w.key, w.cached)
	d.mu.Lock()
	defer d.mu.Unlock()
	i, ok := d.index[w.key]
	if !ok || !sameObject(d.entries[i].cached, w.cached) || !sameObject(d.entries[i].copy, w.copy) {
		return false
	}
	if exact {
		d.entries[i].copy = cp
	} else {
		d.dropLocked(i)
	}
	return true
}

// report tells of a mutation of the object under key: an error log line,
// the metric, an Error event wrapping ErrMutated, and in "panic" mode a
// panic.
func (d *detector[T]) report(emit func(Event[T]), key, diff string) {
	err := fmt.Errorf("%w: %s: %s", ErrMutated, key, diff)
	d.found.Store(true)
	d.log.Error("kinformer: "+err.Error()+" (copy objects from the cache or events before changing them)", "key", key)
	d.obs.mutation()
	emit(Event[T]{Type: Error, Err: err, ResourceVersion: d.rv()})
	if d.fail != nil {
		d.fail(err.Error())
	}
}

// sameObject reports whether a and b are the same instance.
func sameObject[T Object](a, b T) bool {
	va, vb := reflect.ValueOf(a), reflect.ValueOf(b)
	if !va.IsValid() || !vb.IsValid() {
		return va.IsValid() == vb.IsValid()
	}
	if va.Type() != vb.Type() {
		return false
	}
	if va.Kind() == reflect.Pointer {
		return va.Pointer() == vb.Pointer()
	}
	return va.Comparable() && va.Equal(vb)
}
