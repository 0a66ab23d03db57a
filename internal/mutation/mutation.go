// Package mutation is the cache mutation detector (the root's
// Options.DetectMutations): a deep copy of every cached object, compared
// with the object when the cache's writer replaces or removes it and every
// period while the informer runs. A difference is someone's change to a
// shared object (handlers and readers must copy first): reported once, as
// an error (the informer's Error event) and an error log line, and in
// "panic" mode by a panic.
package mutation

import (
	"context"
	"fmt"
	"iter"
	"log/slog"
	"reflect"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/objdiff"
)

const (
	// DefaultPeriod is how often every cached object is compared
	// with its copy.
	DefaultPeriod = time.Second
	// chunkSize is how many objects the periodic check takes from the
	// detector's table at a time: the writer, which updates the table as
	// it changes the cache, waits at most for one chunk to be copied out.
	chunkSize = 256
)

// Detector keeps, for every cached object, the instance cached and a deep
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
type Detector[T runtime.Object] struct {
	// Period is how often Run checks; Tick, if set, replaces its ticker
	// (tests). Both are read by Run.
	Period time.Duration
	Tick   <-chan time.Time
	// Emit reports an error found by the periodic check (the informer's
	// Error event); Fence makes the handler calls that have ended happen
	// before the comparisons that follow: a handler that modified its
	// object and returned is reported, not left to the race detector. The
	// caller sets both before Run.
	Emit  func(error)
	Fence func()
	// Fail is called with the message after a report in "panic" mode (it
	// panics); nil otherwise. Tests replace it.
	Fail func(msg string)

	cfg Config

	mu      sync.Mutex     // guards index and entries
	index   map[string]int // key -> its entry
	entries []watched[T]

	buf    []watched[T] // the periodic check's chunk
	copies atomic.Int64 // deep copies made (Copies)
	// inexact reports the first copy that is not equal to its object.
	inexact sync.Once
	// Found is raised by each report: it is the Stale of the informer's
	// Sharer, which then forgets the maps it shares (one may be the map
	// changed) before it shares one again.
	Found atomic.Bool
	// off is set when the periodic check failed (broke): the detector
	// then tracks nothing more, and the informer goes on without it.
	off atomic.Bool
}

// detectorFail is the panic of "panic" mode (Fail): the periodic
// check lets it through, where it recovers from any other.
type detectorFail struct{ msg string }

func (f detectorFail) Error() string { return f.msg }

// watched is one cached object and its copy.
type watched[T runtime.Object] struct {
	key          string
	cached, copy T
}

// Config is what a Detector is made with.
type Config struct {
	// Log gets the error lines: the informer's handler logger, never
	// discarded.
	Log *slog.Logger
	// Panics: "panic" mode, each report panics after it is made.
	Panics bool
	// Mutated is the error each report wraps (the root's ErrMutated).
	Mutated error
	// Counted, if set, is called for each report (the metric).
	Counted func()
}

// New returns a detector watching nothing yet.
func New[T runtime.Object](c Config) *Detector[T] {
	d := &Detector[T]{Period: DefaultPeriod, cfg: c, index: map[string]int{}}
	if c.Panics {
		d.Fail = func(msg string) { panic(detectorFail{"kinformer: " + msg}) }
	}
	return d
}

// Copies is how many deep copies the detector has made.
func (d *Detector[T]) Copies() int64 { return d.copies.Load() }

// Off reports whether a failed check has turned the detector off.
func (d *Detector[T]) Off() bool { return d.off.Load() }

// Watched is how many objects the detector holds copies of.
func (d *Detector[T]) Watched() int {
	d.mu.Lock()
	defer d.mu.Unlock()
	return len(d.entries)
}

// copyOf returns a deep copy of obj, the object under key, and whether
// it is equal to obj: a DeepCopyObject that is not exact (a JSON round
// trip turns int64s into float64s) would have every object reported for
// ever, each check after each refresh; such copies are not kept, and the
// first is reported (inexact).
func (d *Detector[T]) copyOf(key string, obj T) (T, bool) {
	d.copies.Add(1)
	cp := obj.DeepCopyObject().(T)
	if diff := objdiff.Diff(cp, obj); diff != "" {
		d.inexact.Do(func() {
			msg := fmt.Sprintf("the mutation detector cannot check objects of type %T: their DeepCopyObject is not exact (%s, copy: %s); objects whose copy differs are not checked",
				obj, key, diff)
			d.cfg.Log.Error("kinformer: " + msg)
			if d.Fail != nil {
				d.Fail(msg)
			}
		})
		return cp, false
	}
	return cp, true
}

// track starts watching obj, just cached under key, in place of what was.
func (d *Detector[T]) track(key string, obj T) {
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
func (d *Detector[T]) dropLocked(i int) {
	delete(d.index, d.entries[i].key)
	last := len(d.entries) - 1
	if i != last {
		d.entries[i] = d.entries[last]
		d.index[d.entries[i].key] = i
	}
	d.entries[last] = watched[T]{}
	d.entries = d.entries[:last]
}

// Retire stops watching old under key and compares it with its copy;
// emit queues the Error event of a difference.
func (d *Detector[T]) Retire(emit func(error), key string, old T) {
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

// Put follows the writer's put: obj replaced old (if existed) under key.
func (d *Detector[T]) Put(emit func(error), key string, old T, existed bool, obj T) {
	if existed {
		d.Retire(emit, key, old)
	}
	d.track(key, obj)
}

// Content is a cache's content, refs (R) by key: the root's
// *store.Items.
type Content[R any] interface {
	All() iter.Seq2[string, R]
	Get(key string) (R, bool)
}

// Swap follows the writer's swap of the cache's content, old, for items
// (held as R, whose object obj gives): the objects replaced or dropped are
// retired, the new ones tracked; an object a re-list kept (the same
// instance) stays watched.
func Swap[T runtime.Object, R any, C Content[R]](d *Detector[T], emit func(error), old, items C, obj func(R) T) {
	for key, o := range old.All() {
		if n, ok := items.Get(key); !ok || !sameObject(obj(o), obj(n)) {
			d.Retire(emit, key, obj(o))
		}
	}
	for key, r := range items.All() {
		if o, ok := old.Get(key); !ok || !sameObject(obj(o), obj(r)) {
			d.track(key, obj(r))
		}
	}
}

// Run compares every cached object with its copy each period until ctx
// ends, or until a check fails.
func (d *Detector[T]) Run(ctx context.Context) {
	tick := d.Tick
	if tick == nil {
		t := time.NewTicker(d.Period)
		defer t.Stop()
		tick = t.C
	}
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick:
			if !d.Check(ctx) {
				return
			}
		}
	}
}

// Check compares every watched object with its copy, a chunk at a time,
// outside the detector's lock. It reports false if it failed: a panic in
// the check (a DeepCopyObject or String method of the objects' type that
// panics, a bug of the detector) is reported, as an Error event and an
// error log line, and turns the detector off; the informer goes on. The
// panic of "panic" mode is not one: it goes through.
func (d *Detector[T]) Check(ctx context.Context) (ok bool) {
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
	for i := 0; ctx.Err() == nil && !d.off.Load(); i += chunkSize {
		d.Fence()
		if !d.chunk(i) {
			break
		}
		for _, w := range d.buf {
			if diff := objdiff.Diff(w.cached, w.copy); diff != "" && d.refresh(w) {
				d.report(d.Emit, w.key, diff)
			}
		}
	}
	return true
}

// chunk copies the entries from i on, at most chunkSize, to buf;
// false if there are none.
func (d *Detector[T]) chunk(i int) bool {
	d.mu.Lock()
	defer d.mu.Unlock() // also if it panics: the writer must not wait for ever
	if i >= len(d.entries) {
		return false
	}
	d.buf = append(d.buf[:0], d.entries[i:min(i+chunkSize, len(d.entries))]...)
	return true
}

// broke reports the failure of a check, which panicked with r, and turns
// the detector off: what it holds may be what made the check fail.
func (d *Detector[T]) broke(r any, stack []byte) {
	d.off.Store(true)
	d.mu.Lock()
	d.index, d.entries = map[string]int{}, nil
	d.mu.Unlock()
	err := fmt.Errorf("the mutation detector's check panicked, and the detector is off: %v", r)
	d.cfg.Log.Error("kinformer: "+err.Error(), "stack", string(stack))
	d.Emit(err)
}

// refresh replaces w's copy with a copy of its object as it is now, if w
// is still the entry of its key: not retired (the writer then compares
// and reports it itself) nor refreshed meanwhile. It reports whether it
// did, that is whether the caller reports the difference. A copy that is
// not exact is not kept: the object is no longer checked.
func (d *Detector[T]) refresh(w watched[T]) bool {
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
// the metric (Counted), an error wrapping Config.Mutated given to emit (the
// informer's Error event), and in "panic" mode a panic.
func (d *Detector[T]) report(emit func(error), key, diff string) {
	err := fmt.Errorf("%w: %s: %s", d.cfg.Mutated, key, diff)
	d.Found.Store(true)
	d.cfg.Log.Error("kinformer: "+err.Error()+" (copy objects from the cache or events before changing them)", "key", key)
	if d.cfg.Counted != nil {
		d.cfg.Counted()
	}
	emit(err)
	if d.Fail != nil {
		d.Fail(err.Error())
	}
}

// sameObject reports whether a and b are the same instance.
func sameObject[T runtime.Object](a, b T) bool {
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
