package kinformer

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"runtime"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/jsonwatch"
	"github.com/kinformer/kinformer/internal/snapshot"
)

// The durable cache (Options.StateDir): the writer records every change it
// makes to the cache, with the resourceVersion it brings the cache to, in
// a persister; the persister's own goroutine encodes and commits them in
// batches, one bbolt transaction each (internal/snapshot), so the file is
// always the cache as it was at some resourceVersion. A new informer with
// the same identity starts from the file (loop.restore), then catches up by
// a watch from its resourceVersion.

// stateFormat is the version of what the objects in a snapshot file are
// (their encoding, the key, the identity's fields). Bump it when they change.
const stateFormat = "kinformer-state/1"

const (
	defaultStateInterval = 250 * time.Millisecond
	// stateMaxPending starts a commit before the interval is up once this
	// many objects have changed.
	stateMaxPending = 4096
)

// codec encodes the objects of a snapshot: protobuf for the built-in types
// (what they have on the wire), JSON for the others, decoded as their
// watches are (internal/jsonwatch: numbers as apimachinery decodes them,
// names and short values interned). A codec decodes on one goroutine at a
// time.
type codec[T Object] struct {
	encode func(T) ([]byte, error)
	decode func([]byte) (T, error)
}

type protoObject interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

func newCodec[T Object]() codec[T] {
	t := reflect.TypeFor[T]()
	fresh := func() T { return *new(T) }
	if t.Kind() == reflect.Pointer {
		elem := t.Elem()
		fresh = func() T { return reflect.New(elem).Interface().(T) }
	}
	if _, ok := any(fresh()).(protoObject); ok {
		return codec[T]{
			encode: func(obj T) ([]byte, error) { return any(obj).(protoObject).Marshal() },
			decode: func(b []byte) (T, error) {
				obj := fresh()
				return obj, any(obj).(protoObject).Unmarshal(b)
			},
		}
	}
	// managedFields are never stored; any kind; objects are stored after
	// the Transform, so restored ones may share containers.
	f := &jsonwatch.Format{ShareContainers: true}
	if _, ok := any(fresh()).(*unstructured.Unstructured); !ok {
		f.New = func() kruntime.Object { return fresh() }
	}
	dec := jsonwatch.NewDecoder(f)
	return codec[T]{
		encode: func(obj T) ([]byte, error) { return json.Marshal(obj) },
		decode: func(b []byte) (T, error) {
			o, err := dec.Object(b)
			if err != nil {
				return *new(T), err
			}
			obj, ok := o.(T)
			if !ok {
				return *new(T), fmt.Errorf("decoded a %T, want %T", o, obj)
			}
			return obj, nil
		},
	}
}

// stateIdentity describes the watch a snapshot belongs to: a snapshot is
// applied only to an informer with the same identity. It returns "" when
// the source does not say what it watches and Options.StateKey is empty.
func stateIdentity[T Object](lw any, o *Options[T]) string {
	src := o.StateKey
	if src == "" {
		rs, ok := lw.(restScoped)
		if !ok {
			return ""
		}
		client := rs.GetClient()
		if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
			return ""
		}
		// The server, API group and version, and namespace; the resource
		// is T's (or the factory's) below.
		src = client.Get().URL().String() + " namespace=" + rs.GetNamespace() + " resource=" + resourceOf(lw)
	}
	key := funcName(o.KeyFunc)
	if o.defaultKey || key == metaNamespaceKeyName {
		// The default, given or not (see metaNamespaceKeyName): the same
		// cache, the same file.
		key = "MetaNamespaceKey"
	}
	fields := []string{
		stateFormat,
		"source=" + src,
		"type=" + reflect.TypeFor[T]().String() + " " + typePath(reflect.TypeFor[T]()),
		"name=" + o.Name,
		"labelSelector=" + o.LabelSelector,
		"fieldSelector=" + o.FieldSelector,
		"key=" + key,
		"transform=" + funcName(o.Transform),
		fmt.Sprintf("keepManagedFields=%t", o.KeepManagedFields),
	}
	return strings.Join(fields, "\n")
}

func typePath(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

// funcName names a function by its symbol: stable across restarts of one
// binary, and across builds as long as the function keeps its name.
func funcName(f any) string {
	v := reflect.ValueOf(f)
	if !v.IsValid() || v.IsNil() {
		return "none"
	}
	if fn := runtime.FuncForPC(v.Pointer()); fn != nil {
		return fn.Name()
	}
	return "unknown"
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// statePath is the snapshot file of identity in dir: readable names for
// people, a hash of the identity so that two watches never share a file.
func statePath(dir, name, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	name = unsafeFileChars.ReplaceAllString(name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	return filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:8])+".kinformer")
}

// pendingChange is one object's pending state: its new version, or deleted.
type pendingChange[T Object] struct {
	obj     T
	deleted bool
}

// persister keeps the snapshot file up to date. The writer records
// changes (record, recordLocked) on the loop's goroutine; the flusher
// goroutine commits them.
type persister[T Object] struct {
	path, identity string
	opts           snapshot.Options
	interval       time.Duration
	codec          codec[T]
	log            *slog.Logger
	report         func(error) // logs and queues an Error event; any goroutine
	obs            *observer   // metrics; nil for none

	mu      sync.Mutex
	pending map[string]pendingChange[T] // what changed since the last commit
	rv      string                      // the cache's resourceVersion with pending applied
	dirty   bool                        // pending or rv not yet committed
	broken  bool                        // an object failed to encode: persistence is off for this run
	reset   bool                        // the next commit clears the file first: the cache starts empty
	// committed is the resourceVersion of the last commit: the flusher's.
	committed string
	kick      chan struct{}

	store *snapshot.Store // open while running; the flusher's
	quit  chan struct{}   // closed to make the flusher commit, close and end
	done  chan struct{}   // closed when it has
}

func newPersister[T Object](lw any, o *Options[T], log *slog.Logger, report func(error)) *persister[T] {
	p := &persister[T]{
		identity: stateIdentity(lw, o),
		opts:     snapshot.Options{NoSync: o.StateNoSync},
		interval: o.StateInterval,
		codec:    newCodec[T](),
		log:      log,
		report:   report,
		pending:  map[string]pendingChange[T]{},
		kick:     make(chan struct{}, 1),
	}
	if p.interval <= 0 {
		p.interval = defaultStateInterval
	}
	if p.identity != "" {
		p.path = statePath(o.StateDir, o.Name, p.identity)
	}
	return p
}

// open opens the snapshot file. On the informer's first run (restore), it
// loads it: the restored objects (keyed by key) and their
// resourceVersion, or none. On later runs it checks that the file still
// holds the last commit and returns its resourceVersion, or "" if the
// caller must rewrite it from the cache. A file that cannot be used is
// reported (ErrSnapshot), set aside and replaced by an empty one. ok is
// false when persistence is off for this run.
func (p *persister[T]) open(restore bool, key KeyFunc[T], share *intern.Sharer) (items map[string]T, rv string, ok bool) {
	if p.identity == "" {
		p.report(fmt.Errorf("%w: StateDir is ignored: the client does not say what it watches; set Options.StateKey", ErrSnapshot))
		return nil, "", false
	}
	if err := os.MkdirAll(filepath.Dir(p.path), 0o700); err != nil {
		p.report(fmt.Errorf("%w: %w", ErrSnapshot, err))
		return nil, "", false
	}
	st, err := snapshot.Open(p.path, p.identity, p.opts)
	if errors.Is(err, snapshot.ErrInUse) {
		p.report(fmt.Errorf("%w: %s: %w; running without it", ErrSnapshot, p.path, err))
		return nil, "", false
	}
	if err == nil && restore {
		items = map[string]T{}
		rv, err = st.Load(func(k, v []byte) error {
			obj, err := p.codec.decode(v)
			if err != nil {
				return fmt.Errorf("object %q: %w", k, err)
			}
			if got := key(obj); got != string(k) {
				return fmt.Errorf("object %q has key %q", k, got)
			}
			share.Object(obj)
			items[string(k)] = obj
			return nil
		})
		if err != nil {
			st.Close()
		}
	}
	if err != nil {
		aside := p.path + ".bad"
		p.report(fmt.Errorf("%w: %s: %w; set aside as %s, listing from scratch", ErrSnapshot, p.path, err, filepath.Base(aside)))
		if rerr := os.Rename(p.path, aside); rerr != nil && !os.IsNotExist(rerr) {
			_ = os.Remove(p.path)
		}
		items, rv = nil, ""
		if st, err = snapshot.Open(p.path, p.identity, p.opts); err != nil {
			p.report(fmt.Errorf("%w: %s: %w; running without it", ErrSnapshot, p.path, err))
			return nil, "", false
		}
	}
	p.store = st
	if !restore {
		// A later run of the same informer: the file must still be what
		// the last run left, else it is rewritten from the cache.
		if frv, err := st.ResourceVersion(); err != nil || frv != p.committed {
			return nil, "", true
		}
		return nil, p.committed, true
	}
	if rv == "" {
		// Whatever the file holds is not a state the cache will be at: the
		// first list's objects replace it.
		p.mu.Lock()
		p.reset, p.dirty = true, true
		p.mu.Unlock()
	}
	return items, rv, true
}

// start runs the flusher until stop.
func (p *persister[T]) start() {
	p.quit, p.done = make(chan struct{}), make(chan struct{})
	go p.flusher(p.quit, p.done)
}

// stop commits what is pending, closes the file and waits for the flusher
// to end. The writer must have stopped recording.
func (p *persister[T]) stop() {
	close(p.quit)
	<-p.done
	p.quit, p.done = nil, nil
}

func (p *persister[T]) flusher(quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(p.interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.kick:
		case <-quit:
			p.flush()
			if err := p.store.Close(); err != nil {
				p.report(fmt.Errorf("%w: closing %s: %w", ErrSnapshot, p.path, err))
			}
			p.store = nil
			return
		}
		p.flush()
	}
}

// record notes one object's new state, or its deletion, and the
// resourceVersion the cache is at with it.
func (p *persister[T]) record(key string, obj T, deleted bool, rv string) {
	p.mu.Lock()
	p.recordLocked(key, obj, deleted)
	p.advanceLocked(rv)
	n := len(p.pending)
	p.mu.Unlock()
	if n >= stateMaxPending {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// rewrite makes the next commit replace the file's objects with items at
// rv: for a file that no longer holds the last commit.
func (p *persister[T]) rewrite(items map[string]T, rv string) {
	p.mu.Lock()
	defer p.mu.Unlock()
	p.reset = true
	clear(p.pending)
	for k, obj := range items {
		p.recordLocked(k, obj, false)
	}
	p.advanceLocked(rv)
	p.dirty = true
}

// recordLocked is record for many objects in one change (a re-list): the
// caller holds p.mu and calls advanceLocked after the last.
func (p *persister[T]) recordLocked(key string, obj T, deleted bool) {
	p.pending[key] = pendingChange[T]{obj: obj, deleted: deleted}
	p.dirty = true
}

func (p *persister[T]) advanceLocked(rv string) {
	if rv != "" && rv != p.rv {
		p.rv, p.dirty = rv, true
	}
}

// advance notes a new resourceVersion with no object changed (a bookmark).
func (p *persister[T]) advance(rv string) {
	p.mu.Lock()
	p.advanceLocked(rv)
	p.mu.Unlock()
}

// flush commits what changed since the last commit in one transaction.
func (p *persister[T]) flush() {
	p.mu.Lock()
	if !p.dirty || p.broken {
		p.mu.Unlock()
		return
	}
	pending, rv, reset := p.pending, p.rv, p.reset
	p.pending, p.dirty, p.reset = make(map[string]pendingChange[T], len(pending)/2), false, false
	p.mu.Unlock()

	began := time.Now()
	b := &snapshot.Batch{Puts: make(map[string][]byte, len(pending)), RV: rv, Reset: reset}
	for key, c := range pending {
		if c.deleted {
			b.Dels = append(b.Dels, key)
			continue
		}
		v, err := p.codec.encode(c.obj)
		if err != nil {
			// The file would lack an object the cache has, which a watch
			// from its resourceVersion would never bring back: make the
			// next start list from scratch instead, and stop writing.
			p.report(fmt.Errorf("%w: encoding %s: %w; the snapshot is dropped, the next start will list", ErrSnapshot, key, err))
			p.mu.Lock()
			p.broken = true
			p.mu.Unlock()
			if err := p.store.Commit(&snapshot.Batch{Reset: true}); err != nil {
				p.report(fmt.Errorf("%w: %s: %w", ErrSnapshot, p.path, err))
			}
			return
		}
		b.Puts[key] = v
	}
	err := p.store.Commit(b)
	p.obs.commit(len(pending), time.Since(began), err)
	if err == nil {
		p.committed = rv
		return
	}
	{
		p.report(fmt.Errorf("%w: writing %s: %w; retrying", ErrSnapshot, p.path, err))
		// Put the batch back under what changed since, to retry.
		p.mu.Lock()
		for key, c := range pending {
			if _, newer := p.pending[key]; !newer {
				p.pending[key] = c
			}
		}
		p.dirty, p.reset = true, p.reset || reset
		p.mu.Unlock()
	}
}
