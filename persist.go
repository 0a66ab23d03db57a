package kinformer

import (
	"fmt"
	"reflect"
	"runtime"

	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/snapshot"
)

// The durable cache (Options.StateDir): the writer records every change it
// makes to the cache in an internal/persist.Persister, which commits them
// in batches to the state file; a new informer with the same identity
// starts from the file (loop.openState), then catches up by a watch from
// its resourceVersion. This file says what the identity is and wires the
// Persister to the informer's reports and metrics.

// stateIdentity describes the watch a state file belongs to. It returns
// "" when the source does not say what it watches and Options.StateKey is
// empty.
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
	}.String()
}

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
// report (which must take any goroutine) wrapped in ErrSnapshot; nil if the
// informer cannot say what it watches (errNoIdentity).
func newPersister[T Object](lw any, o *Options[T], report func(error), obs *observer) *persist.Persister[T] {
	identity := stateIdentity(lw, o)
	if identity == "" {
		return nil
	}
	return persist.New(persist.Config[T]{
		Path:      persist.Path(o.StateDir, o.Name, identity),
		Identity:  identity,
		Snapshot:  snapshot.Options{NoSync: o.StateNoSync},
		Interval:  o.StateInterval,
		Codec:     persist.NewCodec[T](o.objectType()),
		Report:    func(err error) { report(fmt.Errorf("%w: %w", ErrSnapshot, err)) },
		Committed: obs.commit,
	})
}

// openState opens the state file for a run, restoring the cache from it
// on the first; false if the run goes without it.
func (l *loop[T]) openState() bool {
	p := l.w.state
	if p == nil {
		l.w.reportAsync(errNoIdentity)
		return false
	}
	first := !l.stateOpened
	l.stateOpened = true
	items, rv, ok := p.Open(first, l.checkRestored)
	switch {
	case !ok:
		return false
	case first && rv != "":
		l.w.restore(items, rv)
		l.obs.restore(len(items))
		l.log.Info("kinformer: restored from the state file", "objects", len(items), "resourceVersion", rv, "file", p.Path())
	case !first && rv == "":
		l.w.rewriteState()
	}
	return true
}

// checkRestored accepts an object of the state file if it has the key it
// is stored under, and shares its strings and maps with the others.
func (l *loop[T]) checkRestored(key string, obj T) error {
	if got := l.w.cache.keyFunc(obj); got != key {
		return fmt.Errorf("it has key %q", got)
	}
	l.w.share.Object(obj)
	return nil
}
