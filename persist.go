package kinformer

import (
	"fmt"
	"reflect"
	"runtime"

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
func stateIdentity[T Object](lw any, o *Options[T]) (persist.Identity, bool) {
	src := o.StateKey
	if src == "" {
		rs, ok := lw.(restScoped)
		if !ok {
			return persist.Identity{}, false
		}
		client := rs.GetClient()
		if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
			return persist.Identity{}, false
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
		Fields:            fieldsOf(o.fields),
	}, true
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
	identity, ok := stateIdentity(lw, o)
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
	})
}

// fieldsOf is a projection's identity; "" for whole objects.
func fieldsOf(f *projection.Fields) string {
	if f == nil {
		return ""
	}
	return f.String()
}
