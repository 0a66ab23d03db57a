package kinformer

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// The hash and the ranges are the server's: apimachinery's own selector
// (what kube-apiserver filters with) agrees with slotSet.has on random
// sets and uids, so client-side filtering keeps exactly what the server
// would send.
func TestShardSetMatchesServerSelector(t *testing.T) {
	for _, uid := range []string{"", "abc", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"} {
		if got, want := fmt.Sprintf("%016x", shardHash(uid)), sharding.HashField(uid); got != want {
			t.Fatalf("shardHash(%q) = %s, apimachinery says %s", uid, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, slots := range []int{1, 2, 4, 64, 128, 4096} {
		for range 20 {
			s := newSlotSet(slots)
			for i := range slots {
				if r.IntN(3) == 0 {
					s.add(i)
				}
			}
			var reqs []sharding.ShardRangeRequirement
			for _, run := range s.runs() {
				reqs = append(reqs, sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: s.bound(run[0]), End: s.bound(run[1])})
			}
			if s.empty() {
				if s.selector() != "" {
					t.Fatalf("empty set has selector %q", s.selector())
				}
				continue
			}
			sel := sharding.NewSelector(reqs...)
			if got := s.selector(); got != sel.String() {
				t.Fatalf("selector %q, the server's normal form is %q", got, sel.String())
			}
			for range 200 {
				uid := string(uuid.NewUUID())
				want, err := sel.Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}})
				if err != nil {
					t.Fatal(err)
				}
				if got := s.has(uid); got != want {
					t.Fatalf("slots %d set %s uid %s: has %v, server selector %v", slots, s, uid, got, want)
				}
			}
			back, err := decodeSlotSet(s.encode(), slots)
			if err != nil || !back.equal(s) {
				t.Fatalf("encode/decode %s: %v %v", s.encode(), back, err)
			}
		}
	}
	if _, err := decodeSlotSet(newSlotSet(64).encode(), 128); err == nil {
		t.Fatal("a bitmap of 64 slots decoded as 128")
	}
	if _, err := decodeSlotSet("4:ff00000000000000", 4); err == nil {
		t.Fatal("a bitmap naming slots past the count decoded")
	}
	for _, bad := range []int{0, 3, 100, 8192} {
		if validSlots(bad) == nil {
			t.Fatalf("%d slots accepted", bad)
		}
	}
}

// assignSlots is a partition, balanced to one slot, and a join or a leave
// moves little more than the joiner's (or leaver's) share.
func TestAssignSlotsBalanceAndMovement(t *testing.T) {
	const slots = 64
	members := func(n int) []string {
		var out []string
		for i := range n {
			out = append(out, fmt.Sprintf("replica-%d-%x", i, shardHash(fmt.Sprint(i))))
		}
		return out
	}
	worstExtra := 0
	for n := 1; n <= 10; n++ {
		a := assignSlots(members(n), slots)
		union := newSlotSet(slots)
		total := 0
		for id, s := range a {
			if s.intersects(union) {
				t.Fatalf("n=%d: %s overlaps another member", n, id)
			}
			union = union.union(s)
			total += s.len()
			if s.len() < slots/n || s.len() > slots/n+1 {
				t.Fatalf("n=%d: %s has %d slots", n, id, s.len())
			}
		}
		if total != slots || union.len() != slots {
			t.Fatalf("n=%d: %d slots assigned, %d covered", n, total, union.len())
		}
		// Same members in another order: the same assignment.
		rev := members(n)
		for i, j := 0, len(rev)-1; i < j; i, j = i+1, j-1 {
			rev[i], rev[j] = rev[j], rev[i]
		}
		for id, s := range assignSlots(rev, slots) {
			if !s.equal(a[id]) {
				t.Fatalf("n=%d: the assignment depends on the order of members", n)
			}
		}
		// Join: n -> n+1.
		b := assignSlots(members(n+1), slots)
		moved := 0
		for id, s := range a {
			moved += s.minus(b[id]).len()
		}
		ideal := b[members(n + 1)[n]].len() // what the joiner must get
		if moved > ideal+slots/8 {
			t.Errorf("join %d -> %d: %d slots moved, the joiner's share is %d", n, n+1, moved, ideal)
		}
		worstExtra = max(worstExtra, moved-ideal)
	}
	t.Logf("worst extra slots moved on a join (beyond the joiner's share): %d of %d", worstExtra, slots)
	if a := assignSlots(nil, slots); len(a) != 0 {
		t.Fatal("no members, yet an assignment")
	}
	if s := assignSlots([]string{"a", "a"}, 4)["a"]; s.len() != 4 {
		t.Fatal("a duplicate member split the space with itself")
	}
	if !strings.Contains(assignSlots([]string{"x"}, 1)["x"].selector(), "'0x0000000000000000', '0x10000000000000000'") {
		t.Fatal("one slot is not the whole space")
	}
}
