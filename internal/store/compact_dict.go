package store

import (
	"bytes"
	"slices"

	"github.com/kinformer/kinformer/internal/squash"
)

// A compact cache's dictionary (Options.Compact; internal/squash): made
// of the first objects the cache holds, measured at the first swap after,
// and made again when a re-list finds the objects no longer fit it. Only
// the writer compresses; readers decompress on any goroutine.

// squeezed returns data, the bytes of the object named name
// (namespace/name), as the cache holds them: compressed against the
// dictionary, or wrapped as they came while there is none (squash.Wrap);
// data itself without squeeze. The entry is a slice of its own length,
// sharing nothing with data. The writer's alone.
func (k *packer[T]) squeezed(name string, data []byte) []byte {
	if !k.squeeze {
		return data
	}
	d := k.dict.Load()
	if d == nil && !k.noDict {
		k.sample(name, data)
		d = k.dict.Load()
	}
	if d == nil {
		return squash.Wrap(make([]byte, 0, len(data)+1), data)
	}
	k.scratch = d.Encode(k.scratch[:0], data)
	return bytes.Clone(k.scratch)
}

// sample keeps a copy of data for the dictionary, if it is the first of
// its object, and makes the dictionary once there are DictSamples
// objects' samples, or MaxDictLen bytes of them. An informer of fewer
// objects never pays for one (its samples, up to 64 KiB, and s2's 32 KiB
// table once it compresses).
func (k *packer[T]) sample(name string, data []byte) {
	if slices.Contains(k.sampled, name) {
		return
	}
	k.sampled = append(k.sampled, name)
	data = data[:min(len(data), squash.MaxDictLen-k.sampledBytes)]
	k.samples = append(k.samples, bytes.Clone(data))
	k.sampledBytes += len(data)
	if len(k.samples) < squash.DictSamples && k.sampledBytes < squash.MaxDictLen {
		return
	}
	d, err := squash.NewDict(k.samples)
	k.samples, k.sampled = nil, nil
	if err != nil {
		k.noDict = true // too few bytes to be worth one: kept as they come
		return
	}
	k.dict.Store(d)
	k.dictGen++
}

// plain returns the bytes of p as they came: decompressed, or without a
// copy if p holds them so. Any goroutine.
func (k *packer[T]) plain(p *packed) ([]byte, error) { return k.plainInto(nil, p) }

// plainInto is plain, decompressing into dst's room if it must.
func (k *packer[T]) plainInto(dst []byte, p *packed) ([]byte, error) {
	if !k.squeeze {
		return p.data(), nil
	}
	if b, ok := squash.Raw(p.data()); ok {
		return b, nil
	}
	d := k.dict.Load()
	if d == nil {
		return nil, squash.ErrCorrupt // compressed, and no dictionary: never made here
	}
	b, err := d.Decode(dst, p.data())
	if err != nil {
		// An entry of a dictionary made before (an event queued before
		// a re-list made it again): its checksum tells which.
		if old := k.retired.Load(); old != nil {
			for _, d := range *old {
				if b, err2 := d.Decode(dst, p.data()); err2 == nil {
					return b, nil
				}
			}
		}
	}
	return b, err
}

// maxPooledBuf is the largest buffer a read gives back to bufs: a rare
// large object's is left to the garbage collector.
const maxPooledBuf = 64 << 10

// maxRetiredDicts is how many dictionaries made before the current one a
// compact cache keeps to decode the entries of events queued before: an
// event older than that many re-lists that each made the dictionary
// again is an Error naming its key.
const maxRetiredDicts = 4

// remakeMin is how much a re-list must hold (its objects' bytes) for fit
// to judge the dictionary: fewer are no measure.
const remakeMin = 64 << 10

// fit checks how the dictionary fits items, a re-list's or a restore's
// objects, before they are swapped in. The first time after the
// dictionary was made it measures the ratio (base), and compresses the
// objects held as they came before there was one; later, if they take
// squash.DegradedFactor times more room than then (their shape
// changed), it makes the dictionary again from them and compresses them
// all against it. It says whether the state file must have every object
// again: their entries changed, or some were loaded from it compressed
// against another dictionary (reload). The writer's alone, under wmu.
func (k *packer[T]) fit(items *Items[T]) (rewrite bool) {
	rewrite, k.reload = k.reload, false
	d := k.dict.Load()
	if d == nil || items.Len() < 2*squash.DictSamples {
		return rewrite
	}
	in, out := k.measure(items)
	if in < remakeMin {
		return rewrite
	}
	ratio := float64(out) / float64(in)
	switch {
	case k.base == 0:
		if k.recompress(items, d, nil) > 0 {
			rewrite = true
		}
		in, out = k.measure(items)
		k.base = float64(out) / float64(in)
		return rewrite
	case ratio <= k.base*squash.DegradedFactor:
		return rewrite
	}
	samples := make([][]byte, 0, squash.DictSamples)
	size := 0
	for _, r := range items.All() {
		if len(samples) == squash.DictSamples || size >= squash.MaxDictLen {
			break
		}
		if r.p == nil {
			continue
		}
		if b, err := k.plain(r.p); err == nil {
			samples = append(samples, b)
			size += len(b)
		}
	}
	nd, err := squash.NewDict(samples)
	if err != nil {
		return rewrite
	}
	done := items.clone()
	k.recompress(done, d, nd)
	if in2, out2 := k.measure(done); float64(out2)/float64(in2) >= ratio {
		k.base = ratio // no better: the objects no longer compress; judge from here
		return rewrite
	}
	for key, r := range done.All() {
		items.Set(key, r)
	}
	retired := []*squash.Dict{d}
	if old := k.retired.Load(); old != nil {
		retired = append(retired, (*old)[:min(len(*old), maxRetiredDicts-1)]...)
	}
	k.retired.Store(&retired) // before the new dictionary: a reader always finds one that decodes
	k.dict.Store(nd)
	k.dictGen++
	k.remade.Add(1)
	in, out = k.measure(items)
	k.base = float64(out) / float64(in)
	return true
}

// measure returns the bytes of items' objects and of their entries.
func (k *packer[T]) measure(items *Items[T]) (in, out int64) {
	for _, r := range items.All() {
		if r.p == nil {
			continue
		}
		if n, err := squash.Len(r.p.data()); err == nil {
			in += int64(n)
			out += int64(len(r.p.data()))
		}
	}
	return in, out
}

// recompress compresses items' entries against to: all of them, or with
// to nil those held as they came, against d. An entry that does not
// decode is left as it is. It returns how many it changed.
func (k *packer[T]) recompress(items *Items[T], d, to *squash.Dict) (changed int) {
	for key, r := range items.All() {
		if r.p == nil {
			continue
		}
		_, isRaw := squash.Raw(r.p.data())
		if to == nil && !isRaw {
			continue
		}
		b, err := k.plain(r.p)
		if err != nil {
			continue
		}
		enc := d
		if to != nil {
			enc = to
		}
		k.scratch = enc.Encode(k.scratch[:0], b)
		if to == nil && k.scratch[0] == r.p.data()[0] {
			continue // still as it came: not worth a new entry
		}
		p := k.copyPacked(r.p)
		p.setData(bytes.Clone(k.scratch))
		items.Set(key, Ref[T]{p: p}) // in place: the key is there
		changed++
	}
	return changed
}
