package sharding

import (
	"fmt"
	"strings"
	"testing"

	"github.com/kinformer/kinformer/internal/slots"
)

// assignSlots is a partition, balanced to one slot, and a join or a leave
// moves little more than the joiner's (or leaver's) share.
func TestAssignSlotsBalanceAndMovement(t *testing.T) {
	const n64 = 64
	members := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("replica-%d-%x", i, slots.Hash(fmt.Sprint(i))))
		}
		return out
	}
	worstExtra := 0
	for n := 1; n <= 10; n++ {
		a := assignSlots(members(n), n64)
		union := slots.New(n64)
		total := 0
		for id, s := range a {
			if s.Intersects(union) {
				t.Fatalf("n=%d: %s overlaps another member", n, id)
			}
			union = union.Union(s)
			total += s.Len()
			if s.Len() < n64/n || s.Len() > n64/n+1 {
				t.Fatalf("n=%d: %s has %d slots", n, id, s.Len())
			}
		}
		if total != n64 || union.Len() != n64 {
			t.Fatalf("n=%d: %d slots assigned, %d covered", n, total, union.Len())
		}
		// Same members in another order: the same assignment.
		rev := members(n)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		for id, s := range assignSlots(rev, n64) {
			if !s.Equal(a[id]) {
				t.Fatalf("n=%d: the assignment depends on the order of members", n)
			}
		}
		// Join: n -> n+1.
		b := assignSlots(members(n+1), n64)
		moved := 0
		for id, s := range a {
			moved += s.Minus(b[id]).Len()
		}
		ideal := b[members(n + 1)[n]].Len() // what the joiner must get
		if moved > ideal+n64/8 {
			t.Errorf("join %d -> %d: %d slots moved, the joiner's share is %d", n, n+1, moved, ideal)
		}
		worstExtra = max(worstExtra, moved-ideal)
	}
	t.Logf("worst extra slots moved on a join (beyond the joiner's share): %d of %d", worstExtra, n64)
	if a := assignSlots(nil, n64); len(a) != 0 {
		t.Fatal("no members, yet an assignment")
	}
	if s := assignSlots([]string{"a", "a"}, 4)["a"]; s.Len() != 4 {
		t.Fatal("a duplicate member split the space with itself")
	}
	if !strings.Contains(assignSlots([]string{"x"}, 1)["x"].Selector(), "'0x0000000000000000', '0x10000000000000000'") {
		t.Fatal("one slot is not the whole space")
	}
}
