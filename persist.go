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

// heldState is a cache loaded from the state file, not yet restored.
type heldState[T Object] struct {
	items map[string]ref[T]
	rv    string
}

// openState opens the state file for a run, loading the cache from it on
// the first (or again, if a run ended before the server authorized its
// restore): the loaded cache is held until then (loop.held). false if the
// run goes without the file.
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
	items, rv, ok := l.loadState(load)
	switch {
	case !ok:
		return false
	case load && rv != "":
		l.held = &heldState[T]{items: items, rv: rv}
		l.log.Debug("kinformer: loaded the state file; restoring it once the server authorizes a list", "objects", len(items), "resourceVersion", rv, "file", p.Path())
	case !load && rv == "":
		l.w.rewriteState()
	}
	return true
}

// restoreHeld restores the held cache after the probe (o) has succeeded,
// and says what follows: the catch-up watch, or for a sharded informer a
// list, diffed against the restored cache.
func (l *loop[T]) restoreHeld(o outcome) outcome {
	h := l.held
	l.held = nil
	l.w.restore(h.items, h.rv)
	l.obs.restore(len(h.items))
	l.log.Info("kinformer: restored from the state file", "objects", len(h.items), "resourceVersion", h.rv, "file", l.w.state.Path())
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
	if l.target != "" && l.w.status.reached(l.target) {
		l.caughtUp()
	}
	return o
}

// loadState opens the state file (persist.Persister.Open), loading its
// objects if load: a compact cache takes them as the file holds them,
// decoding only those it must (Cache.packEncoded).
func (l *loop[T]) loadState(load bool) (items map[string]ref[T], rv string, ok bool) {
	p, c := l.w.state, l.w.cache
	if c.pk != nil {
		items = map[string]ref[T]{}
		rv, ok = p.OpenEncoded(load, func(key string, data []byte) error {
			r, err := c.packEncoded(key, data)
			items[key] = r
			return err
		})
		return items, rv, ok
	}
	objs, rv, ok := p.Open(load, l.checkRestored)
	if len(objs) > 0 {
		items = make(map[string]ref[T], len(objs))
		for key, obj := range objs {
			items[key] = ref[T]{obj: obj}
		}
	}
	return items, rv, ok
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
