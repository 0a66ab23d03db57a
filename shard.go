package kinformer

import (
	"cmp"
	"encoding/hex"
	"errors"
	"fmt"
	"math/bits"
	"slices"
	"strings"
)

// The hash space of sharding is the 64-bit FNV-1a hash of an object's
// metadata.uid, as kube-apiserver computes it for shardSelector (KEP-5866,
// k8s.io/apimachinery/pkg/sharding). It is cut into a power-of-two number of
// equal slots; a replica owns a set of slots, and the shard selector it
// sends is the union of their hash ranges (adjacent slots merged).

const (
	// DefaultShardSlots is ShardingOptions.Slots when it is zero: enough
	// to share evenly between up to a few dozen replicas, few enough that a
	// replica's selector stays short.
	DefaultShardSlots = 64
	// maxShardSlots bounds ShardingOptions.Slots (and the selector's length).
	maxShardSlots = 4096
)

// shardHash is the hash of a uid: 64-bit FNV-1a over its bytes.
func shardHash(uid string) uint64 {
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

// slotSet is a set of slots out of a power-of-two total. The zero value
// (and nil) is the empty set of no slots; use newSlotSet.
type slotSet struct {
	shift uint // 64 - log2(slots): slot of hash h is h >> shift
	words []uint64
}

func validSlots(n int) error {
	if n < 1 || n > maxShardSlots || n&(n-1) != 0 {
		return fmt.Errorf("kinformer: sharding slots must be a power of two between 1 and %d, not %d", maxShardSlots, n)
	}
	return nil
}

func newSlotSet(slots int) *slotSet {
	return &slotSet{shift: uint(64 - bits.TrailingZeros(uint(slots))), words: make([]uint64, (slots+63)/64)}
}

// slots is the total number of slots (not the number in the set).
func (s *slotSet) slots() int {
	if s.shift == 64 {
		return 1
	}
	return 1 << (64 - s.shift)
}

func (s *slotSet) slotOf(h uint64) int {
	if s.shift == 64 {
		return 0
	}
	return int(h >> s.shift)
}

func (s *slotSet) add(i int)           { s.words[i/64] |= 1 << (i % 64) }
func (s *slotSet) remove(i int)        { s.words[i/64] &^= 1 << (i % 64) }
func (s *slotSet) contains(i int) bool { return s != nil && s.words[i/64]&(1<<(i%64)) != 0 }

// has reports whether the object with this uid falls in the set.
func (s *slotSet) has(uid string) bool {
	return s != nil && s.contains(s.slotOf(shardHash(uid)))
}

func (s *slotSet) len() int {
	if s == nil {
		return 0
	}
	n := 0
	for _, w := range s.words {
		n += bits.OnesCount64(w)
	}
	return n
}

func (s *slotSet) empty() bool { return s.len() == 0 }

func (s *slotSet) clone() *slotSet {
	return &slotSet{shift: s.shift, words: slices.Clone(s.words)}
}

func (s *slotSet) equal(o *slotSet) bool {
	if s == nil || o == nil {
		return s.len() == 0 && o.len() == 0
	}
	return s.shift == o.shift && slices.Equal(s.words, o.words)
}

// minus returns the slots of s not in o.
func (s *slotSet) minus(o *slotSet) *slotSet {
	r := s.clone()
	if o != nil {
		for i := range r.words {
			r.words[i] &^= o.words[i]
		}
	}
	return r
}

// union returns the slots in s or o.
func (s *slotSet) union(o *slotSet) *slotSet {
	r := s.clone()
	if o != nil {
		for i := range r.words {
			r.words[i] |= o.words[i]
		}
	}
	return r
}

// intersects reports whether s and o share a slot.
func (s *slotSet) intersects(o *slotSet) bool {
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

// fraction is the share of the hash space the set covers.
func (s *slotSet) fraction() float64 {
	if s == nil {
		return 0
	}
	return float64(s.len()) / float64(s.slots())
}

// runs returns the set as half-open runs of adjacent slots [a, b).
func (s *slotSet) runs() [][2]int {
	var out [][2]int
	n := s.slots()
	for i := 0; i < n; {
		if !s.contains(i) {
			i++
			continue
		}
		j := i
		for j < n && s.contains(j) {
			j++
		}
		out = append(out, [2]int{i, j})
		i = j
	}
	return out
}

// bound is the hash at which slot i starts, as kube-apiserver writes it:
// 0x and 16 hex digits, or 0x10000000000000000 for the end of the space.
func (s *slotSet) bound(i int) string {
	if i >= s.slots() {
		return "0x10000000000000000"
	}
	if s.shift == 64 {
		return "0x0000000000000000"
	}
	return fmt.Sprintf("0x%016x", uint64(i)<<s.shift)
}

// selector is the shardSelector of the set, in the server's normal form
// (so that the list's shardInfo echoes it unchanged); "" for the empty
// set, which has none.
func (s *slotSet) selector() string {
	var b strings.Builder
	for k, r := range s.runs() {
		if k > 0 {
			b.WriteString(" || ")
		}
		fmt.Fprintf(&b, "shardRange(object.metadata.uid, '%s', '%s')", s.bound(r[0]), s.bound(r[1]))
	}
	return b.String()
}

// String is the set as ranges of hashes, for logs and /stats:
// [0x0000000000000000,0x4000000000000000) [0x8000000000000000,...).
func (s *slotSet) String() string {
	if s.empty() {
		return "none"
	}
	var parts []string
	for _, r := range s.runs() {
		parts = append(parts, "["+s.bound(r[0])+","+s.bound(r[1])+")")
	}
	return strings.Join(parts, " ")
}

// encode is the set as its slot count and a hex bitmap, for a Lease's
// annotation: "64:00000000ffff0000".
func (s *slotSet) encode() string {
	buf := make([]byte, 8*len(s.words))
	for i, w := range s.words {
		for k := range 8 {
			buf[8*i+k] = byte(w >> (8 * k))
		}
	}
	return fmt.Sprintf("%d:%s", s.slots(), hex.EncodeToString(buf))
}

// decodeSlotSet parses encode's form; it fails on another slot count than
// slots.
func decodeSlotSet(v string, slots int) (*slotSet, error) {
	n, bitmap, ok := strings.Cut(v, ":")
	if !ok {
		return nil, errors.New("no slot count")
	}
	if n != fmt.Sprint(slots) {
		return nil, fmt.Errorf("%s slots, this replica has %d", n, slots)
	}
	s := newSlotSet(slots)
	buf, err := hex.DecodeString(bitmap)
	if err != nil || len(buf) != 8*len(s.words) {
		return nil, fmt.Errorf("bad bitmap %q", bitmap)
	}
	for i := range s.words {
		for k := range 8 {
			s.words[i] |= uint64(buf[8*i+k]) << (8 * k)
		}
	}
	if slots < 64 && s.words[0]>>slots != 0 {
		return nil, fmt.Errorf("bitmap %q names slots past %d", bitmap, slots)
	}
	return s, nil
}

// assignSlots splits slots between members (their identities, in any
// order) and returns each one's set. Every member gets slots/n or one more;
// the assignment depends only on the set of members, and a member joining
// or leaving moves close to the least it can (about slots/n): each slot
// goes to the member that ranks it highest (rendezvous hashing), the
// highest-ranked pairs first, as long as that member has room.
func assignSlots(members []string, slots int) map[string]*slotSet {
	out := make(map[string]*slotSet, len(members))
	if len(members) == 0 {
		return out
	}
	ms := slices.Clone(members)
	slices.Sort(ms)
	ms = slices.Compact(ms)
	type pair struct {
		score  uint64
		slot   int
		member int
	}
	pairs := make([]pair, 0, len(ms)*slots)
	for m, id := range ms {
		for s := range slots {
			pairs = append(pairs, pair{rendezvous(id, s), s, m})
		}
	}
	slices.SortFunc(pairs, func(a, b pair) int {
		if c := cmp.Compare(b.score, a.score); c != 0 {
			return c
		}
		if c := cmp.Compare(a.slot, b.slot); c != 0 {
			return c
		}
		return cmp.Compare(a.member, b.member)
	})
	// Capacities: slots/n each, and one more for the first slots%n members
	// in the order of their hash (not their name, which would favour the
	// same members every time).
	capOf := make([]int, len(ms))
	order := make([]int, len(ms))
	for i := range ms {
		capOf[i] = slots / len(ms)
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(shardHash(ms[a]), shardHash(ms[b])) })
	for _, i := range order[:slots%len(ms)] {
		capOf[i]++
	}
	sets := make([]*slotSet, len(ms))
	for i := range sets {
		sets[i] = newSlotSet(slots)
	}
	taken := make([]bool, slots)
	left := slots
	for _, p := range pairs {
		if left == 0 {
			break
		}
		if taken[p.slot] || capOf[p.member] == 0 {
			continue
		}
		taken[p.slot] = true
		capOf[p.member]--
		sets[p.member].add(p.slot)
		left--
	}
	for i, id := range ms {
		out[id] = sets[i]
	}
	return out
}

// rendezvous is how much member id wants slot s.
func rendezvous(id string, s int) uint64 {
	h := shardHash(id + "\x00" + fmt.Sprint(s))
	// FNV's low bits mix poorly for inputs that differ only at the end:
	// finish with a 64-bit mixer (splitmix64's).
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
