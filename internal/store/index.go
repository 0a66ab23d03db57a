package store

import (
	"fmt"
	"slices"
)

// The cache's index engine: the items, the indexes and the namespace
// counts, and the writer's put, remove and swap, which keep them in step.
// It does not care how an object is held (a ref), beyond the three things
// it reads of one, which it asks the holding for (holding.go): its
// namespace, its index values and, for AddIndexers, the object itself.

// Hold readies what arrived (prepared, unless undecoded) for Put or Swap,
// as the holding keeps it. The writer's alone.
func (c *Cache[T]) Hold(a Arrival[T]) (Ref[T], error) { return c.h.hold(c, a) }

// Load returns the object r holds: itself, or decoded anew (false if its
// bytes do not decode). An object held ready costs no call.
func (c *Cache[T]) Load(r Ref[T]) (T, bool) {
	if obj, ok := r.ready(); ok {
		return obj, true
	}
	return c.h.load(r)
}

// AddIndexers adds indexes, built from the cached objects, at any time.
// It holds wmu, so the writer waits; the new indexes are computed without
// mu (readers go on, and an IndexFunc may read the cache) and published
// with the new indexers under it, so a reader finds an index complete or
// not at all.
func (c *Cache[T]) AddIndexers(indexers map[string]func(T) []string) error {
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
	idx := make(map[string]func(T) []string, len(c.indexers)+len(indexers))
	for name, f := range c.indexers {
		idx[name] = f
	}
	names := make([]string, 0, len(indexers))
	for name, f := range indexers {
		idx[name] = f
		names = append(names, name)
	}
	slices.Sort(names)
	// each object's values for the new indexes, from the object loaded
	// once (decoded, in a compact cache); a holding may keep them beside
	// it (withValues).
	built := make(map[string]map[string]keySet, len(indexers))
	for _, name := range names {
		built[name] = map[string]keySet{}
	}
	rekept := map[string]Ref[T]{}
	for key, r := range c.content().All() { // only the writer changes items, and it waits on wmu
		obj, ok := c.Load(r)
		vals := make([][]string, len(names)) // none, for bytes that do not decode
		for i, name := range names {
			if !ok {
				break
			}
			vals[i] = indexers[name](obj)
			index(built[name], key, vals[i])
		}
		if r, ok := c.h.withValues(r, vals); ok {
			rekept[key] = r
		}
	}
	c.mu.Lock()
	for name, m := range built {
		c.indices[name] = m
	}
	if len(rekept) > 0 {
		// A new content, not the one the writer may be reading without
		// the lock (Peek), or diffing a re-list against after a Swap
		// (writer.replace ranges over the items it gave).
		next := c.content().clone()
		for key, r := range rekept {
			next.Set(key, r)
		}
		c.items.Store(next)
	}
	c.indexers = idx
	c.order = append(slices.Clip(c.order), names...)
	c.mu.Unlock()
	return nil
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
		c.indices[IndexNamespace] = c.namespaceIndexOf(c.content(), c.nsCount)
		c.nsBuilt.Store(true)
	}
	c.mu.Unlock()
	c.mu.RLock() // once built, the index is kept: still ready
}

// namespaceKeys says where the objects of namespace ns are, under
// rlockNamespace: under keys in the namespace index, or, before it is
// built, in every item (all: they are all in one namespace) or none.
func (c *Cache[T]) namespaceKeys(ns string) (keys keySet, all bool) {
	if idx, ok := c.indices[IndexNamespace]; ok {
		return idx[ns], false
	}
	return nil, c.nsCount[ns] > 0
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
func (c *Cache[T]) changes(key string, old Ref[T], existed bool, obj Ref[T], present bool) ([]indexChange, nsChange) {
	var out []indexChange
	ns := nsChange{existed: existed, present: present}
	if c.lazyNS {
		if existed {
			ns.old = old.namespaceAt(key, c.defaultKey)
		}
		if present {
			ns.new = obj.namespaceAt(key, c.defaultKey)
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

// values returns r's values in the i-th eager index (order), as the
// holding has them. Under wmu.
func (c *Cache[T]) values(r Ref[T], i int) []string { return c.h.values(c, r, i) }

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

// Each calls fn for every object, under the read lock (a snapshot).
func (c *Cache[T]) Each(fn func(key string, r Ref[T])) {
	c.mu.RLock()
	defer c.mu.RUnlock()
	for key, r := range c.content().All() {
		fn(key, r)
	}
}

// Peek returns the object at key without the lock: for the writer alone,
// which is the only one to change items.
func (c *Cache[T]) Peek(key string) (Ref[T], bool) {
	return c.content().Get(key)
}

// PeekAll calls fn for every object without the lock: for the writer
// alone, and fn must not change the cache.
func (c *Cache[T]) PeekAll(fn func(key string, r Ref[T])) {
	for key, r := range c.content().All() {
		fn(key, r)
	}
}

// Size is Len without the lock: for the writer alone.
func (c *Cache[T]) Size() int { return c.content().Len() }

// Put stores r (from Hold) under key and returns the object it replaced.
// Writer only.
func (c *Cache[T]) Put(key string, r Ref[T]) (old Ref[T], existed bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	r, _ = c.h.complete(c, r)
	old, existed = c.content().Get(key) // the writer's own map: no lock to read
	changes, ns := c.changes(key, old, existed, r, true)
	c.mu.Lock()
	c.content().Set(key, r)
	c.reindex(key, changes, ns)
	c.mu.Unlock()
	return old, existed
}

// Remove deletes key and returns the object that was there. Writer only.
func (c *Cache[T]) Remove(key string) (old Ref[T], existed bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	old, existed = c.content().Get(key)
	if !existed {
		return old, false
	}
	changes, ns := c.changes(key, old, true, old, false)
	c.mu.Lock()
	c.content().Delete(key)
	c.reindex(key, changes, ns)
	c.mu.Unlock()
	return old, true
}

// Swap makes items the whole content of the cache, atomically, and
// returns the content it replaced, and whether the state file must have
// every object again (holding.fit). The indexes are built before the lock
// is taken (the namespace index under it, if a reader has just built it
// for the old content). Writer only.
func (c *Cache[T]) Swap(items *Items[T]) (old *Items[T], rewrite bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if c.straight && items.objs == nil {
		items.objs = map[string]T{} // the writer's Puts go here, and the caller's items see them
	} else if !c.straight && items.packs == nil {
		items.packs = map[string]*packed{}
	}
	rewrite = c.h.fit(items)
	indices := c.emptyIndices()
	for key, r := range items.All() {
		if done, changed := c.h.complete(c, r); changed {
			r = done
			items.Set(key, r) // in place: the key is there
		}
		for i, name := range c.order {
			index(indices[name], key, c.values(r, i))
		}
	}
	var counts map[string]int
	builtNS := false
	if c.lazyNS {
		counts = map[string]int{}
		for key, r := range items.All() {
			counts[r.namespaceAt(key, c.defaultKey)]++
		}
		if builtNS = c.nsBuilt.Load(); builtNS {
			indices[IndexNamespace] = c.namespaceIndexOf(items, counts)
		}
	}
	c.mu.Lock()
	if c.lazyNS && !builtNS && c.nsBuilt.Load() {
		indices[IndexNamespace] = c.namespaceIndexOf(items, counts)
	}
	was := c.content()
	c.items.Store(items)
	c.indices, c.nsCount = indices, counts
	c.mu.Unlock()
	return was, rewrite
}

// Refit runs the holding's fit (Swap's) over items, the content a
// pipelined list put in the cache object by object (the root's list.go),
// and puts the entries it changed in their place: the same objects, held anew
// (compressed against a dictionary made after they came). It says
// whether the state file must have every object again. Writer only.
func (c *Cache[T]) Refit(items *Items[T]) (rewrite bool) {
	c.wmu.Lock()
	defer c.wmu.Unlock()
	if !c.h.fit(items) {
		return false
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for key, r := range items.All() {
		if cur, ok := c.content().Get(key); ok && cur.p != r.p {
			c.content().Set(key, r) // the same object, its index values and namespace as before
		}
	}
	return true
}

// namespaceIndexOf returns the namespace index of items, whose namespaces
// are counted in counts.
func (c *Cache[T]) namespaceIndexOf(items *Items[T], counts map[string]int) map[string]keySet {
	idx := make(map[string]keySet, len(counts))
	for ns, n := range counts {
		idx[ns] = newKeys(n)
	}
	for key, r := range items.All() {
		idx[r.namespaceAt(key, c.defaultKey)].add(key)
	}
	return idx
}

func indexOne(idx map[string]keySet, key, value string) {
	set := idx[value]
	if set == nil {
		set = newKeys(1)
		idx[value] = set
	}
	set.add(key)
}

func unindexOne(idx map[string]keySet, key, value string) {
	set := idx[value]
	set.remove(key)
	if set.len() == 0 {
		delete(idx, value)
	}
}

func index(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		indexOne(idx, key, v)
	}
}

func unindex(idx map[string]keySet, key string, values []string) {
	for _, v := range values {
		unindexOne(idx, key, v)
	}
}

// maxFew is the most keys a keySet keeps in its slice: adding and
// removing one compares it with each.
const maxFew = 32

// newKeys returns an empty set for about n keys.
func newKeys(n int) *keys {
	if n > maxFew {
		return &keys{many: make(map[string]struct{}, n)}
	}
	return &keys{few: make([]string, 0, max(n, 1))}
}

// add files key (once).
func (s *keys) add(key string) {
	if s.many != nil {
		s.many[key] = struct{}{}
		return
	}
	if slices.Contains(s.few, key) {
		return
	}
	if len(s.few) == maxFew {
		s.many = make(map[string]struct{}, 2*maxFew)
		for _, k := range s.few {
			s.many[k] = struct{}{}
		}
		s.many[key] = struct{}{}
		s.few = nil
		return
	}
	if len(s.few) == cap(s.few) {
		// Grown by half, not doubled as append does: a set's slice is
		// most of what an index costs an object.
		grown := make([]string, len(s.few), min(len(s.few)+len(s.few)/2+1, maxFew))
		copy(grown, s.few)
		s.few = grown
	}
	s.few = append(s.few, key)
}

// remove unfiles key, if filed.
func (s *keys) remove(key string) {
	switch {
	case s == nil:
	case s.many != nil:
		delete(s.many, key)
	default:
		if i := slices.Index(s.few, key); i >= 0 {
			last := len(s.few) - 1
			s.few[i], s.few[last] = s.few[last], ""
			s.few = s.few[:last]
		}
	}
}

// has reports whether key is filed.
func (s *keys) has(key string) bool {
	switch {
	case s == nil:
		return false
	case s.many != nil:
		_, ok := s.many[key]
		return ok
	}
	return slices.Contains(s.few, key)
}

// len is how many keys are filed.
func (s *keys) len() int {
	switch {
	case s == nil:
		return 0
	case s.many != nil:
		return len(s.many)
	}
	return len(s.few)
}

// each calls fn for every key filed.
func (s *keys) each(fn func(key string)) {
	switch {
	case s == nil:
	case s.many != nil:
		for k := range s.many {
			fn(k)
		}
	default:
		for _, k := range s.few {
			fn(k)
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
