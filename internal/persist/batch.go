package persist

import kruntime "k8s.io/apimachinery/pkg/runtime"

// Batch begins a change of many objects that reaches the file whole, or
// not at all (a re-list): no commit sees part of it. Until End, the
// Persister is the caller's alone; End must follow at once.
func (p *Persister[T]) Batch() *Batch[T] {
	p.mu.Lock()
	return &Batch[T]{p: p}
}

// Batch is one change of many objects; see Persister.Batch.
type Batch[T kruntime.Object] struct{ p *Persister[T] }

// Put records obj's new state.
func (b *Batch[T]) Put(key string, obj T) { b.p.pendLocked(key, change[T]{obj: obj}) }

// PutEncoded records an object's new state as the file holds it (see
// RecordEncoded).
func (b *Batch[T]) PutEncoded(key string, data []byte) { b.p.pendLocked(key, change[T]{data: data}) }

// Delete records that key's object (last state obj) is gone.
func (b *Batch[T]) Delete(key string, obj T) { b.p.pendLocked(key, change[T]{obj: obj, deleted: true}) }

// Lost notes that an object cannot be written (see RecordLost).
func (b *Batch[T]) Lost(key string, err error) { b.p.pendLocked(key, change[T]{lost: err}) }

// Reset makes the batch replace the whole file: what it puts is all the
// next commit holds (for a file that no longer holds the last commit).
func (b *Batch[T]) Reset() {
	b.p.reset = true
	clear(b.p.pending)
	b.p.dirty = true
}

// End records the resourceVersion the cache is at with the whole change,
// and ends the batch.
func (b *Batch[T]) End(rv string) {
	b.p.advanceLocked(rv)
	b.p.mu.Unlock()
	b.p = nil // a second End panics here, not in the mutex
}

// pendLocked notes c as key's change for the next commit; p.mu is held.
func (p *Persister[T]) pendLocked(key string, c change[T]) {
	p.pending[key] = c
	p.dirty = true
}
