package squash

import "sync/atomic"

// DegradedFactor is the suggested threshold of Ratio.Degraded: a
// dictionary is worth remaking when the objects encoded since it was made
// (a re-list's) take this much more room, compared with the objects it
// was made for, as a ratio: 1.5 = 50% more. TestRatioDegrades measures
// (doc.go): Pods compressed with a dictionary of their cluster's first 24
// Pods are at 0.29 of their size; with another cluster's Pods (other
// names, the same kind of workloads) at 0.29 too: the dictionary holds the
// type's structure, which does not drift; with the JSON of the same Pods
// (the wrong structure) at 0.53 (1.8x); with no useful dictionary at 0.68
// (2.3x, as s2 without one).
const DegradedFactor = 1.5

// Ratio counts the bytes Encode took in and gave out, to tell when a
// dictionary no longer fits the objects. Its methods may be called on many
// goroutines at once; the zero Ratio is empty.
type Ratio struct {
	in, out atomic.Int64
}

// Add counts an object of in bytes encoded as an entry of out bytes.
func (r *Ratio) Add(in, out int) {
	r.in.Add(int64(in))
	r.out.Add(int64(out))
}

// Bytes returns the bytes counted in and out since the Ratio was made or
// Reset.
func (r *Ratio) Bytes() (in, out int64) { return r.in.Load(), r.out.Load() }

// Ratio returns out/in: 0.25 for entries a quarter of their objects' size;
// 1 if nothing was counted.
func (r *Ratio) Ratio() float64 {
	in, out := r.Bytes()
	if in <= 0 {
		return 1
	}
	return float64(out) / float64(in)
}

// Reset forgets what was counted.
func (r *Ratio) Reset() {
	r.in.Store(0)
	r.out.Store(0)
}

// Degraded tells whether the ratio counted has grown past DegradedFactor
// times base (the ratio of the objects the dictionary was made for, e.g.
// of the list it was made from), over at least minBytes bytes in: then a
// new dictionary from the current objects would hold them in less room.
func (r *Ratio) Degraded(base float64, minBytes int64) bool {
	in, _ := r.Bytes()
	return in > 0 && in >= minBytes && r.Ratio() > base*DegradedFactor
}
