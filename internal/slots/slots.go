// Package slots is the hash space of sharding, shared by the informer's
// side (the root package) and the Lease protocol (package sharding): the
// 64-bit FNV-1a hash of an object's metadata.uid, as kube-apiserver
// computes it for shardSelector (KEP-5866, k8s.io/apimachinery/pkg/sharding),
// cut into a power-of-two number of equal slots. A replica owns a Set of
// slots; the shard selector it sends is the union of their hash ranges
// (adjacent slots merged), and a Lease's claims annotation is a Set's
// Encode.
package slots

import (
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

const (
	// DefaultSlots is the slot count when none is given: enough to share
	// evenly between up to a few dozen replicas, few enough that a
	// replica's selector stays short.
	DefaultSlots = 64
	// MaxSlots bounds the slot count (and the selector's length).
	MaxSlots = 4096
)

// Hash is the hash of a uid: 64-bit FNV-1a over its bytes.
func Hash(uid string) uint64 {
	const (
		offset64 = 14695981039346656037
		prime64  = 1099511628211
	)
	h := uint64(offset64)
	for i := 0; i < len(uid); i++ {
		h ^= uint64(uid[i])
		h *= prime64
	}
	return h
}

// Valid reports whether n is a usable slot count: a power of two between
// 1 and MaxSlots.
func Valid(n int) error {
	if n < 1 || n > MaxSlots || n&(n-1) != 0 {
		return fmt.Errorf("kinformer: sharding slots must be a power of two between 1 and %d, not %d", MaxSlots, n)
	}
	return nil
}

// Set is a set of slots out of a power-of-two total. Nil is the empty set
// of no slots; make others with New. Methods that return a set return a
// new one.
type Set struct {
	shift uint // 64 - log2(total): the slot of hash h is h >> shift
	words []uint64
}

// New returns the empty set of n slots; n must be Valid.
func New(n int) *Set {
	return &Set{shift: uint(64 - bits.TrailingZeros(uint(n))), words: make([]uint64, (n+63)/64)}
}

// Of returns the set of the slots idx out of n, or an error if n is not
// Valid or an index is out of range.
func Of(n int, idx []int) (*Set, error) {
	if err := Valid(n); err != nil {
		return nil, err
	}
	s := New(n)
	for _, i := range idx {
		if i < 0 || i >= n {
			return nil, fmt.Errorf("kinformer: sharding: slot %d out of range [0, %d)", i, n)
		}
		s.Add(i)
	}
	return s, nil
}

// Total is the number of slots the hash space is cut into (not the number
// in the set).
func (s *Set) Total() int {
	if s.shift == 64 {
		return 1
	}
	return 1 << (64 - s.shift)
}

// SlotOf is the slot of hash h.
func (s *Set) SlotOf(h uint64) int {
	if s.shift == 64 {
		return 0
	}
	return int(h >> s.shift)
}

// Add puts slot i in the set.
func (s *Set) Add(i int) { s.words[i/64] |= 1 << (i % 64) }

// Remove takes slot i out of the set.
func (s *Set) Remove(i int) { s.words[i/64] &^= 1 << (i % 64) }

// Contains reports whether slot i is in the set.
func (s *Set) Contains(i int) bool { return s != nil && s.words[i/64]&(1<<(i%64)) != 0 }

// Has reports whether the object with this uid falls in the set.
func (s *Set) Has(uid string) bool {
	return s != nil && s.Contains(s.SlotOf(Hash(uid)))
}

// Len is the number of slots in the set.
func (s *Set) Len() int {
	if s == nil {
		return 0
	}
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

// Empty reports whether the set has no slot.
func (s *Set) Empty() bool { return s.Len() == 0 }

// Clone returns a copy of the set.
func (s *Set) Clone() *Set {
	return &Set{shift: s.shift, words: slices.Clone(s.words)}
}

// Equal reports whether s and o hold the same slots of the same total
// (any two empty sets are equal).
func (s *Set) Equal(o *Set) bool {
	if s == nil || o == nil {
		return s.Len() == 0 && o.Len() == 0
	}
	return s.shift == o.shift && slices.Equal(s.words, o.words)
}

// Minus returns the slots of s not in o.
func (s *Set) Minus(o *Set) *Set {
	r := s.Clone()
	if o != nil {
		for i := range r.words {
			r.words[i] &^= o.words[i]
		}
	}
	return r
}

// Union returns the slots in s or o.
func (s *Set) Union(o *Set) *Set {
	r := s.Clone()
	if o != nil {
		for i := range r.words {
			r.words[i] |= o.words[i]
		}
	}
	return r
}

// Intersects reports whether s and o share a slot.
func (s *Set) Intersects(o *Set) bool {
	if s == nil || o == nil {
		return false
	}
	for i := range s.words {
		if s.words[i]&o.words[i] != 0 {
			return true
		}
	}
	return false
}

// Fraction is the share of the hash space the set covers.
func (s *Set) Fraction() float64 {
	if s == nil {
		return 0
	}
	return float64(s.Len()) / float64(s.Total())
}

// Slots returns the slots of the set, in increasing order.
func (s *Set) Slots() []int {
	out := make([]int, 0, s.Len())
	if s == nil {
		return out
	}
	for i := range s.Total() {
		if s.Contains(i) {
			out = append(out, i)
		}
	}
	return out
}

// Runs returns the set as half-open runs of adjacent slots [a, b).
func (s *Set) Runs() [][2]int {
	var out [][2]int
	n := s.Total()
	for i := 0; i < n; {
		if !s.Contains(i) {
			i++
			continue
		}
		j := i
		for j < n && s.Contains(j) {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// Bound is the hash at which slot i starts, as kube-apiserver writes it:
// 0x and 16 hex digits, or 0x10000000000000000 for the end of the space.
func (s *Set) Bound(i int) string {
	if i >= s.Total() {
		return "0x10000000000000000"
	}
	if s.shift == 64 {
		return "0x0000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(i)<<s.shift)
}

// Selector is the shardSelector of the set, in the server's normal form
// (so that the list's shardInfo echoes it unchanged); "" for the empty
// set, which has none.
func (s *Set) Selector() string {
	var b strings.Builder
	for k, r := range s.Runs() {
		if k > 0 {
			b.WriteString(" || ")
		}
		fmt.Fprintf(&b, "shardRange(object.metadata.uid, '%s', '%s')", s.Bound(r[0]), s.Bound(r[1]))
	}
	return b.String()
}

// String is the set as ranges of hashes, for logs and status:
// [0x0000000000000000,0x4000000000000000) [0x8000000000000000,...), or
// "none".
func (s *Set) String() string {
	if s.Empty() {
		return "none"
	}
	var parts []string
	for _, r := range s.Runs() {
		parts = append(parts, "["+s.Bound(r[0])+","+s.Bound(r[1])+")")
	}
	return strings.Join(parts, " ")
}

// Encode is the set as its slot count and a hex bitmap, for a Lease's
// annotation: "64:00000000ffff0000".
func (s *Set) Encode() string {
	buf := make([]byte, 8*len(s.words))
	for i, w := range s.words {
		for k := range 8 {
			buf[8*i+k] = byte(w >> (8 * k))
		}
	}
	return fmt.Sprintf("%d:%s", s.Total(), hex.EncodeToString(buf))
}

// Decode parses Encode's form; it fails on another slot count than n.
func Decode(v string, n int) (*Set, error) {
	count, bitmap, ok := strings.Cut(v, ":")
	if !ok {
		return nil, errors.New("no slot count")
	}
	if count != fmt.Sprint(n) {
		return nil, fmt.Errorf("%s slots, this replica has %d", count, n)
	}
	s := New(n)
	buf, err := hex.DecodeString(bitmap)
	if err != nil || len(buf) != 8*len(s.words) {
		return nil, fmt.Errorf("bad bitmap %q", bitmap)
	}
	for i := range s.words {
		for k := range 8 {
			s.words[i] |= uint64(buf[8*i+k]) << (8 * k)
		}
	}
	if n < 64 && s.words[0]>>n != 0 {
		return nil, fmt.Errorf("bitmap %q names slots past %d", bitmap, n)
	}
	return s, nil
}
