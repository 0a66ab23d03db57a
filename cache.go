package kinformer

import (
	"fmt"
	"slices"
	"sync"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/labels"
)

// IndexNamespace is the index every cache has: objects by namespace (""
// for cluster-scoped objects).
const IndexNamespace = "namespace"

// IndexFunc returns the values under which an object is indexed. An object
// may have none, one or several. The values must depend only on the object:
// it is called again with the object's old state to take it out of the
// index. It runs outside the cache's lock, so it may read the cache (to log,
// or to count), but what it returns must not depend on what it reads.
type IndexFunc[T Object] func(obj T) []string

func namespaceIndex[T Object](obj T) []string { return []string{obj.GetNamespace()} }

// keySet is the set of cache keys filed under one index value.
type keySet map[string]struct{}

// Cache is a thread-safe, indexed store of objects, kept in sync with the
// API server by an Informer. All reads are snapshots taken under a read
// lock; a re-list replaces the whole content at once, so a reader sees
// either the state before it or after it, never a mix.
//
// The objects returned are shared with the informer, its handlers and other
// readers: treat them as read-only. Copy (DeepCopy) before modifying.
//
// Only the informer's loop writes (through its writer, writer.go), so it
// reads items without the lock and computes index values, calling
// KeyFunc and IndexFuncs, before taking it: an IndexFunc may itself read the
// cache, and readers wait only for the map updates themselves.
//
// The built-in namespace index is built only when a query needs it: an
// entry per object is about 40 bytes, a tenth of what kinformer adds to a
// ConfigMap, and many informers never ask for a namespace, or watch only
// one. Until then the cache counts the objects of each namespace; while
// they are all in one, a namespace query reads items. The first query that
// needs the index builds it, under the write lock, and from then on it is
// kept up to date as any other.
//
// A compact cache (Options.Compact, compact.go) holds each object as its
// encoding, with its resourceVersion, namespace and index values beside
// it, and decodes on every read, outside the lock: what a reader gets is
// its own.
type Cache[T Object] struct {
	keyFunc    KeyFunc[T]
	defaultKey bool                    // keyFunc is MetaNamespaceKey: an object's key is its namespace and name
	indexers   map[string]IndexFunc[T] // replaced (never changed in place) under wmu and mu; the writer reads it under wmu alone
	lazyNS     bool                    // IndexNamespace is the built-in one, built on demand; set once by newCache
	// order names the eager indexes in the order a packed object holds
	// their values (packedExtra.vals); it only grows, with indexers.
	order []string
	// codec, if set, makes the cache compact: it encodes and decodes
	// objects (set once, before the informer starts).
	codec *codec[T]
	// uids: packed objects keep their UID (a sharded informer's share is
	// by UID).
	uids bool

	// wmu serialises the writer's changes with addIndexers: each write
	// holds it from reading the old object to the map update, so that an
	// index added meanwhile is built from the items as they are between
	// two writes, never from one whose index values were computed for the
	// old set of indexes. The writer is the only other user, so it is not
	// contended in the steady state.
	wmu sync.Mutex

	mu      sync.RWMutex                 // guards items, indices and nsCount; held for writing by the writer, and by a reader building the namespace index
	items   map[string]ref[T]            // key -> object
	indices map[string]map[string]keySet // index name -> value -> keys; IndexNamespace only once built if lazyNS
	nsCount map[string]int               // namespace -> objects, if lazyNS
	nsBuilt atomic.Bool                  // the lazy namespace index is in indices (set under mu; read by the writer without it)
}

// newCache returns an empty cache. A nil keyFunc means MetaNamespaceKey.
// The namespace index (IndexNamespace) is always added.
func newCache[T Object](keyFunc KeyFunc[T], indexers map[string]IndexFunc[T]) *Cache[T] {
	c := &Cache[T]{keyFunc: keyFunc, defaultKey: keyFunc == nil, items: map[string]ref[T]{}}
	if c.defaultKey {
		c.keyFunc = MetaNamespaceKey[T]
	}
	idx := make(map[string]IndexFunc[T], len(indexers)+1)
	for name, f := range indexers {
		idx[name] = f
	}
	if _, ok := idx[IndexNamespace]; !ok {
		idx[IndexNamespace] = namespaceIndex[T]
		c.lazyNS, c.nsCount = true, map[string]int{}
	}
	c.indexers = idx
	for name := range idx {
		if c.eager(name) {
			c.order = append(c.order, name)
		}
	}
	slices.Sort(c.order)
	c.indices = c.emptyIndices()
	return c
}

// addIndexers adds indexes, built from the cached objects, at any time.
// It holds wmu, so the writer waits; the new indexes are computed without
// mu (readers go on, and an IndexFunc may read the cache) and published
// with the new indexers under it, so a reader finds an index complete or
// not at all.
func (c *Cache[T]) addIndexers(indexers map[string]IndexFunc[T]) error {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	for name, f := range indexers {
		if _, ok := c.indexers[name]; ok {
			return fmt.Errorf("kinformer: index %q already exists", name)
		}
		if f == nil {
			return fmt.Errorf("kinformer: index %q has a nil IndexFunc", name)
		}
	}
	idx := make(map[string]IndexFunc[T], len(c.indexers)+len(indexers))
	for name, f := range c.indexers {
		idx[name] = f
	}
	names := make([]string, 0, len(indexers))
	for name, f := range indexers {
		idx[name] = f
		names = append(names, name)
	}
	slices.Sort(names)
	// Each object's values for the new indexes; a compact cache decodes
	// each object once, and keeps the values beside it.
	built := make(map[string]map[string]keySet, len(indexers))
	for _, name := range names {
		built[name] = map[string]keySet{}
	}
	var repacked map[string]ref[T]
	if c.codec != nil {
		repacked = make(map[string]ref[T], len(c.items))
	}
	for key, r := range c.items { // only the writer changes items, and it waits on wmu
		obj, ok := c.load(r)
		if !ok {
			continue
		}
		var vals [][]string
		for _, name := range names {
			v := indexers[name](obj)
			index(built[name], key, v)
			vals = append(vals, v)
		}
		if r.p != nil {
			p, x := *r.p, *r.p.extra()
			x.vals = append(slices.Clip(x.vals), vals...)
			p.x = &x
			repacked[key] = ref[T]{p: &p}
		}
	}
	c.mu.Lock()
	for name, m := range built {
		c.indices[name] = m
	}
	for key, r := range repacked {
		c.items[key] = r
	}
	c.indexers = idx
	c.order = append(slices.Clip(c.order), names...)
	c.mu.Unlock()
	return nil
}

// Indexers returns the cache's index functions by name, IndexNamespace
// included. The map is the caller's.
func (c *Cache[T]) Indexers() map[string]IndexFunc[T] {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make(map[string]IndexFunc[T], len(c.indexers))
	for name, f := range c.indexers {
		out[name] = f
	}
	return out
}

// IndexValues returns the values the named index files objects under
// (client-go's ListIndexFuncValues), in no particular order. It returns
// ErrUnknownIndex if no such index exists.
func (c *Cache[T]) IndexValues(name string) ([]string, error) {
	if !c.eager(name) {
		c.mu.RLock()
		defer c.mu.RUnlock()
		out := make([]string, 0, len(c.nsCount))
		for ns := range c.nsCount {
			out = append(out, ns)
		}
		return out, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	out := make([]string, 0, len(c.indices[name]))
	for v := range c.indices[name] {
		out = append(out, v)
	}
	return out, nil
}

// eager reports whether the named index is kept from the start (every
// index but the built-in namespace one).
func (c *Cache[T]) eager(name string) bool { return !c.lazyNS || name != IndexNamespace }

// emptyIndices returns the eager indexes, empty.
func (c *Cache[T]) emptyIndices() map[string]map[string]keySet {
	m := make(map[string]map[string]keySet, len(c.indexers))
	for name := range c.indexers {
		if c.eager(name) {
			m[name] = map[string]keySet{}
		}
	}
	return m
}

// namespaceReady reports, under the read lock, whether a namespace query
// can be answered now: from an index, or because every object is in one
// namespace (or none).
func (c *Cache[T]) namespaceReady() bool {
	return !c.lazyNS || c.nsBuilt.Load() || len(c.nsCount) <= 1
}

// rlockNamespace takes the read lock for a namespace query, building the
// namespace index first if the query needs it. The caller must RUnlock.
func (c *Cache[T]) rlockNamespace() {
	c.mu.RLock()
	if c.namespaceReady() {
		return
	}
	c.mu.RUnlock()
	c.mu.Lock()
	if !c.namespaceReady() {
		c.indices[IndexNamespace] = namespaceIndexOf(c.items, c.nsCount)
		c.nsBuilt.Store(true)
	}
	c.mu.Unlock()
	c.mu.RLock() // once built, the index is kept: still ready
}

// inNamespace calls fn with each cached key and object of namespace ns
// until it returns false. Under rlockNamespace.
func (c *Cache[T]) inNamespace(ns string, fn func(key string, r ref[T]) bool) {
	if idx, ok := c.indices[IndexNamespace]; ok {
		for key := range idx[ns] {
			if r, ok := c.items[key]; ok { // an IndexFunc that is not a pure function of its object can leave a key behind
				if !fn(key, r) {
					return
				}
			}
		}
		return
	}
	if c.nsCount[ns] == 0 {
		return
	}
	for key, r := range c.items { // all in ns: namespaceReady
		if !fn(key, r) {
			return
		}
	}
}

// Key returns the key the cache files obj under.
func (c *Cache[T]) Key(obj T) string { return c.keyFunc(obj) }

// Get returns the cached object with the same key as obj.
func (c *Cache[T]) Get(obj T) (T, bool) { return c.GetByKey(c.keyFunc(obj)) }

// GetByKey returns the cached object under key.
func (c *Cache[T]) GetByKey(key string) (T, bool) {
	c.mu.RLock()
	r, ok := c.items[key]
	c.mu.RUnlock()
	if !ok {
		return r.obj, false
	}
	return c.load(r)
}

// Select returns the cached objects in namespace ("" for every namespace)
// whose labels match sel (nil matches everything): client-go's
// lister.List(selector) and lister.Pods(ns).List(selector) in one.
func (c *Cache[T]) Select(namespace string, sel labels.Selector) []T {
	if c.codec == nil {
		return c.selectPlain(namespace, sel)
	}
	var refs []ref[T]
	if namespace == "" {
		c.mu.RLock()
		refs = make([]ref[T], 0, len(c.items))
		for _, r := range c.items {
			refs = append(refs, r)
		}
		c.mu.RUnlock()
	} else {
		c.rlockNamespace()
		c.inNamespace(namespace, func(_ string, r ref[T]) bool { refs = append(refs, r); return true })
		c.mu.RUnlock()
	}
	var out []T
	for _, r := range refs {
		obj, ok := c.load(r)
		if ok && (sel == nil || sel.Empty() || sel.Matches(labels.Set(obj.GetLabels()))) {
			out = append(out, obj)
		}
	}
	return out
}

// selectPlain is Select of a plain cache: its objects are matched under
// the read lock, without a copy of the candidates.
func (c *Cache[T]) selectPlain(namespace string, sel labels.Selector) []T {
	var out []T
	add := func(r ref[T]) {
		if sel == nil || sel.Empty() || sel.Matches(labels.Set(r.obj.GetLabels())) {
			out = append(out, r.obj)
		}
	}
	if namespace == "" {
		c.mu.RLock()
		defer c.mu.RUnlock()
		for _, r := range c.items {
			add(r)
		}
		return out
	}
	c.rlockNamespace()
	defer c.mu.RUnlock()
	c.inNamespace(namespace, func(_ string, r ref[T]) bool { add(r); return true })
	return out
}

// GetNamespaced returns the cached object with this namespace and name
// ("" namespace for a cluster-scoped object), whatever the KeyFunc.
func (c *Cache[T]) GetNamespaced(namespace, name string) (T, bool) {
	key := name
	if namespace != "" {
		key = namespace + "/" + name
	}
	var zero T
	is := func(obj T) bool { return obj.GetName() == name && obj.GetNamespace() == namespace }
	if c.defaultKey { // that key or none
		c.mu.RLock()
		r, ok := c.items[key]
		c.mu.RUnlock()
		if !ok {
			return zero, false
		}
		if obj, ok := c.load(r); ok && is(obj) {
			return obj, true
		}
		return zero, false
	}
	if c.codec != nil {
		// Another KeyFunc: that key first, else the namespace's objects
		// are decoded to find the name.
		c.mu.RLock()
		first, ok := c.items[key]
		c.mu.RUnlock()
		if obj, loaded := c.load(first); ok && loaded && is(obj) {
			return obj, true
		}
		var refs []ref[T]
		c.rlockNamespace()
		c.inNamespace(namespace, func(_ string, r ref[T]) bool { refs = append(refs, r); return true })
		c.mu.RUnlock()
		for _, r := range refs {
			if obj, ok := c.load(r); ok && is(obj) {
				return obj, true
			}
		}
		return zero, false
	}
	c.rlockNamespace()
	defer c.mu.RUnlock()
	if r, ok := c.items[key]; ok && is(r.obj) {
		return r.obj, true
	}
	var found T
	var ok bool
	c.inNamespace(namespace, func(_ string, r ref[T]) bool { // another KeyFunc
		found, ok = r.obj, r.obj.GetName() == name
		return !ok
	})
	if !ok {
		return zero, false
	}
	return found, true
}

// List returns a snapshot of all cached objects, in no particular order.
func (c *Cache[T]) List() []T {
	c.mu.RLock()
	if c.codec == nil {
		defer c.mu.RUnlock()
		out := make([]T, 0, len(c.items))
		for _, r := range c.items {
			out = append(out, r.obj)
		}
		return out
	}
	refs := make([]ref[T], 0, len(c.items))
	for _, r := range c.items {
		refs = append(refs, r)
	}
	c.mu.RUnlock()
	return c.loadAll(refs)
}

// ListKeys returns a snapshot of all cache keys, in no particular order.
func (c *Cache[T]) ListKeys() []string {
	c.mu.RLock()
	defer c.mu.RUnlock()
	out := make([]string, 0, len(c.items))
	for k := range c.items {
		out = append(out, k)
	}
	return out
}

// Len returns the number of cached objects.
func (c *Cache[T]) Len() int {
	c.mu.RLock()
	defer c.mu.RUnlock()
	return len(c.items)
}

// ByIndex returns the objects filed under value in the named index. It
// returns ErrUnknownIndex if no such index was configured.
func (c *Cache[T]) ByIndex(name, value string) ([]T, error) {
	if c.codec == nil {
		return c.byIndexPlain(name, value)
	}
	var refs []ref[T]
	if !c.eager(name) {
		c.rlockNamespace()
		refs = make([]ref[T], 0, c.nsCount[value])
		c.inNamespace(value, func(_ string, r ref[T]) bool { refs = append(refs, r); return true })
		c.mu.RUnlock()
		return c.loadAll(refs), nil
	}
	c.mu.RLock()
	if _, ok := c.indexers[name]; !ok {
		c.mu.RUnlock()
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	refs = make([]ref[T], 0, len(keys))
	for k := range keys {
		if r, ok := c.items[k]; ok { // an IndexFunc that is not a pure function of its object can leave a key behind
			refs = append(refs, r)
		}
	}
	c.mu.RUnlock()
	return c.loadAll(refs), nil
}

// byIndexPlain is ByIndex of a plain cache: the objects are collected
// under the read lock, without a copy of their refs.
func (c *Cache[T]) byIndexPlain(name, value string) ([]T, error) {
	if !c.eager(name) {
		c.rlockNamespace()
		defer c.mu.RUnlock()
		out := make([]T, 0, c.nsCount[value])
		c.inNamespace(value, func(_ string, r ref[T]) bool { out = append(out, r.obj); return true })
		return out, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	out := make([]T, 0, len(keys))
	for k := range keys {
		if r, ok := c.items[k]; ok { // an IndexFunc that is not a pure function of its object can leave a key behind
			out = append(out, r.obj)
		}
	}
	return out, nil
}

// IndexKeys returns the keys filed under value in the named index.
func (c *Cache[T]) IndexKeys(name, value string) ([]string, error) {
	if !c.eager(name) {
		c.rlockNamespace()
		defer c.mu.RUnlock()
		out := make([]string, 0, c.nsCount[value])
		c.inNamespace(value, func(key string, _ ref[T]) bool { out = append(out, key); return true })
		return out, nil
	}
	c.mu.RLock()
	defer c.mu.RUnlock()
	if _, ok := c.indexers[name]; !ok {
		return nil, fmt.Errorf("%w %q", ErrUnknownIndex, name)
	}
	keys := c.indices[name][value]
	out := make([]string, 0, len(keys))
	for k := range keys {
		out = append(out, k)
	}
	return out, nil
}

// indexChange is how one index's values for a key change with a write.
type indexChange struct {
	name     string
	old, new []string
}

// nsChange is how a key's namespace changes with a write (lazyNS): from
// old (if existed) to new (if present).
type nsChange struct {
	old, new         string
	existed, present bool
}

// changes computes, without the lock, how the eager indexes change when old
// (if existed) becomes obj (if present), and the namespaces. Writer only.
func (c *Cache[T]) changes(old ref[T], existed bool, obj ref[T], present bool) ([]indexChange, nsChange) {
	var out []indexChange
	ns := nsChange{existed: existed, present: present}
	if c.lazyNS {
		if existed {
			ns.old = old.namespace()
		}
		if present {
			ns.new = obj.namespace()
		}
	}
	for i, name := range c.order {
		var oldVals, newVals []string
		if existed {
			oldVals = c.values(old, i)
		}
		if present {
			newVals = c.values(obj, i)
		}
		if !equalStrings(oldVals, newVals) {
			out = append(out, indexChange{name, oldVals, newVals})
		}
	}
	return out, ns
}

// values returns r's values in the i-th eager index (order): kept beside
// a packed object, computed from a plain one. Under wmu.
func (c *Cache[T]) values(r ref[T], i int) []string {
	if r.p != nil {
		return r.p.extra().vals[i]
	}
	return c.indexers[c.order[i]](r.obj)
}

// reindex applies changes under the lock.
func (c *Cache[T]) reindex(key string, changes []indexChange, ns nsChange) {
	for _, ch := range changes {
		unindex(c.indices[ch.name], key, ch.old)
		index(c.indices[ch.name], key, ch.new)
	}
	if !c.lazyNS || (ns.existed == ns.present && ns.old == ns.new) {
		return
	}
	idx := c.indices[IndexNamespace] // nil until built
	if ns.existed {
		if c.nsCount[ns.old]--; c.nsCount[ns.old] == 0 {
			delete(c.nsCount, ns.old)
		}
		if idx != nil {
			unindexOne(idx, key, ns.old)
		}
	}
	if ns.present {
		c.nsCount[ns.new]++
		if idx != nil {
			indexOne(idx, key, ns.new)
		}
	}
}

// each calls fn for every object, under the read lock (a snapshot).
func (c *Cache[T]) each(fn func(key string, r ref[T])) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for key, r := range c.items {
		fn(key, r)
	}
}

// peek returns the object at key without the lock: for the writer alone,
// which is the only one to change items.
func (c *Cache[T]) peek(key string) (ref[T], bool) {
	r, ok := c.items[key]
	return r, ok
}

// peekAll calls fn for every object without the lock: for the writer
// alone, and fn must not change the cache.
func (c *Cache[T]) peekAll(fn func(key string, r ref[T])) {
	for key, r := range c.items {
		fn(key, r)
	}
}

// size is Len without the lock: for the writer alone.
func (c *Cache[T]) size() int { return len(c.items) }

// put stores r (from pack) under key and returns the object it replaced.
// Writer only.
func (c *Cache[T]) put(key string, r ref[T]) (old ref[T], existed bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	r = c.complete(r)
	old, existed = c.items[key] // the writer's own map: no lock to read
	changes, ns := c.changes(old, existed, r, true)
	c.mu.Lock()
	c.items[key] = r
	c.reindex(key, changes, ns)
	c.mu.Unlock()
	return old, existed
}

// remove deletes key and returns the object that was there. Writer only.
func (c *Cache[T]) remove(key string) (old ref[T], existed bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	old, existed = c.items[key]
	if !existed {
		return old, false
	}
	changes, ns := c.changes(old, true, old, false)
	c.mu.Lock()
	delete(c.items, key)
	c.reindex(key, changes, ns)
	c.mu.Unlock()
	return old, true
}

// swap makes items the whole content of the cache, atomically, and
// returns the content it replaced. The indexes are built before the lock
// is taken (the namespace index under it, if a reader has just built it
// for the old content). Writer only.
func (c *Cache[T]) swap(items map[string]ref[T]) (old map[string]ref[T]) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	indices := c.emptyIndices()
	for key, r := range items {
		if r.p != nil && len(r.p.extra().vals) != len(c.order) {
			r = c.complete(r)
			items[key] = r
		}
		for i, name := range c.order {
			index(indices[name], key, c.values(r, i))
		}
	}
	var counts map[string]int
	builtNS := false
	if c.lazyNS {
		counts = map[string]int{}
		for _, r := range items {
			counts[r.namespace()]++
		}
		if builtNS = c.nsBuilt.Load(); builtNS {
			indices[IndexNamespace] = namespaceIndexOf(items, counts)
		}
	}
	c.mu.Lock()
	if c.lazyNS && !builtNS && c.nsBuilt.Load() {
		indices[IndexNamespace] = namespaceIndexOf(items, counts)
	}
	old = c.items
	c.items, c.indices, c.nsCount = items, indices, counts
	c.mu.Unlock()
	return old
}

// namespaceIndexOf returns the namespace index of items, whose namespaces
// are counted in counts.
func namespaceIndexOf[T Object](items map[string]ref[T], counts map[string]int) map[string]keySet {
	idx := make(map[string]keySet, len(counts))
	for ns, n := range counts {
		idx[ns] = make(keySet, n)
	}
	for key, r := range items {
		idx[r.namespace()][key] = struct{}{}
	}
	return idx
}

func indexOne(idx map[string]keySet, key, value string) {
	set := idx[value]
	if set == nil {
		set = keySet{}
		idx[value] = set
	}
	set[key] = struct{}{}
}

func unindexOne(idx map[string]keySet, key, value string) {
	set := idx[value]
	delete(set, key)
	if len(set) == 0 {
		delete(idx, value)
	}
}

func index(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		set := idx[v]
		if set == nil {
			set = keySet{}
			idx[v] = set
		}
		set[key] = struct{}{}
	}
}

func unindex(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		set := idx[v]
		delete(set, key)
		if len(set) == 0 {
			delete(idx, v)
		}
	}
}

func equalStrings(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}
