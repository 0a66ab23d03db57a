// Package intern makes decoded Kubernetes objects share what repeats
// between them: short strings, whole labels and annotations maps, and
// containers' resource lists. It is used by one informer's loop goroutine;
// nothing in it is safe for concurrent use.
package intern

// Table remembers values by key in two generations of up to Generation
// entries each: an entry not used for two generations is forgotten, so what
// never repeats costs a bounded table, not an entry per object forever. A
// plain map lookup is several times cheaper than unique.Make, which must
// turn a weak pointer back into a strong one on every hit.
//
// The zero Table is empty and ready. It is not safe for concurrent use.
type Table[V any] struct {
	recent, old map[string]V
}

// Generation is the size of one generation of a Table.
const Generation = 4096

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
