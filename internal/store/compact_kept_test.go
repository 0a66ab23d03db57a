package store

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
)

// A resourceVersion is kept as a number when it is one in canonical form
// (what etcd-backed servers give), and as it came otherwise: any string
// reads back as it was, and compares equal only to itself.
func TestPackedResourceVersions(t *testing.T) {
	c := newCompact(false)
	k := compactOf(c)
	for _, rv := range []string{"1", "42", "18446744073709551615", "9999999999999999999", "0", "007", "", "12a", "abc", "99999999999999999999", "-3", "+3", " 5"} {
		p := k.newPacked([]byte{0}, rv, "ns")
		if got := k.resourceVersion(p); got != rv {
			t.Errorf("resourceVersion %q read back as %q", rv, got)
		}
		r := Ref[*corev1.ConfigMap]{p: p}
		if !k.isVersion(r, rv) {
			t.Errorf("%q: isVersion of itself is false", rv)
		}
		for _, other := range []string{"1", "42", "007", "7", "0", "", "abc"} {
			if other != rv && (k.isVersion(r, other) || k.sameVersion(r, Ref[*corev1.ConfigMap]{p: k.newPacked(nil, other, "ns")})) {
				t.Errorf("%q taken for %q", rv, other)
			}
		}
		if !k.sameVersion(r, Ref[*corev1.ConfigMap]{p: k.newPacked(nil, rv, "ns")}) {
			t.Errorf("%q: two packed objects at it are not at one version", rv)
		}
		plain := cm("ns", "a")
		plain.ResourceVersion = rv
		if !k.sameVersion(r, Ref[*corev1.ConfigMap]{obj: plain}) || !k.sameVersion(Ref[*corev1.ConfigMap]{obj: plain}, r) {
			t.Errorf("%q: a packed and a plain object at it are not at one version", rv)
		}
	}
}
