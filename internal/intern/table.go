// Package intern makes decoded Kubernetes objects share what repeats
// between them: short strings, whole labels and annotations maps, and
// containers' resource lists. It is used by one informer's loop goroutine;
// nothing in it is safe for concurrent use.
package intern

import "hash/maphash"

// Table remembers values by key in two generations of up to Generation
// entries each: an entry not used for two generations is forgotten, so what
// never repeats costs a bounded table, not an entry per object forever. A
// plain map lookup is several times cheaper than unique.Make, which must
// turn a weak pointer back into a strong one on every hit.
//
// The zero Table is empty and ready. It is not safe for concurrent use.
type Table[V any] struct {
	recent, old map[string]V

	// seen holds fingerprints of keys missed once (Admit), by their hash.
	seen []uint32
	seed maphash.Seed
}

const (
	// Generation is the size of one generation of a Table.
	Generation = 4096

	// AdmitAll: a table with fewer entries remembers every key it misses;
	// a larger one only keys it has missed before (Admit).
	AdmitAll = 512
	// seenSlots is the number of fingerprints Admit keeps (32 KiB).
	seenSlots = 8192
)

// Get looks key up; string(key) in a map index does not allocate.
func (t *Table[V]) Get(key []byte) (V, bool) {
	if v, ok := t.recent[string(key)]; ok {
		return v, true
	}
	if v, ok := t.old[string(key)]; ok {
		t.Put(string(key), v)
		return v, true
	}
	var zero V
	return zero, false
}

// Put remembers v under key in the current generation, starting a new
// generation (and forgetting the oldest) when the current one is full.
func (t *Table[V]) Put(key string, v V) {
	if t.recent == nil || len(t.recent) >= Generation {
		// A table that has filled a generation will fill the next: make
		// it at its full size rather than grow it step by step (growing
		// cost a seventh of a JSON sync's CPU). A table that never fills
		// one stays small.
		size := 0
		if t.recent != nil {
			size = Generation
		}
		t.old, t.recent = t.recent, make(map[string]V, size)
	}
	t.recent[key] = v
}

// Len returns the number of entries remembered.
func (t *Table[V]) Len() int { return len(t.recent) + len(t.old) }

// Admit reports whether key, which Get has just missed, is worth a Put:
// whether it was missed before, recently. On objects that share little
// (every labels map its own, label values unique) most keys are seen once,
// and remembering each would cost the table's slot and, for a map, a copy
// of its key, for as long as two generations last: about 90 bytes an
// object at 20,000 ConfigMaps, with nothing shared in return. Admitted
// only on its second miss, a key that repeats costs one more copy of its
// value, once; a key seen once costs a fingerprint in a fixed array. A
// small table (fewer than AdmitAll entries) admits every key, without the
// array.
func (t *Table[V]) Admit(key []byte) bool {
	if t.Len() < AdmitAll {
		return true
	}
	t.initSeen()
	return t.admit(maphash.Bytes(t.seed, key))
}

// AdmitString is Admit for a string key.
func (t *Table[V]) AdmitString(key string) bool {
	if t.Len() < AdmitAll {
		return true
	}
	t.initSeen()
	return t.admit(maphash.String(t.seed, key))
}

func (t *Table[V]) initSeen() {
	if t.seen == nil {
		t.seen, t.seed = make([]uint32, seenSlots), maphash.MakeSeed()
	}
}

// admit checks and records a key's hash h: one fingerprint per slot, the
// newest wins. A collision only admits a key early or late: what is shared
// is never wrong, only more or less.
func (t *Table[V]) admit(h uint64) bool {
	i, fp := h%seenSlots, uint32(h>>32)|1 // never 0, the empty slot
	if t.seen[i] == fp {
		t.seen[i] = 0
		return true
	}
	t.seen[i] = fp
	return false
}
