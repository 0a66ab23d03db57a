package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"runtime"
	"slices"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"

	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/snapshot"
	"github.com/kinformer/kinformer/internal/status"
	"github.com/kinformer/kinformer/internal/store"
)

// The durable cache (Options.StateDir): the writer records every change it
// makes to the cache in an internal/persist.Persister, which commits them
// in batches to the state file; a new informer with the same identity
// starts from the file (loop.openState), then catches up by a watch from
// its resourceVersion. This file says what the identity is, wires the
// Persister to the informer's reports and metrics, and runs the restore
// (below).

// stateIdentity describes the watch a state file belongs to; false when
// the source does not say what it watches and Options.StateKey is empty.
// The Factory's StateKey, and the CLI's, also say whom the client acts as
// (persist.User); a typed client cannot say it.
func stateIdentity[T Object](d describe.Source, o *config[T]) (persist.Identity, bool) {
	src := o.StateKey
	if src == "" {
		rs := d.Scoped
		if rs == nil {
			return persist.Identity{}, false
		}
		client := rs.GetClient()
		if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
			return persist.Identity{}, false
		}
		// The server, API group and version, and namespace; the resource
		// is T's (or the factory's) below.
		src = client.Get().URL().String() + " namespace=" + rs.GetNamespace() + " resource=" + d.Resource()
	}
	key := funcName(o.KeyFunc)
	if o.defaultKey || key == metaNamespaceKeyName {
		// The default, given or not (see metaNamespaceKeyName): the same
		// cache, the same file.
		key = "MetaNamespaceKey"
	}
	t := o.objectType()
	return persist.Identity{
		Source:            src,
		Type:              t.String() + " " + typePath(t),
		Name:              o.Name,
		LabelSelector:     o.LabelSelector,
		FieldSelector:     o.FieldSelector,
		Key:               key,
		Transform:         funcName(o.Transform),
		KeepManagedFields: o.KeepManagedFields,
		Fields:            fieldsOf(o.fields),
		Encrypted:         len(o.StateKeys) > 0,
	}, true
}

// secretsOf says whether an informer caches Secrets (by its resource, its
// name or its type), whose state file is written only with StateKeys.
// Even metadata alone may hold a Secret's data (the last-applied
// annotation).
func secretsOf[T Object](src describe.Source, o *config[T]) bool {
	if src.Resource() == "secrets" || o.Name == "secrets" {
		return true
	}
	if gvr := src.Dynamic.GVR; src.Dynamic.Client != nil && gvr.Group == "" && gvr.Resource == "secrets" {
		return true
	}
	if gvr := src.Meta; src.MetaOK && gvr.Group == "" && gvr.Resource == "secrets" {
		return true
	}
	t := o.objectType()
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t == reflect.TypeFor[corev1.Secret]()
}

// ReadStateKeys reads Options.StateKeys from a file: one key per line, 32
// bytes in standard base64 each (`head -c 32 /dev/urandom | base64`), the
// first to encrypt with; empty lines and lines starting with # are
// skipped. The file must be a regular file (it may be reached through a
// symbolic link, as a mounted Secret's is).
func ReadStateKeys(path string) ([][]byte, error) { return persist.ReadKeys(path) }

// ParseStateKeys reads Options.StateKeys from text, as ReadStateKeys does
// from a file; commas also separate keys (for an environment variable).
func ParseStateKeys(text string) ([][]byte, error) { return persist.ParseKeys(text) }

func typePath(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return t.PkgPath()
}

// funcName names a function by its symbol: stable across restarts of one
// binary, and across builds as long as the function keeps its name. The
// Factory compares functions within one process by their closure pointer
// instead (funcID), which tells apart closures of one literal that
// captured different values; no such pointer survives a restart, so a
// state file can only go by the name.
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

// errNoIdentity is reported at each run of an informer with a StateDir
// that cannot say what it watches.
var errNoIdentity = fmt.Errorf("%w: StateDir is ignored: the client does not say what it watches; set Options.StateKey", ErrSnapshot)

// newPersister returns the Persister of o's state file, reporting through
// report (which must take any goroutine) wrapped in ErrSnapshot, and
// warning through log; nil if the informer cannot say what it watches
// (errNoIdentity).
func newPersister[T Object](src describe.Source, o *config[T], report func(error), log *slog.Logger, obs *observer) *persist.Persister[T] {
	identity, ok := stateIdentity(src, o)
	if !ok {
		return nil
	}
	return persist.New(persist.Config[T]{
		Dir:       o.StateDir,
		Name:      o.Name,
		Identity:  identity,
		Snapshot:  snapshot.Options{NoSync: o.StateNoSync},
		Interval:  o.StateInterval,
		Codec:     persist.NewCodec[T](o.objectType()),
		Report:    func(err error) { report(fmt.Errorf("%w: %w", ErrSnapshot, err)) },
		Committed: obs.commit,
		Log:       log,
		Keys:      o.StateKeys,
	})
}

// stateFiles are the paths of the state files the informer has written:
// its current one last, after those of narrower projections it left for a
// wider one (loop.adopt); nil without one, or before a run has opened it.
// Not while it runs.
func (inf *Informer[T]) stateFiles() []string {
	if inf.loop == nil || inf.loop.w.state == nil {
		return nil
	}
	cur := inf.loop.w.state.Path()
	files := slices.DeleteFunc(slices.Clone(inf.loop.left), func(p string) bool { return p == cur })
	if cur != "" {
		files = append(files, cur)
	}
	return files
}

// fieldsOf is a projection's identity; "" for whole objects.
func fieldsOf(f *projection.Fields) string {
	if f == nil {
		return ""
	}
	return f.String()
}

// UnusedStateFile is a file of a state directory no informer will use
// (PruneStateDir): set aside as unreadable (damaged, or encrypted under
// StateKeys no longer given), or named under a directory key that was
// replaced.
type UnusedStateFile struct {
	Path string
	Size int64
	Why  string
}

// PruneStateDir lists the files of the state directory dir that no
// informer will use, and unless dryRun removes them. Files in use by an
// informer (of any process) are left alone. The first informer of a
// process to open a directory reports those it can see cheaply (an ERROR
// wrapping ErrSnapshot), once.
func PruneStateDir(dir string, dryRun bool) ([]UnusedStateFile, error) {
	list := persist.Prune
	if dryRun {
		list = persist.Unused
	}
	files, err := list(dir)
	out := make([]UnusedStateFile, len(files))
	for i, f := range files {
		out[i] = UnusedStateFile(f)
	}
	return out, err
}

// The restore flow (Options.StateDir), in the order it runs: the loop
// opens the state file, leaving its objects in it (openState); the probe,
// a one-object list authorized as this client, learns the server's
// resourceVersion (probe); only then are the file's objects loaded, each
// cached and handed to the handlers as it comes (restoreHeld,
// writer.restore); the watch catches up from the file's
// resourceVersion, and once it reaches the probe's, or goes quiet, the
// informer is synced (caughtUp). Every later change is recorded
// (writer.record) as it is applied. The state file's identity and the
// Persister are made above.

// heldState is the state file opened for a restore, its objects not yet
// loaded (persist's OpenHeld): their resourceVersion.
type heldState struct {
	rv string
}

// openState opens the state file for a run, holding it for a restore on
// the first run (or again, if a run ended before the server authorized
// its restore): its objects stay in the file until then (loop.held).
// false if the run goes without the file.
//
// Why not restore at once: the file was written by whoever ran with this
// state directory and identity, and the server may no longer let this
// client read what it holds (a revoked Role), or this may be another user
// (the library cannot always tell users apart, see stateIdentity). The
// probe's list, authorized as this client, says it may read them.
func (l *loop[T]) openState() bool {
	p := l.w.state
	if p == nil {
		l.w.reportAsync(errNoIdentity)
		return false
	}
	load := !l.stateOpened || l.held != nil
	l.stateOpened, l.held = true, nil
	rv, ok := l.w.cache.s.OpenState(p, load)
	switch {
	case !ok:
		return false
	case load && rv != "":
		l.held = &heldState{rv: rv}
		l.log.Debug("kinformer: opened the state file; restoring it once the server authorizes a list", "resourceVersion", rv, "file", p.Path())
	case !load && rv == "" && !l.w.widened:
		// (Widened: the cache holds a narrower projection than the
		// file's; the list under way writes it whole.)
		l.w.rewriteState()
	}
	return true
}

// restoreHeld restores the held file after the probe (o) has succeeded,
// object by object as it loads (each Added, CauseRestore, as it comes:
// the handlers work while the file loads), and says what follows: the
// catch-up watch; for a sharded informer a list, diffed against the
// restored cache; or, if the file turned out unusable (set aside and
// reported), a list diffed against what it gave.
func (l *loop[T]) restoreHeld(o outcome) outcome {
	h := l.held
	l.held = nil
	n, ok := l.w.restore(l.checkRestored, h.rv)
	if !ok {
		l.target = ""
		return outcome{kind: heldForeign}
	}
	l.obs.restore(n)
	l.w.status.Restored.Store(&status.Restore{Objects: n, File: l.w.state.Path(), ResourceVersion: h.rv})
	l.log.Info("kinformer: restored from the state file", "objects", n, "resourceVersion", h.rv, "file", l.w.state.Path())
	if l.sh != nil {
		// The probe could not find the empty cache caught up (it had no
		// resourceVersion), so the informer has not synced: the list will.
		l.target = ""
		return outcome{kind: probedSharded}
	}
	// The probe compared the server's resourceVersion with the empty
	// cache's; now with the restored one. (A probe without a
	// resourceVersion ended the catch-up at once: a server that lists
	// without one cannot be caught up with.)
	if l.target != "" && l.w.status.Reached(l.target) {
		l.caughtUp()
	}
	return o
}

// checkRestored accepts an object of the state file if it has the key it
// is stored under, and shares its strings and maps with the others.
func (l *loop[T]) checkRestored(key string, obj T) error {
	if got := l.w.cache.s.Key(obj); got != key {
		return fmt.Errorf("it has key %q", got)
	}
	l.w.share.Object(obj)
	return nil
}

// probe lists one object to learn the server's current resourceVersion:
// the restored informer is synced once its watch reaches it.
func (l *loop[T]) probe(ctx context.Context) outcome {
	opts := l.listOptions()
	opts.Limit = 1
	began := time.Now()
	list, err := l.listFn(ctx, opts)
	l.quiet = min(max(3*time.Since(began), minQuiet), catchUpTimeout/2)
	if err == nil && isNil(list) {
		err = fmt.Errorf("%w: the client returned no list and no error", ErrUnexpectedObject)
	}
	l.obs.request("list", classify(err))
	if err != nil {
		return outcome{kind: listFailed, err: fmt.Errorf("list (limit 1, for the current resourceVersion): %w", classify(err))}
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return outcome{kind: listFailed, err: fmt.Errorf("list: %w: %v", ErrUnexpectedObject, err)}
	}
	l.target = lm.GetResourceVersion()
	if why := below(l.target, l.w.status.ResourceVersion()); why != "" && l.held == nil {
		// A cache an earlier run restored, and the server behind it
		// (a held file's resourceVersion is judged by foreign).
		l.target = ""
		return outcome{kind: otherHistory, err: l.anotherHistory(why)}
	}
	if l.target == "" || l.w.status.Reached(l.target) {
		l.caughtUp()
	}
	return outcome{kind: probed}
}

// caughtUp ends the catch-up of a restored informer.
func (l *loop[T]) caughtUp() {
	l.log.Info("kinformer: caught up with the server", "resourceVersion", l.w.status.ResourceVersion(), "target", l.target)
	l.target = ""
	l.w.caughtUp()
}

// restore fills the empty cache with the objects of the held state file
// as it loads them (check accepts a decoded one), queueing Added
// (CauseRestore) for each as it is cached, at rv, the file's; then fits
// them (a compact cache may compress them anew, and the file follows).
// The informer is not synced yet: it catches up with the server first
// (caughtUp). It returns how many it restored, and false if the file
// turned out unusable (reported, set aside): what it gave stays cached,
// unsynced, for the list that follows to diff against.
func (w *writer[T]) restore(check func(key string, obj T) error, rv string) (n int, ok bool) {
	items := w.cache.s.NewItems(0)
	ok = w.cache.s.RestoreState(w.state, check, func(key string, r store.Ref[T]) {
		if w.outsideUID(r.UID()) {
			w.state.Record(key, r.Object(), true, rv) // another replica's now
			return
		}
		items.Set(key, r)
		w.disp.update(func(p publisher[T]) {
			w.put(p, key, r)
			w.emit(p, Event[T]{Type: Added, Key: key, ResourceVersion: rv, Cause: CauseRestore}, r, store.Ref[T]{})
		})
	})
	if !ok {
		return items.Len(), false
	}
	rewrite := w.cache.s.Refit(items)
	w.disp.update(func(p publisher[T]) {
		if rewrite {
			// The cache holds them otherwise than the file (compressed
			// against another dictionary): the file follows.
			b := w.state.Batch()
			for key, r := range items.All() {
				w.cache.s.PutState(b, key, r)
			}
			b.End(rv)
		}
		w.setRV(rv)
	})
	return items.Len(), true
}

// rewriteState makes the state file the cache as it is, for a file that
// no longer holds the last commit.
func (w *writer[T]) rewriteState() {
	b := w.state.Batch()
	b.Reset()
	w.cache.s.PeekAll(func(key string, r store.Ref[T]) { w.cache.s.PutState(b, key, r) })
	b.End(w.status.ResourceVersion())
}

// caughtUp marks a restored informer synced: it has applied every change
// the server had made as of its start.
func (w *writer[T]) caughtUp() {
	w.disp.update(func(p publisher[T]) { w.syncedLocked(p, true) })
	w.recovered()
}

// record notes r, cached under key, in the state file: a compact cache's
// bytes as they are.
func (w *writer[T]) record(key string, r store.Ref[T], rv string) {
	w.cache.s.RecordState(w.state, key, r, rv)
}
