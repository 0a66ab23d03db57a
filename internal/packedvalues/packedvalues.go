// Package packedvalues keeps a compact cache's index values of one object
// in one slice (Values).
package packedvalues

import (
	"encoding/binary"
	"unsafe"
)

// Values are a packed object's values in the eager indexes (in
// the cache's order of indexes), in one slice: what most objects have, one value in each
// index, is the values themselves, one string an index; otherwise the
// slice starts with multiValues (by its address, which no value has),
// then the number of values of each index (uvarints in one string), then
// all the values in order. A packed object with one index then keeps one
// 16-byte allocation for it, not two.
type Values []string

// multiValues marks the general form of Values. Only its address
// counts: a value with the same bytes is another string.
var multiValues = string([]byte("\x00kinformer: counts follow"))

// Pack returns vals, the values of each index, as Values.
func Pack(vals [][]string) Values {
	single := true
	for _, v := range vals {
		if len(v) != 1 {
			single = false
			break
		}
	}
	if single {
		out := make(Values, len(vals))
		for i, v := range vals {
			out[i] = v[0]
		}
		return out
	}
	var counts []byte
	n := 0
	for _, v := range vals {
		counts = binary.AppendUvarint(counts, uint64(len(v)))
		n += len(v)
	}
	out := make(Values, 2, 2+n)
	out[0], out[1] = multiValues, string(counts)
	for _, v := range vals {
		out = append(out, v...)
	}
	return out
}

// Multi reports whether v has the general form.
func (v Values) Multi() bool {
	return len(v) >= 2 && unsafe.StringData(v[0]) == unsafe.StringData(multiValues)
}

// N returns how many indexes v holds the values of.
func (v Values) N() int {
	if !v.Multi() {
		return len(v)
	}
	n := 0
	for c := v[1]; len(c) > 0; n++ {
		_, w := uvarint(c)
		c = c[w:]
	}
	return n
}

// At returns the values of the i-th index, as a slice of v.
func (v Values) At(i int) []string {
	if !v.Multi() {
		return v[i : i+1 : i+1]
	}
	c, off := v[1], 2
	for j := 0; ; j++ {
		k, w := uvarint(c)
		c = c[w:]
		if j == i {
			return v[off : off+int(k) : off+int(k)]
		}
		off += int(k)
	}
}

// All returns the values of each index.
func (v Values) All() [][]string {
	out := make([][]string, v.N())
	for i := range out {
		out[i] = v.At(i)
	}
	return out
}

// uvarint reads a uvarint that Pack wrote at the start of s: its
// value and length.
func uvarint(s string) (uint64, int) {
	var x uint64
	for i := 0; i < len(s); i++ {
		b := s[i]
		x |= uint64(b&0x7f) << (7 * i)
		if b < 0x80 {
			return x, i + 1
		}
	}
	return x, len(s)
}
