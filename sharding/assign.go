package sharding

import (
	"cmp"
	"fmt"
	"slices"

	"github.com/kinformer/kinformer/internal/slots"
)

// assignSlots splits total slots between members (their identities, in
// any order) and returns each one's set. Every member gets total/n or one
// more;
// the assignment depends only on the set of members, and a member joining
// or leaving moves close to the least it can (about total/n): each slot
// goes to the member that ranks it highest (rendezvous hashing), the
// highest-ranked pairs first, as long as that member has room.
func assignSlots(members []string, total int) map[string]*slots.Set {
	out := make(map[string]*slots.Set, len(members))
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
	pairs := make([]pair, 0, len(ms)*total)
	for m, id := range ms {
		for s := range total {
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
	// Capacities: total/n each, and one more for the first total%n members
	// in the order of their hash (not their name, which would favour the
	// same members every time).
	capOf := make([]int, len(ms))
	order := make([]int, len(ms))
	for i := range ms {
		capOf[i] = total / len(ms)
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int { return cmp.Compare(slots.Hash(ms[a]), slots.Hash(ms[b])) })
	for _, i := range order[:total%len(ms)] {
		capOf[i]++
	}
	sets := make([]*slots.Set, len(ms))
	for i := range sets {
		sets[i] = slots.New(total)
	}
	taken := make([]bool, total)
	left := total
	for _, p := range pairs {
		if left == 0 {
			break
		}
		if taken[p.slot] || capOf[p.member] == 0 {
			continue
		}
		taken[p.slot] = true
		capOf[p.member]--
		sets[p.member].Add(p.slot)
		left--
	}
	for i, id := range ms {
		out[id] = sets[i]
	}
	return out
}

// rendezvous is how much member id wants slot s.
func rendezvous(id string, s int) uint64 {
	h := slots.Hash(id + "\x00" + fmt.Sprint(s))
	// FNV's low bits mix poorly for inputs that differ only at the end:
	// finish with a 64-bit mixer (splitmix64's).
	h ^= h >> 30
	h *= 0xbf58476d1ce4e5b9
	h ^= h >> 27
	h *= 0x94d049bb133111eb
	h ^= h >> 31
	return h
}
