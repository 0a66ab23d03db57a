package persist

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/kinformer/kinformer/internal/squash"
)

// A compact cache's objects are written as it holds them: squash entries,
// compressed against its dictionary (RecordEntry, Batch.PutEntry), which
// the file keeps beside them (SetDicts; snapshot.Batch.Dicts). The file
// then takes what the cache takes, a restore need not compress each
// object again, and a write need not decompress it. A file's entries
// decode for any cache that opens it: Open decompresses them for a cache
// of objects, OpenEncoded gives a compact cache both forms.

// entryTag starts a value that is a squash entry rather than an object's
// encoding: neither protobuf ("k8s\x00") nor JSON starts with it.
const entryTag = 0xf5

// dictsKey names the dictionaries' value where an entry's key would be
// (its encryption's additional data): no object's key holds a NUL.
const dictsKey = "\x00dicts"

// maxDicts bounds how many dictionaries a file's value may name: a
// damaged one never makes Open load more.
const maxDicts = 16

// Entry is an object of the state file as OpenEncoded gives it.
type Entry struct {
	Key string
	// Data is the object's encoding, a copy of the caller's.
	Data []byte
	// Squashed is the squash entry the file holds the object as (the
	// caller's), compressed against Dict; nil if the file holds its
	// encoding (written by a cache of objects, or before there was a
	// dictionary). Dict is nil for an entry held as it came.
	Squashed []byte
	Dict     *squash.Dict
}

// SetDicts makes ds the dictionaries the file keeps beside the entries
// recorded from now on (the current first), written with the next
// commit: every entry the file holds must decode with one of them.
func (p *Persister[T]) SetDicts(ds []*squash.Dict) {
	p.mu.Lock()
	p.setDictsLocked(ds)
	p.mu.Unlock()
}

// SetDicts is Persister.SetDicts within a batch.
func (b *Batch[T]) SetDicts(ds []*squash.Dict) { b.p.setDictsLocked(ds) }

func (p *Persister[T]) setDictsLocked(ds []*squash.Dict) {
	p.dicts, p.dictsDirty, p.dirty = ds, true, true
}

// RecordEntry notes one object's new state as the cache holds it, a
// squash entry (which it must never change) that decodes with the
// dictionaries last given to SetDicts, and the resourceVersion the cache
// is at with it.
func (p *Persister[T]) RecordEntry(key string, entry []byte, rv string) {
	p.record(key, change[T]{data: entry, entry: true}, rv)
}

// PutEntry records an object's new state as a squash entry (see
// RecordEntry).
func (b *Batch[T]) PutEntry(key string, entry []byte) {
	b.p.pendLocked(key, change[T]{data: entry, entry: true})
}

// value returns what the file holds for c: its encoding, or its entry
// after entryTag.
func (c change[T]) value() []byte {
	if !c.entry {
		return c.data
	}
	v := make([]byte, 0, 1+len(c.data))
	return append(append(v, entryTag), c.data...)
}

// encodeDicts serialises ds: their count, then each one's length and
// bytes (squash.Dict.Bytes, checksummed), as uvarints.
func encodeDicts(ds []*squash.Dict) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ds)))
	for _, d := range ds {
		db := d.Bytes()
		b = binary.AppendUvarint(b, uint64(len(db)))
		b = append(b, db...)
	}
	return b
}

// decodeDicts reads what encodeDicts wrote.
func decodeDicts(b []byte) ([]*squash.Dict, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > maxDicts {
		return nil, errors.New("dictionaries: a damaged count")
	}
	b = b[k:]
	ds := make([]*squash.Dict, 0, n)
	for i := range n {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("dictionary %d: truncated", i)
		}
		d, err := squash.LoadDict(b[k : k+int(l)])
		if err != nil {
			return nil, fmt.Errorf("dictionary %d: %w", i, err)
		}
		ds = append(ds, d)
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, errors.New("dictionaries: bytes after the last")
	}
	return ds, nil
}

// unsquash returns the object's encoding that v, a value of the file,
// holds: v itself, or for a squash entry its object, decompressed with
// the one of dicts it was compressed against (d; nil for an entry held
// as it came), and the entry.
func unsquash(dicts []*squash.Dict, v []byte) (data, entry []byte, d *squash.Dict, err error) {
	if len(v) == 0 || v[0] != entryTag {
		return v, nil, nil, nil
	}
	entry = v[1:]
	if b, ok := squash.Raw(entry); ok {
		return b, entry, nil, nil
	}
	for _, d := range dicts {
		if b, err := d.Decode(nil, entry); err == nil {
			return b, entry, d, nil
		}
	}
	if len(dicts) == 0 {
		return nil, nil, nil, errors.New("a compressed entry, and the file keeps no dictionary")
	}
	return nil, nil, nil, fmt.Errorf("a compressed entry that decodes with none of the file's %d dictionaries: %w", len(dicts), squash.ErrCorrupt)
}

// loadDicts reads the file's dictionaries, decrypting them if it is
// sealed; old says they are sealed with a key other than the first.
func (p *Persister[T]) loadDicts(raw []byte) (ds []*squash.Dict, old bool, err error) {
	if raw == nil {
		return nil, false, nil
	}
	if p.sealer != nil {
		if raw, old, err = p.sealer.open(p.sealed, dictsKey, raw); err != nil {
			return nil, false, fmt.Errorf("dictionaries: %w", err)
		}
	}
	ds, err = decodeDicts(raw)
	return ds, old, err
}

// dictsValue is the file's value of ds: sealed if the file is.
func (p *Persister[T]) dictsValue(ds []*squash.Dict) ([]byte, error) {
	b := encodeDicts(ds)
	if p.sealer == nil {
		return b, nil
	}
	return p.sealer.seal(p.sealed, dictsKey, b)
}
