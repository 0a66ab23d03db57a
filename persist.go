package kinformer

import (
	"fmt"
	"log/slog"
	"reflect"
	"runtime"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/snapshot"
)

// The durable cache (Options.StateDir): the writer records every change it
// makes to the cache in an internal/persist.Persister, which commits them
// in batches to the state file; a new informer with the same identity
// starts from the file (loop.openState), then catches up by a watch from
// its resourceVersion. This file says what the identity is and wires the
// Persister to the informer's reports and metrics.

// stateIdentity describes the watch a state file belongs to; false when
// the source does not say what it watches and Options.StateKey is empty.
// The Factory's StateKey, and the CLI's, also say whom the client acts as
// (persist.User); a typed client cannot say it.
func stateIdentity[T Object](d described, o *config[T]) (persist.Identity, bool) {
	src := o.StateKey
	if src == "" {
		rs := d.scoped
		if rs == nil {
			return persist.Identity{}, false
		}
		client := rs.GetClient()
		if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
			return persist.Identity{}, false
		}
		// The server, API group and version, and namespace; the resource
		// is T's (or the factory's) below.
		src = client.Get().URL().String() + " namespace=" + rs.GetNamespace() + " resource=" + d.resource()
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
func secretsOf[T Object](src described, o *config[T]) bool {
	if src.resource() == "secrets" || o.Name == "secrets" {
		return true
	}
	if gvr := src.dyn.gvr; src.dyn.client != nil && gvr.Group == "" && gvr.Resource == "secrets" {
		return true
	}
	if gvr := src.meta; src.metaOK && gvr.Group == "" && gvr.Resource == "secrets" {
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
func newPersister[T Object](src described, o *config[T], report func(error), log *slog.Logger, obs *observer) *persist.Persister[T] {
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

// stateFile is the informer's state file: "" without one, or before a
// run has opened it. Not while it runs.
func (inf *Informer[T]) stateFile() string {
	if inf.loop == nil || inf.loop.w.state == nil {
		return ""
	}
	return inf.loop.w.state.Path()
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
