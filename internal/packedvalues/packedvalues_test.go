package packedvalues

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// Values keep the values of each index as they were given, in the
// short form when each index has one value, and in the general one
// otherwise, whatever the values' bytes (one equal to the marker's
// included).
func TestValues(t *testing.T) {
	marker := strings.Clone(multiValues)
	many := make([]string, 300) // a count over one uvarint byte
	for i := range many {
		many[i] = fmt.Sprint(i)
	}
	for _, vals := range [][][]string{
		{{"a"}},
		{{"a"}, {"b"}, {""}},
		{{marker}, {"b"}},
		{{marker, marker}},
		{{}},
		{nil, {"a"}},
		{{"a", "b"}, {}, {"c"}},
		{many, {"x"}, many[:129]},
		{},
	} {
		v := Pack(vals)
		if single := !slices.ContainsFunc(vals, func(s []string) bool { return len(s) != 1 }); single && (v.Multi() || len(v) != len(vals)) {
			t.Errorf("%q: not the short form: %q", vals, v)
		}
		if v.N() != len(vals) {
			t.Fatalf("%q: N() = %d", vals, v.N())
		}
		for i, want := range vals {
			if got := v.At(i); !slices.Equal(got, want) {
				t.Fatalf("%q: At(%d) = %q", vals, i, got)
			}
		}
		if got := v.All(); len(got) != len(vals) {
			t.Fatalf("%q: All() = %q", vals, got)
		}
	}
	if v := Pack([][]string{{marker}, {"b"}}); v.Multi() || unsafe.StringData(v[0]) == unsafe.StringData(multiValues) {
		t.Fatal("a value with the marker's bytes was taken for the marker")
	}
	// at's slices cannot grow into the next index's values.
	v := Pack([][]string{{"a", "b"}, {"c"}})
	if s := append(v.At(0), "z"); v.At(1)[0] != "c" || len(s) != 3 {
		t.Fatal("appending to At(0) changed At(1)")
	}
}
