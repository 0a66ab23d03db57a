package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"

	"github.com/kinformer/kinformer/internal/snapshot"
	"github.com/kinformer/kinformer/internal/squash"
)

// A restore in two steps: the file is opened and its objects held in it
// (OpenHeld) while the caller checks that it may take them (the server
// authorizes a list; the file is this cluster's); then they are loaded
// one by one, each handed over as the file gives it (LoadHeld), or left
// (DropHeld). Open and OpenEncoded take both steps at once.

// OpenHeld is Open that, on a restore, does not load the file's objects
// yet: it returns their resourceVersion ("" for none), and FileCluster
// says where they came from, so that the caller can decide whether to
// take them (LoadHeld, LoadHeldEncoded) or not (DropHeld), and take them
// one by one as the file gives them. Started (Start) meanwhile, the
// Persister commits nothing until then.
func (p *Persister[T]) OpenHeld(restore bool) (rv string, ok bool) { return p.openHeld(restore) }

// LoadHeld loads the objects of the file OpenHeld opened: each object
// check accepts is given to each as it is read. false if the file turns
// out unusable (an object does not decode, or check refuses it):
// reported and set aside, an empty file in its place; the objects given
// before are the caller's to deal with.
func (p *Persister[T]) LoadHeld(check func(key string, obj T) error, each func(key string, obj T)) bool {
	return p.held != nil && p.loadHeld(func([]*squash.Dict) {}, p.decoded(check, each))
}

// LoadHeldEncoded is LoadHeld for a compact cache, as OpenEncoded.
func (p *Persister[T]) LoadHeldEncoded(dicts func([]*squash.Dict), add func(Entry) error) bool {
	return p.held != nil && p.loadHeld(dicts, encoded(add))
}

// DropHeld leaves the objects of the file OpenHeld opened unloaded, and
// the next commit empties the file (Discard).
func (p *Persister[T]) DropHeld() {
	p.held = nil
	p.Discard()
}

// heldFile is a state file opened for a restore whose objects are not
// loaded yet (OpenHeld, then LoadHeld or DropHeld).
type heldFile struct {
	st       *snapshot.Store
	dicts    []*squash.Dict
	oldDicts bool
	rv       string
}

// openHeld opens the state file as Open does, but on a restore leaves
// its objects in the file (p.held), for loadHeld once the caller has
// decided to take them: it returns their resourceVersion ("" if the
// file holds none), and FileCluster says where they came from.
func (p *Persister[T]) openHeld(restore bool) (rv string, ok bool) {
	p.held = nil
	if p.keyErr != nil {
		p.cfg.Report(fmt.Errorf("state keys: %w; running without the state file", p.keyErr))
		return "", false
	}
	_, lerr := os.Lstat(filepath.Join(p.cfg.Dir, KeyFile))
	key, writable, err := prepareDir(p.cfg.Dir)
	if err != nil {
		p.cfg.Report(fmt.Errorf("state directory: %w; running without it%s", err, filesHint(err)))
		return "", false
	}
	warnWritable(p.cfg.Log, p.cfg.Dir, writable)
	reportLeftovers(p.cfg.Dir, errors.Is(lerr, fs.ErrNotExist), key, p.cfg.Report)
	if sealed := p.cfg.Identity.Sealed(key); sealed != p.sealed {
		// The first Open, or the directory's key was replaced.
		p.sealed, p.path, p.committed = sealed, Path(p.cfg.Dir, p.cfg.Name, key, sealed), ""
		if p.sealer != nil {
			p.removeClear(key)
		}
	}
	st, err := snapshot.Open(p.path, p.sealed, p.cfg.Snapshot)
	if errors.Is(err, snapshot.ErrInUse) || errors.Is(err, snapshot.ErrUnsafe) || outOfFiles(err) {
		// Out of descriptors says nothing of the file: it is left as it
		// is, for a later run (or process) to open.
		p.cfg.Report(fmt.Errorf("%s: %w; running without it%s", p.path, err, filesHint(err)))
		return "", false
	}
	p.fileCluster = ""
	if err == nil && restore {
		if p.fileCluster, err = st.Cluster(); err != nil {
			err = fmt.Errorf("reading its cluster: %w", err)
		}
	}
	h := &heldFile{st: st}
	if err == nil && restore {
		var raw []byte
		if raw, err = st.Dicts(); err == nil {
			if h.dicts, h.oldDicts, err = p.loadDicts(raw); err != nil {
				err = fmt.Errorf("reading its %w", err)
			}
		}
	}
	if err == nil && restore {
		// The whole file is checked first (its format, identity, pages,
		// checksum and count), without decoding: no object of a damaged
		// or foreign file is ever handed out, and such a file is set
		// aside now, before the probe, for one list. What only a decode
		// can find (an object that does not decode or is refused) ends
		// the load midway (loadHeld).
		if h.rv, err = st.Load(func(_, _ []byte) error { return nil }); err == nil && h.rv != "" {
			p.held = h
		}
	}
	if err != nil {
		if st != nil {
			st.Close()
		}
		if st, ok = p.setAside(err); !ok {
			return "", false
		}
	}
	p.store = st
	p.mu.Lock()
	// Written again with the next commit: the file may be a new one, whose
	// entries will be the cache's.
	p.dictsDirty = len(p.dicts) > 0
	p.mu.Unlock()
	if !restore {
		// A later run of the same informer: the file must still be what
		// the last run left, else it is rewritten from the cache.
		if frv, err := st.ResourceVersion(); err != nil || frv != p.committed {
			return "", true
		}
		return p.committed, true
	}
	if p.held == nil {
		// Whatever the file holds is not a state the cache will be at: the
		// first list's objects replace it.
		p.mu.Lock()
		p.reset, p.dirty = true, true
		p.mu.Unlock()
		return "", true
	}
	return p.held.rv, true
}

// setAside reports err, a file that cannot be used, renames it aside
// and opens an empty one in its place; false if that fails too (the
// informer runs without the file).
func (p *Persister[T]) setAside(err error) (*snapshot.Store, bool) {
	aside := p.path + ".bad"
	size := ""
	if fi, serr := os.Stat(p.path); serr == nil {
		size = fmt.Sprintf(" (%d bytes)", fi.Size())
	}
	p.cfg.Report(fmt.Errorf("%s%s: %w; set aside as %s, listing from scratch", p.path, size, err, filepath.Base(aside)))
	if rerr := os.Rename(p.path, aside); rerr != nil && !os.IsNotExist(rerr) {
		_ = os.Remove(p.path)
	}
	p.committed = ""
	st, err := snapshot.Open(p.path, p.sealed, p.cfg.Snapshot)
	if err != nil {
		p.cfg.Report(fmt.Errorf("%s: %w; running without it%s", p.path, err, filesHint(err)))
		return nil, false
	}
	return st, true
}

// loadHeld loads the held file's objects: begin is given its
// dictionaries, then each every object, as the file gives them. false if
// the file turns out unusable: reported and set aside (the objects given
// so far are the caller's to deal with), and an empty file is used, its
// first commit the cache's.
func (p *Persister[T]) loadHeld(begin func([]*squash.Dict), each func(k, v []byte, dicts []*squash.Dict) error) bool {
	h := p.held
	p.held = nil
	var resealed map[string][]byte // objects under an older key, under the first
	begin(h.dicts)
	rv, err := h.st.Load(func(k, v []byte) error {
		if p.sealer != nil {
			plain, old, err := p.sealer.open(p.sealed, string(k), v)
			if err != nil {
				return fmt.Errorf("object %q: %w", k, err)
			}
			if old {
				if resealed == nil {
					resealed = map[string][]byte{}
				}
				if resealed[string(k)], err = p.sealer.seal(p.sealed, string(k), plain); err != nil {
					return err
				}
			}
			v = plain
		}
		if err := each(k, v, h.dicts); err != nil {
			return fmt.Errorf("object %q: %w", k, err)
		}
		return nil
	})
	if err != nil {
		// The flusher, if it runs (a restore after the probe), holds the
		// store: stopped while the file is replaced, and started again.
		running := p.quit != nil
		if running {
			p.Stop() // closes h.st
		} else {
			h.st.Close()
		}
		st, ok := p.setAside(err)
		p.mu.Lock()
		p.reset, p.dirty = true, true
		p.broken = p.broken || !ok // no file: nothing is kept for one
		p.mu.Unlock()
		p.store = st
		if running && ok {
			p.Start()
		}
		return false
	}
	if len(resealed) > 0 || h.oldDicts {
		// The objects were read: a failure here (a full disk) leaves
		// the file as it was, good under the keys given, not a file
		// to set aside.
		b := &snapshot.Batch{Puts: resealed, RV: rv}
		if h.oldDicts {
			b.Dicts, _ = p.dictsValue(h.dicts) // an error leaves them as they are
		}
		if cerr := commitResealed(h.st, b); cerr != nil {
			p.cfg.Report(fmt.Errorf("%s: encrypting %d objects again with the first state key: %w; they stay encrypted with an older key, which must still be given", p.path, len(resealed), cerr))
		}
	}
	// The file is at rv: a later run need not rewrite it.
	p.committed = rv
	p.mu.Lock()
	p.dicts = h.dicts
	p.dictsDirty = len(p.dicts) > 0
	p.mu.Unlock()
	return true
}

// outOfFiles reports whether err is the process (EMFILE) or the system
// (ENFILE) out of file descriptors: one state file per informer, and a
// view has an informer per namespace.
func outOfFiles(err error) bool {
	return errors.Is(err, syscall.EMFILE) || errors.Is(err, syscall.ENFILE)
}

// filesHint is what to do when err is outOfFiles; "" otherwise.
func filesHint(err error) string {
	if !outOfFiles(err) {
		return ""
	}
	return " (too many open files, a state file held open per informer: raise the limit, ulimit -n, or use fewer informers: over many namespaces, one for all of them with a label selector, the CLI's -A -l)"
}
