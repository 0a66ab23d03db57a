package store

import (
	"bytes"
	"reflect"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// Tests of the compact holding (SetCompact) on a cache alone; the
// informer's tests of it, and the contract's (KINFORMER_TEST_COMPACT=1),
// run in the root package.

// compactOf is the holding of a compact cache.
func compactOf[T Object](c *Cache[T]) *packer[T] { return c.h.(*packer[T]) }

// arrivalOf is obj as the decoder hands it to the writer, decoded.
func arrivalOf[T Object](obj T) Arrival[T] { return Arrival[T]{Obj: obj} }

// newCompact returns an empty compact cache of ConfigMaps.
func newCompact(uids bool) *Cache[*corev1.ConfigMap] {
	c := New[*corev1.ConfigMap](nil, nil)
	c.SetCompact(reflect.TypeFor[*corev1.ConfigMap](), true, uids)
	return c
}

// packEncoded reads a protobuf object's metadata without decoding it, and
// refuses an object stored under another key.
func TestCompactPackEncoded(t *testing.T) {
	c := newCompact(true)
	o := cm("ns", "a", "app", "web")
	o.UID, o.ResourceVersion = "uid-a", "42"
	data, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	dec := compactOf(c).decode
	var decoded int
	compactOf(c).decode = func(b []byte) (*corev1.ConfigMap, error) { decoded++; return dec(b) }
	r, err := compactOf(c).packEncoded(c, "ns/a", data, nil)
	if err != nil {
		t.Fatal(err)
	}
	if decoded != 0 {
		t.Fatal("decoded an object it could read the metadata of")
	}
	if compactOf(c).resourceVersion(r.p) != "42" || r.p.namespace() != "ns" || r.p.extra().uid != "uid-a" {
		t.Fatalf("packed %+v", r.p)
	}
	if _, err := compactOf(c).packEncoded(c, "ns/b", data, nil); err == nil {
		t.Fatal("an object under another key was accepted")
	}
	if _, err := compactOf(c).packEncoded(c, "ns/a", []byte{0xff}, nil); err == nil {
		t.Fatal("garbage was accepted")
	}
}

// A packed object without extras is 32 bytes (a size class): its size is
// most of what a compact cache adds to an object's bytes.
func TestPackedSize(t *testing.T) {
	if n := unsafe.Sizeof(packed{}); n > 32 {
		t.Fatalf("packed is %d bytes", n)
	}
}

// Bytes that do not decode (never cached, unless a Check is wrong) still
// get a place in every index added later: replacing or removing the
// object must not find its index values short.
func TestCompactAddIndexersOverBytesThatDoNotDecode(t *testing.T) {
	c := newCompact(false)
	c.Put("ns/bad", Ref[*corev1.ConfigMap]{p: compactOf(c).newPacked([]byte{0xff, 0xff}, "1", "ns")})
	good, err := c.Hold(arrivalOf(cm("ns", "good", "app", "web")))
	if err != nil {
		t.Fatal(err)
	}
	c.Put("ns/good", good)
	if err := c.AddIndexers(map[string]func(*corev1.ConfigMap) []string{"app": func(o *corev1.ConfigMap) []string { return []string{o.Labels["app"]} }}); err != nil {
		t.Fatal(err)
	}
	again, err := c.Hold(arrivalOf(cm("ns", "bad", "app", "db")))
	if err != nil {
		t.Fatal(err)
	}
	c.Put("ns/bad", again) // replaces the undecodable bytes
	if got, _ := c.ByIndex("app", "db"); len(got) != 1 || got[0].Name != "bad" {
		t.Fatalf("ByIndex(app, db) = %v, want ns/bad", got)
	}
	if got, _ := c.ByIndex("app", "web"); len(got) != 1 || got[0].Name != "good" {
		t.Fatalf("ByIndex(app, web) = %v, want ns/good", got)
	}
	c.Remove("ns/bad")
	if c.Len() != 1 {
		t.Fatalf("%d cached, want 1", c.Len())
	}
}

// An object that comes with the bytes it was decoded from (Arrival.Raw,
// which the decoder keeps for a compact cache), or undecoded, is held as
// those bytes: neither encoded nor decoded again. One that comes without
// them (prepared by a Transform) is encoded, once. The root package's
// TestCompactKeepsTheWireBytes checks that a protobuf stream hands them
// over so.
func TestCompactHoldsTheBytesItIsGiven(t *testing.T) {
	c := newCompact(false)
	k := compactOf(c)
	var encoded, decoded int
	enc, dec := k.encode, k.decode
	k.encode = func(o *corev1.ConfigMap) ([]byte, error) { encoded++; return enc(o) }
	k.decode = func(b []byte) (*corev1.ConfigMap, error) { decoded++; return dec(b) }
	o := cm("ns", "a")
	o.ResourceVersion = "7"
	raw, err := o.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name    string
		a       Arrival[*corev1.ConfigMap]
		encodes int
	}{
		{"with its bytes", Arrival[*corev1.ConfigMap]{Obj: o, Raw: raw}, 0},
		{"undecoded", Arrival[*corev1.ConfigMap]{Undecoded: &protowatch.Raw{Data: raw, Meta: persist.Meta{Namespace: "ns", Name: "a", ResourceVersion: "7"}}}, 0},
		{"without its bytes", arrivalOf(o), 1},
	} {
		encoded, decoded = 0, 0
		r, err := c.Hold(tc.a)
		if err != nil {
			t.Fatalf("%s: %v", tc.name, err)
		}
		if encoded != tc.encodes || decoded != 0 {
			t.Fatalf("%s: encoded %d times, decoded %d, want %d and 0", tc.name, encoded, decoded, tc.encodes)
		}
		if got, ok := c.Load(r); !ok || got.Name != "a" || got.ResourceVersion != "7" {
			t.Fatalf("%s: held %v, %v", tc.name, got, ok)
		}
	}
}

// An encoding of 16 MiB or more, whose length the record cannot hold
// beside the resourceVersion, and a resourceVersion above what it holds
// as a number, are kept whole all the same.
func TestPackedLongEncodingAndLargeResourceVersion(t *testing.T) {
	k := compactOf(newCompact(false))
	long := bytes.Repeat([]byte("0123456789abcdef"), lenMask/16+2)
	for _, c := range []struct {
		data []byte
		rv   string
	}{
		{long, "1"},
		{long[:lenMask-1], "1099511627775"},
		{[]byte("abc"), "1099511627776"},
		{[]byte("abc"), "18446744073709551615"},
		{nil, "7"},
	} {
		p := k.newPacked(c.data, c.rv, "ns")
		if !bytes.Equal(p.data(), c.data) || len(p.data()) != len(c.data) {
			t.Errorf("%d bytes at %s: kept %d bytes", len(c.data), c.rv, len(p.data()))
		}
		if got := k.resourceVersion(p); got != c.rv {
			t.Errorf("%d bytes at %s: resourceVersion %s", len(c.data), c.rv, got)
		}
		if !k.isVersion(Ref[*corev1.ConfigMap]{p: p}, c.rv) {
			t.Errorf("%d bytes at %s: not at its resourceVersion", len(c.data), c.rv)
		}
		if p.namespace() != "ns" {
			t.Errorf("namespace %q", p.namespace())
		}
	}
}
