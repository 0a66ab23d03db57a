package intern

import (
	"encoding/binary"
	"slices"
	"sync/atomic"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// Sharer makes objects share one copy of what repeats between them.
// Decoding gives every object its own copy of every string and map, but
// across a cluster most short strings repeat — the namespace, label keys
// and values, annotation keys, owner kinds, the keys of a ConfigMap's data,
// a pod's image, container and volume names — and so do whole label and
// annotation maps (the pods of a ReplicaSet, the objects of one Helm
// release). Each string copy costs a heap allocation of 16–48 bytes, each
// small map about 350 bytes before its strings. Values are unchanged and
// cached objects are read-only, so sharing is invisible to readers.
//
// Maps are found in one table by either of two keys: their content (Map,
// after decoding and after the informer's Transform), or their exact wire
// bytes (WireMap and RememberWireMap, for a decoder that skips decoding a
// map it has seen). The two kinds of keys never collide: a content key
// starts with a zero byte, and wire bytes start with a protobuf tag, which
// is never zero (field numbers start at 1). Wire bytes are thus their own
// key, looked up without a copy.
//
// The zero Sharer is ready. It is not safe for concurrent use.
type Sharer struct {
	strs Table[string]
	maps Table[map[string]string]
	res  Table[corev1.ResourceList] // containers' requests and limits
	keys []string                   // scratch: sorted keys
	buf  []byte                     // scratch: a lookup key

	// Stale, if set, is raised from any goroutine when a map handed out
	// may have been changed in place (the cache's mutation detector found
	// an object changed): the next lookup forgets every map and resource
	// list (ForgetMaps) and lowers it, so that a changed map is not given
	// to the objects decoded from then on. nil: never.
	Stale *atomic.Bool
}

const (
	// MaxString: longer strings are rarely shared.
	MaxString = 64
	// MaxMapBytes: larger maps (last-applied-configuration) are rarely
	// shared.
	MaxMapBytes = 1024
	// MaxMapEntries: maps with more entries are not shared.
	MaxMapEntries = 32

	contentKey = 0 // the first byte of a content key
)

// String returns a string equal to s that an earlier object holds, or s,
// remembered for the next objects (once it has repeated: Table.Admit). s
// must be a copy of its own (as decoders make), never a slice of a reused
// buffer.
func (sh *Sharer) String(s string) string {
	if s == "" || len(s) > MaxString {
		return s
	}
	if v, ok := sh.strs.recent[s]; ok {
		return v
	}
	if v, ok := sh.strs.old[s]; ok {
		sh.strs.Put(s, v)
		return v
	}
	if sh.strs.AdmitString(s) {
		sh.strs.Put(s, s)
	}
	return s
}

// ForgetMaps forgets every map and resource list remembered, so that the
// next objects share none with earlier ones: for after one of them was
// found changed in place (see Stale), which a shared map would otherwise
// pass on to every object decoded with it from then on. Strings, which
// cannot change, are kept.
func (sh *Sharer) ForgetMaps() {
	sh.maps = Table[map[string]string]{}
	sh.res = Table[corev1.ResourceList]{}
}

// checkStale forgets the maps if Stale was raised.
func (sh *Sharer) checkStale() {
	if sh.Stale != nil && sh.Stale.Load() && sh.Stale.CompareAndSwap(true, false) {
		sh.ForgetMaps()
	}
}

// Strings returns how many strings are remembered (for tests).
func (sh *Sharer) Strings() int { return sh.strs.Len() }

// Maps returns how many maps are remembered (for tests).
func (sh *Sharer) Maps() int { return sh.maps.Len() }

// internMap interns the keys, and the values if values is set, of m in
// place. Assigning to an existing key stores the given key string too.
func (sh *Sharer) internMap(m map[string]string, values bool) {
	for k, v := range m {
		if values {
			v = sh.String(v)
		}
		m[sh.String(k)] = v
	}
}

func internKeys[V any](sh *Sharer, m map[string]V) {
	for k, v := range m {
		m[sh.String(k)] = v
	}
}

// Map returns a map equal to m that an earlier object already holds, or m
// itself, remembered for the next objects (once it has repeated). m must
// not be modified after.
func (sh *Sharer) Map(m map[string]string) map[string]string {
	if len(m) == 0 || len(m) > MaxMapEntries {
		return m
	}
	sh.checkStale()
	keys, size := sh.keys[:0], 0
	for k, v := range m {
		keys = append(keys, k)
		size += len(k) + len(v)
	}
	if size > MaxMapBytes {
		return m
	}
	slices.Sort(keys)
	buf := append(sh.buf[:0], contentKey)
	for _, k := range keys {
		v := m[k]
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
	}
	clear(keys) // do not pin the strings
	sh.keys, sh.buf = keys, buf
	if shared, ok := sh.maps.Get(buf); ok {
		return shared
	}
	if sh.maps.Admit(buf) {
		sh.maps.Put(string(buf), m)
	}
	return m
}

// Shareable reports whether a map whose wire bytes are wire is worth
// sharing by them.
func Shareable(wire []byte) bool { return len(wire) > 0 && len(wire) <= MaxMapBytes }

// WireMap returns the map an earlier object decoded from exactly these
// wire bytes, if one is remembered.
func (sh *Sharer) WireMap(wire []byte) (map[string]string, bool) {
	if !Shareable(wire) || wire[0] == contentKey {
		return nil, false
	}
	sh.checkStale()
	return sh.maps.Get(wire)
}

// RememberWireMap interns the keys of m (and its values if values) and
// remembers m as the map of these wire bytes, for the next objects (once
// they have repeated). m must not be modified after.
func (sh *Sharer) RememberWireMap(wire []byte, m map[string]string, values bool) {
	if m == nil || !Shareable(wire) || wire[0] == contentKey {
		return
	}
	sh.internMap(m, values)
	if sh.maps.Admit(wire) {
		sh.maps.Put(string(wire), m)
	}
}

// ObjectMeta returns the ObjectMeta of a typed object, or nil (for
// Unstructured, whose accessors return copies).
func ObjectMeta(obj any) *metav1.ObjectMeta {
	if a, ok := obj.(metav1.ObjectMetaAccessor); ok {
		if m, ok := a.GetObjectMeta().(*metav1.ObjectMeta); ok {
			return m
		}
	}
	return nil
}

// Object makes a new object, that nothing else references yet, share
// what it can: interned strings, and the labels and annotations maps of
// earlier objects with equal ones.
func (sh *Sharer) Object(obj any) {
	sh.strings(obj, false)
	if m := ObjectMeta(obj); m != nil {
		m.Labels = sh.Map(m.Labels)
		m.Annotations = sh.Map(m.Annotations)
	}
}

// ObjectStrings interns the strings of a freshly decoded object whose
// labels and annotations maps are already shared (WireMap,
// RememberWireMap), hence left alone.
func (sh *Sharer) ObjectStrings(obj any) { sh.strings(obj, true) }

// ResourceList returns a resource list equal to m that an earlier container
// holds, or m itself, remembered for the next ones (once it has repeated). A list of a few
// quantities costs over 600 bytes, and the containers of one workload all
// ask for the same. Quantities are equal when their canonical strings and
// formats are: the same value, shown the same way.
func (sh *Sharer) ResourceList(m corev1.ResourceList) corev1.ResourceList {
	if len(m) == 0 || len(m) > MaxMapEntries {
		return m
	}
	sh.checkStale()
	keys := sh.keys[:0]
	for k := range m {
		keys = append(keys, string(k))
	}
	slices.Sort(keys)
	buf := sh.buf[:0]
	for _, k := range keys {
		q := m[corev1.ResourceName(k)] // a copy: String may cache into it
		v := q.String()
		buf = binary.AppendUvarint(buf, uint64(len(k)))
		buf = append(buf, k...)
		buf = binary.AppendUvarint(buf, uint64(len(v)))
		buf = append(buf, v...)
		buf = append(buf, q.Format...)
		buf = append(buf, 0)
	}
	clear(keys)
	sh.keys, sh.buf = keys, buf
	if shared, ok := sh.res.Get(buf); ok {
		return shared
	}
	if sh.res.Admit(buf) {
		sh.res.Put(string(buf), m)
	}
	return m
}
