package kinformer

import (
	"bytes"
	"fmt"
	"maps"
	"reflect"
	goruntime "runtime"
	"slices"
	"strings"
	"unsafe"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer/internal/projection"
)

// The sharing rules of a Factory: which requests get the same informer
// (factoryKey, keyOf), and when a later consumer's options merge into it
// or conflict with it (merge; functions compared by funcID).

// factoryKey is what makes two requests one informer.
type factoryKey struct {
	typ       reflect.Type // T: a typed and a dynamic informer never share
	boxed     bool         // Factory.Typed's: objects of typ, as Object
	gvr       schema.GroupVersionResource
	namespace string // "" for all namespaces, and for cluster-scoped resources
	label     string // canonical form, where it parses
	field     string
}

// keyOf returns the sharing key of a request, and its options with what
// the factory sets.
func keyOf[T Object](f *Factory, t reflect.Type, mapping *meta.RESTMapping, namespace string, opts *Options[T]) (factoryKey, Options[T]) {
	var o Options[T]
	if opts != nil {
		o = *opts
	}
	if mapping.Scope.Name() != meta.RESTScopeNameNamespace {
		namespace = ""
	}
	k := factoryKey{typ: t, gvr: mapping.Resource, namespace: namespace, label: o.LabelSelector, field: o.FieldSelector}
	// "a=1,b=2" and "b=2, a=1" select the same; a selector that does not
	// parse stays as it is, for the server to refuse.
	if s, err := labels.Parse(o.LabelSelector); err == nil {
		k.label = s.String()
	}
	if s, err := fields.ParseSelector(o.FieldSelector); err == nil {
		k.field = s.String()
	}
	o.Name = mapping.Resource.GroupResource().String()
	o.Metrics = f.metrics
	if o.StateDir == "" {
		o.StateDir = f.state
	}
	if len(o.StateKeys) == 0 {
		o.StateKeys = f.stateKeys
	}
	if nilSharder(o.Sharding) {
		o.Sharding = f.shard
	}
	if !o.Compact {
		o.Compact = f.compact
	}
	if o.ListGate == nil {
		o.ListGate = f.gate
	}
	if o.StateKey == "" && f.cfg != nil {
		// What a dynamic client cannot say: the server, resource and
		// namespace. (A typed informer's client says it itself.)
		o.StateKey = f.cfg.Host + " " + mapping.Resource.String() + " namespace=" + namespace
	}
	if o.StateDir != "" && f.cfg != nil {
		o.StateKey += stateUser(f.cfg)
	}
	if o.Logger == nil {
		o.Logger = f.log
	}
	return k, o
}

// share returns the informer of k, merging o into it, or makes it with
// mk (called with f.mu held) and starts it if the factory has started;
// objType is the objects' type where T is an interface (Typed), else nil.
func share[T Object](f *Factory, k factoryKey, o Options[T], objType reflect.Type, mk func(*Options[T]) (*Informer[T], error)) (*Informer[T], error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	if f.stopped {
		return nil, ErrFactoryStopped
	}
	if objType == nil {
		objType = reflect.TypeFor[T]()
	}
	fields, err := compileFields(o.Fields, objType)
	if err != nil {
		return nil, fmt.Errorf("kinformer: %s: %w", o.Name, err)
	}
	if e := f.entries[k]; e != nil {
		inf := e.inf.(*Informer[T])
		if err := merge(inf, e, o, fields); err != nil {
			return nil, fmt.Errorf("kinformer: shared informer of %s: %w", sharedName(k, e.resource), err)
		}
		e.refs++
		return inf, nil
	}
	inf, err := mk(&o)
	if err != nil {
		return nil, err
	}
	e := &factoryEntry{resource: o.Name, inf: inf, keyFunc: keyFuncID(o.KeyFunc), indexes: map[string]uintptr{},
		onHandler: inf.disp.onHandlerGoroutine, refs: 1}
	for name, fn := range o.Indexers {
		e.indexes[name] = funcID(fn)
	}
	f.entries[k] = e
	if f.started {
		f.startLocked(e)
	}
	return inf, nil
}

// sharedName names a shared informer in errors.
func sharedName(k factoryKey, resource string) string {
	s := resource
	if k.namespace != "" {
		s += " in namespace " + k.namespace
	}
	if k.label != "" {
		s += " with labels " + k.label
	}
	if k.field != "" {
		s += " with fields " + k.field
	}
	return s
}

// merge checks that o can share inf, whose entry is e, and adds its
// indexes, resync period, fields (compiled: fields) and mutation
// detector. Nothing changes if it returns an error.
func merge[T Object](inf *Informer[T], e *factoryEntry, o Options[T], fields *projection.Fields) error {
	have, want := inf.configuration(), o.withDefaults()
	var diff []string
	for _, c := range []struct {
		name string
		same bool
	}{
		{"Transform", funcID(have.Transform) == funcID(want.Transform)},
		{"KeyFunc", e.keyFunc == keyFuncID(o.KeyFunc)},
		{"KeepManagedFields", have.KeepManagedFields == want.KeepManagedFields},
		{"DisableStreamingList", have.DisableStreamingList == want.DisableStreamingList},
		{"DisableDirectDecoding", have.DisableDirectDecoding == want.DisableDirectDecoding},
		{"PageSize", have.PageSize == want.PageSize},
		{"WatchTimeout", have.WatchTimeout == want.WatchTimeout},
		{"IdleMargin", have.IdleMargin == want.IdleMargin},
		{"Backoff", have.Backoff == want.Backoff},
		{"StateDir", have.StateDir == want.StateDir},
		{"StateNoSync", have.StateNoSync == want.StateNoSync},
		{"StateKeys", slices.EqualFunc(have.StateKeys, want.StateKeys, bytes.Equal)},
		{"Sharding", sameSharder(have.Sharding, want.Sharding)},
		{"Compact", have.Compact == want.Compact},
	} {
		if !c.same {
			diff = append(diff, c.name)
		}
	}
	if len(diff) > 0 {
		return fmt.Errorf("already made with a different %s", strings.Join(diff, ", "))
	}

	added := map[string]IndexFunc[T]{}
	for name, fn := range want.Indexers {
		id, ok := e.indexes[name]
		switch {
		case !ok:
			added[name] = fn
		case id != funcID(fn):
			return fmt.Errorf("index %q already exists with another function", name)
		}
	}
	// The shortest resync period of its consumers, and the union of their
	// fields (one without Fields: whole objects). Before the start the
	// informer simply starts so; after it, it takes them while it runs
	// (reconfigure, live): a wider projection by a re-list, after which
	// its objects have the new fields; WaitForSync waits for it.
	resync := have.ResyncPeriod
	if p := want.ResyncPeriod; p > 0 && (resync <= 0 || p < resync) {
		resync = p
	}
	union, err := projection.Union(have.fields, fields)
	if err != nil {
		return err
	}
	widen := !projection.Equal(union, have.fields)
	// Any consumer asking for the mutation detector turns it on, before
	// the informer starts (it copies every object as it is cached). A
	// compact cache has nothing for it to check (its reads are the
	// caller's own): asking is no conflict, before the start or after.
	detect := want.DetectMutations && !have.DetectMutations && !have.Compact
	if detect && !inf.detectingMutations() && inf.isStarted() {
		return fmt.Errorf("%w: it does not detect mutations, and cannot start now", ErrStarted)
	}
	if err := checkReads(union, nil, added); err != nil {
		return err
	}
	// What AddIndexers would refuse, refused before anything changes: a
	// nil IndexFunc, or a name the cache has (IndexNamespace, or an index
	// added to the informer directly, which e.indexes does not know).
	cached := inf.cache.Indexers()
	for _, name := range slices.Sorted(maps.Keys(added)) {
		if added[name] == nil {
			return fmt.Errorf("index %q has a nil IndexFunc", name)
		}
		if _, ok := cached[name]; ok {
			return fmt.Errorf("index %q already exists", name)
		}
	}
	// From here on nothing fails but for a Start racing this merge, which
	// only the mutation detector minds: it goes first, so that nothing has
	// changed if it fails.
	if detect && !inf.detectingMutations() {
		if err := inf.reconfigure("the mutation detector", false, func(c *config[T]) { c.DetectMutations = true }); err != nil {
			return err
		}
	}
	if widen || resync != have.ResyncPeriod { // first: the indexes added are checked against the union
		if err := inf.reconfigure("the fields it keeps", true, func(c *config[T]) { c.fields, c.ResyncPeriod = union, resync }); err != nil {
			return err
		}
	}
	if len(added) > 0 {
		if err := inf.AddIndexers(added); err != nil {
			return err
		}
		for name, fn := range added {
			e.indexes[name] = funcID(fn)
		}
	}
	return nil
}

// funcID identifies a function value within this process (0 for nil). Go
// cannot compare functions, and reflect shows only their code, which two
// closures of one literal share even when they captured different values.
// A func value is one pointer, to its closure (code and captured variables;
// a static one for a declared function): that pointer is its identity. The
// same value passed twice is the same, and so is a declared function named
// twice; a closure made twice is two, even with equal captures (and may be
// without captures, where inlining copied its literal): a conservative
// error, never a wrong sharing.
//
// The state file compares functions by another rule, their symbol's name
// (funcName, durable.go), and both are needed. Within one process the
// closure pointer tells apart closures of one literal that captured
// different values (two Transforms dropping different fields must not share
// a cache), which their one name cannot. A state file must be recognised
// by the next process, after a restart, where no pointer survives and only
// the name is the same.
func funcID(fn any) uintptr {
	v := reflect.ValueOf(fn)
	if !v.IsValid() || v.Kind() != reflect.Func || v.IsNil() {
		return 0
	}
	p := reflect.New(v.Type()) // a *func: read the func value's one word
	p.Elem().Set(v)
	return uintptr(*(*unsafe.Pointer)(p.UnsafePointer()))
}

// keyFuncID is funcID of a KeyFunc, with MetaNamespaceKey given
// explicitly the same as none (the default).
func keyFuncID[T Object](fn KeyFunc[T]) uintptr {
	if fn == nil || goruntime.FuncForPC(reflect.ValueOf(fn).Pointer()).Name() == metaNamespaceKeyName {
		return 0
	}
	return funcID(fn)
}

// metaNamespaceKeyName is the name the runtime gives every instantiation of
// MetaNamespaceKey named in non-generic code ("….MetaNamespaceKey[...]").
// (Named in generic code, as in Options' default, it is a wrapper closure
// instead, with another name and code.)
var metaNamespaceKeyName = goruntime.FuncForPC(reflect.ValueOf(MetaNamespaceKey[*metav1.PartialObjectMetadata]).Pointer()).Name()

// CacheInfo is what one informer of a Factory caches (Factory.Caches):
// enough to see, in a running program, what each cache costs and who
// asked for it.
type CacheInfo struct {
	// Resource is the informer's name ("pods", "deployments.apps"), GVR
	// the resource it lists, Type the Go type of its objects
	// ("*v1.Pod", "*unstructured.Unstructured", "*v1.PartialObjectMetadata":
	// metadata only).
	Resource string
	GVR      schema.GroupVersionResource
	Type     string
	// Namespace is the namespace listed; "" for every namespace, or a
	// cluster-scoped resource: then ClusterWide, the informer holds every
	// object of the resource the selectors let through.
	Namespace     string
	ClusterWide   bool
	LabelSelector string
	FieldSelector string
	// Fields is the projection the cache keeps (Informer.Fields); nil
	// for whole objects.
	Fields []string
	// Compact says the cache holds objects as bytes (Options.Compact):
	// Bytes is then what their encodings take; 0 for a cache of objects,
	// whose size is the Go heap's (see the benchmarks for a ratio).
	Compact bool
	Objects int
	Bytes   int64
	// Synced is the informer's HasSynced; Consumers how many calls hold
	// it (Shared, Typed, Metadata, Dynamic, less Release); Handlers how
	// many handlers it has.
	Synced    bool
	Consumers int
	Handlers  int
	// Startup is how its start went (Informer.Startup).
	Startup Startup
}

// Caches says what each informer of the factory caches, sorted by
// resource, then namespace and selectors: what a program is paying for,
// including informers a library started for it.
func (f *Factory) Caches() []CacheInfo {
	f.mu.Lock()
	type one struct {
		k    factoryKey
		e    *factoryEntry
		refs int
	}
	all := make([]one, 0, len(f.entries))
	for k, e := range f.entries {
		all = append(all, one{k, e, e.refs})
	}
	f.mu.Unlock()
	out := make([]CacheInfo, 0, len(all))
	for _, o := range all {
		ci := o.e.inf.describe()
		ci.Resource, ci.GVR, ci.Type = o.e.resource, o.k.gvr, o.k.typ.String()
		ci.Namespace, ci.ClusterWide = o.k.namespace, o.k.namespace == ""
		ci.LabelSelector, ci.FieldSelector, ci.Consumers = o.k.label, o.k.field, o.refs
		out = append(out, ci)
	}
	slices.SortFunc(out, func(a, b CacheInfo) int {
		return strings.Compare(a.Resource+"\x00"+a.Namespace+"\x00"+a.LabelSelector+"\x00"+a.FieldSelector+"\x00"+a.Type,
			b.Resource+"\x00"+b.Namespace+"\x00"+b.LabelSelector+"\x00"+b.FieldSelector+"\x00"+b.Type)
	})
	return out
}

// describe is what the informer says of its cache in a CacheInfo; the
// factory adds what its key says.
func (inf *Informer[T]) describe() CacheInfo {
	inf.disp.mu.RLock()
	handlers := len(inf.disp.listeners)
	inf.disp.mu.RUnlock()
	return CacheInfo{Fields: inf.Fields(), Compact: inf.cache.Compact(), Objects: inf.cache.Len(), Bytes: inf.cache.s.HeldBytes(),
		Synced: inf.HasSynced(), Handlers: handlers, Startup: inf.Startup()}
}
