package kinformer

import (
	"fmt"
	"slices"
	"strings"
	"testing"
	"unsafe"
)

// indexValues keep the values of each index as they were given, in the
// short form when each index has one value, and in the general one
// otherwise, whatever the values' bytes (one equal to the marker's
// included).
func TestIndexValues(t *testing.T) {
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
		v := packValues(vals)
		if single := !slices.ContainsFunc(vals, func(s []string) bool { return len(s) != 1 }); single && (v.multi() || len(v) != len(vals)) {
			t.Errorf("%q: not the short form: %q", vals, v)
		}
		if v.n() != len(vals) {
			t.Fatalf("%q: n() = %d", vals, v.n())
		}
		for i, want := range vals {
			if got := v.at(i); !slices.Equal(got, want) {
				t.Fatalf("%q: at(%d) = %q", vals, i, got)
			}
		}
		if got := v.all(); len(got) != len(vals) {
			t.Fatalf("%q: all() = %q", vals, got)
		}
	}
	if v := packValues([][]string{{marker}, {"b"}}); v.multi() || unsafe.StringData(v[0]) == unsafe.StringData(multiValues) {
		t.Fatal("a value with the marker's bytes was taken for the marker")
	}
	// at's slices cannot grow into the next index's values.
	v := packValues([][]string{{"a", "b"}, {"c"}})
	if s := append(v.at(0), "z"); v.at(1)[0] != "c" || len(s) != 3 {
		t.Fatal("appending to at(0) changed at(1)")
	}
}
