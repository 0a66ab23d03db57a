package slots

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/sharding"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/util/uuid"
)

// The hash and the ranges are the server's: apimachinery's own selector
// (what kube-apiserver filters with) agrees with Set.Has on random sets
// and uids, so client-side filtering keeps exactly what the server would
// send.
func TestSetMatchesServerSelector(t *testing.T) {
	for _, uid := range []string{"", "abc", "aaaaaaaa-bbbb-cccc-dddd-eeeeeeeeeeee"} {
		if got, want := fmt.Sprintf("%016x", Hash(uid)), sharding.HashField(uid); got != want {
			t.Fatalf("Hash(%q) = %s, apimachinery says %s", uid, got, want)
		}
	}
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{1, 2, 4, 64, 128, 4096} {
		for range 20 {
			s := New(n)
			for i := range n {
				if r.IntN(3) == 0 {
					s.Add(i)
				}
			}
			var reqs []sharding.ShardRangeRequirement
			for _, run := range s.Runs() {
				reqs = append(reqs, sharding.ShardRangeRequirement{Key: "object.metadata.uid", Start: s.Bound(run[0]), End: s.Bound(run[1])})
			}
			if s.Empty() {
				if s.Selector() != "" {
					t.Fatalf("empty set has selector %q", s.Selector())
				}
				continue
			}
			sel := sharding.NewSelector(reqs...)
			if got := s.Selector(); got != sel.String() {
				t.Fatalf("selector %q, the server's normal form is %q", got, sel.String())
			}
			for range 200 {
				uid := string(uuid.NewUUID())
				want, err := sel.Matches(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{UID: types.UID(uid)}})
				if err != nil {
					t.Fatal(err)
				}
				if got := s.Has(uid); got != want {
					t.Fatalf("slots %d set %s uid %s: has %v, server selector %v", n, s, uid, got, want)
				}
			}
			back, err := Decode(s.Encode(), n)
			if err != nil || !back.Equal(s) {
				t.Fatalf("encode/decode %s: %v %v", s.Encode(), back, err)
			}
			of, err := Of(n, s.Slots())
			if err != nil || !of.Equal(s) {
				t.Fatalf("Of(Slots()) of %s: %v %v", s, of, err)
			}
		}
	}
	if _, err := Decode(New(64).Encode(), 128); err == nil {
		t.Fatal("a bitmap of 64 slots decoded as 128")
	}
	if _, err := Decode("4:ff00000000000000", 4); err == nil {
		t.Fatal("a bitmap naming slots past the count decoded")
	}
	for _, bad := range []int{0, 3, 100, 8192} {
		if Valid(bad) == nil {
			t.Fatalf("%d slots accepted", bad)
		}
		if _, err := Of(bad, nil); err == nil {
			t.Fatalf("Of(%d) accepted", bad)
		}
	}
	for _, bad := range [][]int{{-1}, {4}, {0, 7}} {
		if _, err := Of(4, bad); err == nil {
			t.Fatalf("Of(4, %v) accepted", bad)
		}
	}
	if got := (*Set)(nil).Slots(); len(got) != 0 {
		t.Fatalf("the nil set has slots %v", got)
	}
	if got := New(8).Union(mustOf(t, 8, 5, 1, 3)).Slots(); !slices.Equal(got, []int{1, 3, 5}) {
		t.Fatalf("Slots() = %v, want sorted [1 3 5]", got)
	}
}

func mustOf(t *testing.T, n int, idx ...int) *Set {
	t.Helper()
	s, err := Of(n, idx)
	if err != nil {
		t.Fatal(err)
	}
	return s
}
