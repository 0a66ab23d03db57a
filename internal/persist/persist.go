// Package persist keeps an informer's state file (Options.StateDir) up to
// date: the writer records every change it makes to the cache, with the
// resourceVersion it brings the cache to; the Persister's own goroutine
// encodes and commits them in batches, one bbolt transaction each
// (internal/snapshot), so the file is always the cache as it was at some
// resourceVersion. A new informer with the same identity loads the file
// (Open), then catches up by a watch from its resourceVersion.
//
// The Persister takes no other type's lock, and no other type takes its
// lock: a change of many objects that must reach the file whole (a
// re-list) is one Batch.
package persist

import (
	"errors"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"time"

	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/snapshot"
	"github.com/kinformer/kinformer/internal/squash"
)

const (
	// DefaultInterval is how often pending changes are committed.
	DefaultInterval = 250 * time.Millisecond
	// maxPending starts a commit before the interval is up once this many
	// objects have changed.
	maxPending = 4096
)

// Config configures a Persister.
type Config[T kruntime.Object] struct {
	Dir      string   // the state directory: made 0700, and it must be private (PrepareDir)
	Name     string   // the readable part of the file's name (Path)
	Identity Identity // a file of another is not loaded
	Snapshot snapshot.Options
	Interval time.Duration // default DefaultInterval
	Codec    Codec[T]
	// Report receives every failure to use the file, as it happens, from
	// any goroutine; the informer goes on (without the file, or retrying).
	Report func(error)
	// Committed, if set, is told of every commit: how many objects it
	// wrote, how long it took, and its error.
	Committed func(objects int, took time.Duration, err error)
	// Log, if set, receives warnings that are no failure: a directory on
	// the way to Dir that others may write (warnWritable), once per
	// directory and process.
	Log *slog.Logger
	// Keys, if any, encrypt the file's objects (AES-256-GCM, KeySize
	// bytes each): the first encrypts, any decrypts, and a file loaded
	// with objects under another than the first is encrypted again with
	// the first at once. Identity.Encrypted must say so.
	Keys [][]byte
}

// change is one object's pending state: its new version (as an object,
// or already encoded: a compact cache's), or deleted.
type change[T any] struct {
	obj     T
	data    []byte
	entry   bool // data is a squash entry (RecordEntry)
	deleted bool
	lost    error // the object cannot be written (RecordLost)
}

// Persister keeps a state file up to date. Record, Advance and Batch are
// called by the cache's one writer; the flusher goroutine commits.
type Persister[T kruntime.Object] struct {
	cfg    Config[T]
	sealer *sealer // nil: objects in the clear
	// keyErr: Keys cannot be used; the file is not either.
	keyErr error
	// path and sealed are the state file and its identity as stored
	// (Identity.Sealed), set by the first Open that finds the directory
	// safe; the caller's of Open, as committed is.
	path, sealed string

	mu      sync.Mutex           // guards the fields below, up to committed
	pending map[string]change[T] // what changed since the last commit
	rv      string               // the cache's resourceVersion with pending applied
	dirty   bool                 // pending or rv not yet committed
	broken  bool                 // an object failed to encode: persistence is off for this run
	reset   bool                 // the next commit clears the file first: the cache starts empty
	cluster string               // the cluster the cache's objects come from (SetCluster)
	// dicts are the dictionaries the file keeps beside its entries
	// (SetDicts, or as loaded); dictsDirty: not yet committed.
	dicts      []*squash.Dict
	dictsDirty bool
	kick       chan struct{}

	// fileCluster is the cluster the file was written from, as the last
	// Open found it; the caller's.
	fileCluster string

	// committed is the resourceVersion of the last commit; store is open
	// while running. Both are the flusher's while it runs, and the
	// caller's of Open, Start and Stop otherwise.
	committed string
	store     *snapshot.Store
	// held is the file opened for a restore, its objects not loaded yet
	// (openHeld); the caller's.
	held *heldFile
	quit chan struct{} // closed to make the flusher commit, close and end
	done chan struct{} // closed when it has
}

// New returns a Persister of cfg.Path; it does nothing before Open.
func New[T kruntime.Object](cfg Config[T]) *Persister[T] {
	if cfg.Interval <= 0 {
		cfg.Interval = DefaultInterval
	}
	p := &Persister[T]{cfg: cfg, pending: map[string]change[T]{}, kick: make(chan struct{}, 1)}
	if len(cfg.Keys) > 0 {
		p.sealer, p.keyErr = newSealer(cfg.Keys)
	}
	return p
}

// Path is the state file; "" until an Open has found the directory
// safe.
func (p *Persister[T]) Path() string { return p.path }

// Committed is the resourceVersion of the last commit; not while running.
func (p *Persister[T]) Committed() string { return p.committed }

// Open opens the state file. On the informer's first run (restore) it
// loads it: the objects (check may refuse one, and so the file) and their
// resourceVersion, or none. On later runs it checks that the file still
// holds the last commit and returns its resourceVersion, or "" if the
// caller must rewrite it from the cache (a Batch that Resets). A file that cannot be
// used is reported, set aside and replaced by an empty one. ok is false
// when the run goes without the file: it is in use, or it or its
// directory is unsafe (snapshot.ErrUnsafe: reported, and the file is
// neither read nor changed).
func (p *Persister[T]) Open(restore bool, check func(key string, obj T) error) (items map[string]T, rv string, ok bool) {
	rv, ok = p.open(restore, func([]*squash.Dict) { items = map[string]T{} }, p.decoded(check, func(key string, obj T) { items[key] = obj }))
	if rv == "" {
		items = nil
	}
	return items, rv, ok
}

// OpenEncoded is Open for a compact cache: dicts is given the file's
// dictionaries (the current first; none if it keeps none), then add each
// object of the file as its encoding and as the entry the file holds it
// as (Entry), and decides whether to decode it.
func (p *Persister[T]) OpenEncoded(restore bool, dicts func([]*squash.Dict), add func(Entry) error) (rv string, ok bool) {
	return p.open(restore, dicts, encoded(add))
}

// decoded is each object of the file decoded, checked and given to put.
func (p *Persister[T]) decoded(check func(key string, obj T) error, put func(key string, obj T)) func(k, v []byte, dicts []*squash.Dict) error {
	return func(k, v []byte, dicts []*squash.Dict) error {
		v, _, _, err := unsquash(dicts, v)
		if err != nil {
			return err
		}
		obj, err := p.cfg.Codec.Decode(v)
		if err != nil {
			return err
		}
		if err := check(string(k), obj); err != nil {
			return err
		}
		put(string(k), obj)
		return nil
	}
}

// encoded is each object of the file given to add as an Entry.
func encoded(add func(Entry) error) func(k, v []byte, dicts []*squash.Dict) error {
	return func(k, v []byte, ds []*squash.Dict) error {
		data, entry, d, err := unsquash(ds, v)
		if err != nil {
			return err
		}
		e := Entry{Key: string(k), Dict: d}
		if entry != nil {
			e.Squashed = append([]byte(nil), entry...)
		}
		if d == nil {
			data = append([]byte(nil), data...) // the file's mapping: copied
		}
		e.Data = data
		return add(e)
	}
}

// open is Open and OpenEncoded: begin is given the file's dictionaries
// before each load, and each is given every object of the file with
// them.
func (p *Persister[T]) open(restore bool, begin func([]*squash.Dict), each func(k, v []byte, dicts []*squash.Dict) error) (rv string, ok bool) {
	rv, ok = p.openHeld(restore)
	if ok && p.held != nil && !p.loadHeld(begin, each) {
		rv = ""
	}
	return rv, ok
}

// commitResealed commits the objects open encrypted again under the
// first key; a test's to make fail.
var commitResealed = func(st *snapshot.Store, b *snapshot.Batch) error { return st.Commit(b) }

// removeClear removes the file the same informer wrote without keys (its
// identity lacks Encrypted, so no informer with keys finds it): turning
// StateKeys on must not leave a copy of every object in the clear. A file
// in use (by a process without the keys) is left, and said.
func (p *Persister[T]) removeClear(key []byte) {
	clear := p.cfg.Identity
	clear.Encrypted = false
	path := Path(p.cfg.Dir, p.cfg.Name, key, clear.Sealed(key))
	fi, err := os.Stat(path)
	if err != nil {
		return
	}
	if _, err := snapshot.Identity(path, 100*time.Millisecond); errors.Is(err, snapshot.ErrInUse) {
		p.cfg.Report(fmt.Errorf("%s, this informer's state file without StateKeys (%d bytes, in the clear), is in use by another process: not removed", path, fi.Size()))
		return
	}
	if err := os.Remove(path); err != nil {
		p.cfg.Report(fmt.Errorf("removing %s, this informer's state file without StateKeys (in the clear): %w", path, err))
		return
	}
	p.cfg.Report(fmt.Errorf("removed %s (%d bytes): this informer's state file written without StateKeys, in the clear; the encrypted one replaces it", path, fi.Size()))
}

// FileCluster is the cluster the file was written from, as the last Open
// that loaded it found it: "" if it recorded none.
func (p *Persister[T]) FileCluster() string { return p.fileCluster }

// SetCluster notes the cluster the cache's objects come from (the
// caller's fingerprint of the server), which each later commit records.
func (p *Persister[T]) SetCluster(c string) {
	p.mu.Lock()
	p.cluster = c
	p.mu.Unlock()
}

// Discard drops what the file holds: the loaded objects were not restored
// (another cluster's, or another history's), and the next commit, after
// the list that follows, holds the cache as it then is.
func (p *Persister[T]) Discard() {
	p.mu.Lock()
	clear(p.pending)
	p.reset, p.dirty, p.rv = true, true, ""
	p.mu.Unlock()
}

// Start runs the flusher until Stop; after a successful Open.
func (p *Persister[T]) Start() {
	p.quit, p.done = make(chan struct{}), make(chan struct{})
	go p.flusher(p.quit, p.done)
}

// Stop commits what is pending, closes the file and waits for the flusher
// to end. The writer must have stopped recording.
func (p *Persister[T]) Stop() {
	if p.quit == nil {
		return // not started, or stopped already (LoadHeld, on a file set aside)
	}
	close(p.quit)
	<-p.done
	p.quit, p.done = nil, nil
}

func (p *Persister[T]) flusher(quit, done chan struct{}) {
	defer close(done)
	t := time.NewTicker(p.cfg.Interval)
	defer t.Stop()
	for {
		select {
		case <-t.C:
		case <-p.kick:
		case <-quit:
			p.Flush()
			if err := p.store.Close(); err != nil {
				p.cfg.Report(fmt.Errorf("closing %s: %w", p.path, err))
			}
			p.store = nil
			return
		}
		p.Flush()
	}
}

// Record notes one object's new state, or its deletion, and the
// resourceVersion the cache is at with it.
func (p *Persister[T]) Record(key string, obj T, deleted bool, rv string) {
	p.record(key, change[T]{obj: obj, deleted: deleted}, rv)
}

// RecordEncoded notes one object's new state, encoded as the file holds it
// (a compact cache's bytes, which it must never change), and the
// resourceVersion the cache is at with it.
func (p *Persister[T]) RecordEncoded(key string, data []byte, rv string) {
	p.record(key, change[T]{data: data}, rv)
}

// RecordLost notes that the object under key cannot be written, for
// err (the cache's bytes of it are damaged): the file would lack an
// object the cache has, which a watch from its resourceVersion would
// never bring back, so, as for an object that cannot be encoded, the next
// commit drops the snapshot and the next start lists.
func (p *Persister[T]) RecordLost(key string, err error, rv string) {
	p.record(key, change[T]{lost: err}, rv)
}

func (p *Persister[T]) record(key string, c change[T], rv string) {
	p.mu.Lock()
	p.pendLocked(key, c)
	p.advanceLocked(rv)
	n := len(p.pending)
	p.mu.Unlock()
	if n >= maxPending {
		select {
		case p.kick <- struct{}{}:
		default:
		}
	}
}

// Advance notes a new resourceVersion with no object changed (a bookmark,
// or the deletion of an object never cached).
func (p *Persister[T]) Advance(rv string) {
	p.mu.Lock()
	p.advanceLocked(rv)
	p.mu.Unlock()
}

func (p *Persister[T]) advanceLocked(rv string) {
	if rv != "" && rv != p.rv {
		p.rv, p.dirty = rv, true
	}
}

// Flush commits what changed since the last commit in one transaction.
// The flusher calls it; so may the caller of Open while it is not running.
func (p *Persister[T]) Flush() {
	p.mu.Lock()
	if !p.dirty || p.broken {
		p.mu.Unlock()
		return
	}
	pending, rv, reset, cluster := p.pending, p.rv, p.reset, p.cluster
	dicts, dictsDirty := p.dicts, p.dictsDirty
	p.pending, p.dirty, p.reset, p.dictsDirty = make(map[string]change[T], len(pending)/2), false, false, false
	p.mu.Unlock()

	began := time.Now()
	b := &snapshot.Batch{Puts: make(map[string][]byte, len(pending)), RV: rv, Reset: reset, Cluster: cluster}
	if dictsDirty {
		v, err := p.dictsValue(dicts)
		if err != nil {
			p.cfg.Report(fmt.Errorf("encrypting the dictionaries: %w; the snapshot is dropped, the next start will list", err))
			p.drop()
			return
		}
		b.Dicts = v
	}
	for key, c := range pending {
		if c.deleted {
			b.Dels = append(b.Dels, key)
			continue
		}
		v, err := c.value(), c.lost
		if v == nil && err == nil {
			v, err = p.cfg.Codec.Encode(c.obj)
		}
		if err == nil && p.sealer != nil {
			v, err = p.sealer.seal(p.sealed, key, v)
		}
		if err != nil {
			// The file would lack an object the cache has, which a watch
			// from its resourceVersion would never bring back: make the
			// next start list from scratch instead, and stop writing.
			p.cfg.Report(fmt.Errorf("encoding %s: %w; the snapshot is dropped, the next start will list", key, err))
			p.drop()
			return
		}
		b.Puts[key] = v
	}
	err := p.store.Commit(b)
	if p.cfg.Committed != nil {
		p.cfg.Committed(len(pending), time.Since(began), err)
	}
	if err == nil {
		p.committed = rv
		return
	}
	p.cfg.Report(fmt.Errorf("writing %s: %w; retrying", p.path, err))
	// Put the batch back under what changed since, to retry.
	p.mu.Lock()
	for key, c := range pending {
		if _, newer := p.pending[key]; !newer {
			p.pending[key] = c
		}
	}
	p.dirty, p.reset = true, p.reset || reset
	p.dictsDirty = p.dictsDirty || dictsDirty
	p.mu.Unlock()
}

// drop stops writing the file for this run and empties it, so that the
// next start lists: it would lack an object the cache has.
func (p *Persister[T]) drop() {
	p.mu.Lock()
	p.broken = true
	p.mu.Unlock()
	if err := p.store.Commit(&snapshot.Batch{Reset: true}); err != nil {
		p.cfg.Report(fmt.Errorf("%s: %w", p.path, err))
	}
}
