package store

import (
	"fmt"

	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/squash"
)

// A compact cache and its state file (Options.StateDir): the file holds
// each object as the cache does, its squash entry, and the dictionaries
// beside them (persist.Persister.SetDicts); a restart takes both back.

// packEncoded packs the encoding of an object under key, as the state
// file holds it, without decoding it where it can: protobuf, keyed by
// MetaNamespaceKey, no index but the namespace one. Otherwise the object
// is decoded to check its key and compute its index values.
func (k *packer[T]) packEncoded(c *Cache[T], key string, data, entry []byte) (Ref[T], error) {
	if k.meta != nil && c.defaultKey {
		if m, ok := k.meta(data); ok {
			if got := metaKey(m.Namespace, m.Name); got != key {
				return Ref[T]{}, fmt.Errorf("it has key %q", got)
			}
			return k.packMeta(c, data, m, entry)
		}
	}
	obj, err := k.decode(data)
	if err != nil {
		return Ref[T]{}, err
	}
	if got := c.keyFunc(obj); got != key {
		return Ref[T]{}, fmt.Errorf("it has key %q", got)
	}
	return k.pack(c, obj, data, entry)
}

// open opens the state file (persist's OpenHeld).
func (k *packer[T]) open(_ *Cache[T], s *persist.Persister[T], load bool) (string, bool) {
	if k.dictGen != 0 {
		// s may be another file than the one told last (a wider
		// projection's, the root's loop.adopt): it is told them again.
		k.toldGen = 0
	}
	return s.OpenHeld(load)
}

// restore loads the state file's objects as the file holds them,
// decoding only those it must (packEncoded), and takes its dictionary
// (adopt): an entry compressed against it is held as it is.
func (k *packer[T]) restore(c *Cache[T], s *persist.Persister[T], _ func(key string, obj T) error, put func(key string, r Ref[T])) bool {
	return s.LoadHeldEncoded(k.adopt, func(e persist.Entry) error {
		r, err := k.packEncoded(c, e.Key, e.Data, k.reusable(e))
		if err == nil {
			put(e.Key, r)
		}
		return err
	})
}

// record notes r in the state file as the cache holds it: its squash
// entry (telling the file the dictionaries first, if they changed), or
// without squeeze its encoding; for an object the cache holds as it
// came, its encoding.
func (k *packer[T]) record(s *persist.Persister[T], key string, r Ref[T], rv string) {
	switch {
	case r.p == nil:
		plainHolding[T]{}.record(s, key, r, rv)
	case !k.squeeze:
		s.RecordEncoded(key, r.p.data(), rv)
	default:
		k.tell(s.SetDicts)
		s.RecordEntry(key, r.p.data(), rv)
	}
}

func (k *packer[T]) put(b *persist.Batch[T], key string, r Ref[T]) {
	switch {
	case r.p == nil:
		plainHolding[T]{}.put(b, key, r)
	case !k.squeeze:
		b.PutEncoded(key, r.p.data())
	default:
		k.tell(b.SetDicts)
		b.PutEntry(key, r.p.data())
	}
}

// The state file keeps the cache's entries as they are, and the
// dictionaries beside them (persist.Persister.SetDicts): it is told them
// before the first entry it is given after they change.

// dicts returns the dictionaries the cache's entries may be compressed
// against: dict, then the retired ones.
func (k *packer[T]) dicts() []*squash.Dict {
	var ds []*squash.Dict
	if d := k.dict.Load(); d != nil {
		ds = append(ds, d)
	}
	if old := k.retired.Load(); old != nil {
		ds = append(ds, *old...)
	}
	return ds
}

// tell gives set (the state file's SetDicts) the dictionaries, if they
// changed since it was last given them. The writer's alone.
func (k *packer[T]) tell(set func([]*squash.Dict)) {
	if k.toldGen != k.dictGen {
		set(k.dicts())
		k.toldGen = k.dictGen
	}
}

// adopt takes the state file's dictionary (ds, the current first), for a
// cache that has none yet: its entries are then held as the file holds
// them (reusable). The writer's alone.
func (k *packer[T]) adopt(ds []*squash.Dict) {
	if !k.squeeze || len(ds) == 0 || k.dict.Load() != nil || len(k.samples) > 0 {
		return
	}
	k.dict.Store(ds[0])
	k.noDict = false
	k.dictGen++
}

// reusable returns the entry of the state file's e to hold as it is: one
// compressed against the cache's dictionary, or held as it came while
// the cache has none; nil if e's object must be squeezed again (noting
// that the file must then have it again: reload).
func (k *packer[T]) reusable(e persist.Entry) []byte {
	if !k.squeeze || e.Squashed == nil {
		return nil
	}
	d := k.dict.Load()
	switch {
	case e.Dict == nil && d == nil:
		return e.Squashed
	case e.Dict != nil && d != nil && e.Dict.ID() == d.ID():
		return e.Squashed
	case e.Dict != nil:
		k.reload = true
	}
	return nil
}
