package protowatch

import (
	"bytes"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/wiretest"
)

// These tests feed the decoder what a real server never sends: corrupt
// frames, duplicated fields, broken objects. That it decodes what a real
// server does send, equal to client-go's decoding, is shown against
// kube-apiserver in integration/direct_test.go.

// testDecoder decodes ConfigMaps, stripping managedFields, and sharing maps
// if share.
func testDecoder(share bool) *decoder {
	f := &Format{Kind: "ConfigMap", New: func() Object { return &corev1.ConfigMap{} },
		Layout: LayoutOf(reflect.TypeFor[corev1.ConfigMap]()), StripManagedFields: true,
		Check: CheckOf(reflect.TypeFor[corev1.ConfigMap]())}
	if share {
		f.Share = &intern.Sharer{}
	}
	return &decoder{f: f}
}

// decoded decodes one frame (without its length) into a ConfigMap.
func decoded(t *testing.T, d *decoder, frame []byte) *corev1.ConfigMap {
	t.Helper()
	ev, err := d.decode(frame)
	if err != nil {
		t.Fatal(err)
	}
	return ev.Object.(*corev1.ConfigMap)
}

func stripped(d *decoder, b []byte) []byte {
	out, _, _ := d.rewriteMeta(b)
	return out
}

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestWithoutManagedFields(t *testing.T) {
	if l := LayoutOf(reflect.TypeFor[corev1.ConfigMap]()); l != (Layout{Meta: 1, ManagedFields: 17, Labels: 11, Annotations: 12}) {
		t.Fatalf("layout of ConfigMap: %+v; want metadata 1, managedFields 17, labels 11, annotations 12", l)
	}
	if l := LayoutOf(reflect.TypeFor[struct{ X int }]()); l != (Layout{}) {
		t.Fatalf("a type without ObjectMeta has layout %+v", l)
	}
	f := testDecoder(false)

	in := wiretest.ManagedCM("a")
	raw, err := in.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	cut := stripped(f, raw)
	if len(cut) >= len(raw) {
		t.Fatalf("stripped %d bytes from %d: nothing cut", len(cut), len(raw))
	}
	var out corev1.ConfigMap
	if err := out.Unmarshal(cut); err != nil {
		t.Fatalf("stripped bytes do not decode: %v", err)
	}
	want := in.DeepCopy()
	want.ManagedFields = nil
	if !reflect.DeepEqual(&out, want) {
		t.Fatalf("stripped object differs:\n got %+v\nwant %+v", &out, want)
	}

	// No managedFields: the bytes are used as they are.
	want.ResourceVersion = "8"
	plain, _ := want.Marshal()
	if got := stripped(f, plain); &got[0] != &plain[0] {
		t.Fatal("an object without managedFields was copied")
	}
	// Garbage is passed on for Unmarshal to reject.
	junk := []byte{0x0a, 0xff, 0xff, 0xff}
	if got := stripped(f, junk); !bytes.Equal(got, junk) {
		t.Fatal("garbage was rewritten")
	}
}

// Equal labels and annotations are found by their wire bytes and shared
// without being decoded again; different ones are not; values are intact.
func TestDecoderSharesMapsByWireBytes(t *testing.T) {
	f := testDecoder(true)
	decode := func(cm *corev1.ConfigMap) *corev1.ConfigMap {
		t.Helper()
		got := decoded(t, f, wiretest.Event(t, "ADDED", cm)[4:])
		want := cm.DeepCopy()
		want.ManagedFields = nil
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoded\n %+v\nwant %+v", got, want)
		}
		return got
	}
	a, b := decode(wiretest.ManagedCM("a")), decode(wiretest.ManagedCM("b"))
	other := wiretest.ManagedCM("c")
	other.Labels = map[string]string{"app": "y"}
	c := decode(other)
	if !sameMap(a.Labels, b.Labels) || !sameMap(a.Annotations, b.Annotations) {
		t.Error("equal maps not shared")
	}
	if sameMap(a.Labels, c.Labels) || !sameMap(a.Annotations, c.Annotations) {
		t.Error("labels: different ones shared, or equal annotations not")
	}
	noLabels := wiretest.ManagedCM("d")
	noLabels.Labels = nil
	if d := decode(noLabels); d.Labels != nil {
		t.Errorf("labels appeared: %v", d.Labels)
	}
}

// A metadata field that occurs twice is merged by Unmarshal (as client-go
// does), but rewriteMeta keys the decoded labels by the first occurrence
// only: the merged map is then handed to other objects.
func TestDecoderDuplicateMetadataIsNotShared(t *testing.T) {
	f := testDecoder(true)
	first, _ := (&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: "ns", Labels: map[string]string{"app": "x"}}}).Marshal()
	extra, _ := (&metav1.ObjectMeta{Labels: map[string]string{"evil": "1"}}).Marshal()
	dup := protowire.AppendBytes(protowire.AppendTag(first, 1, protowire.BytesType), extra)

	var ref corev1.ConfigMap // what client-go decodes
	if err := ref.Unmarshal(dup); err != nil {
		t.Fatal(err)
	}
	got := decoded(t, f, wiretest.UnknownFrame(t, "ADDED", "ConfigMap", dup)[4:])
	if !reflect.DeepEqual(got.Labels, ref.Labels) {
		t.Fatalf("first object: %v, client-go %v", got.Labels, ref.Labels)
	}
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Namespace: "ns", Labels: map[string]string{"app": "x"}}}
	gotB := decoded(t, f, wiretest.Event(t, "ADDED", b)[4:])
	if !reflect.DeepEqual(gotB.Labels, b.Labels) {
		t.Fatalf("object b decoded with labels %v, sent %v", gotB.Labels, b.Labels)
	}
}

// Frame bytes must not be retained by decoded objects.
func TestDecodedObjectsDoNotAliasBuffers(t *testing.T) {
	f := testDecoder(true)
	in := wiretest.ManagedCM("a")
	in.Labels = map[string]string{"app": "x", "z": string(make([]byte, 2000))} // not shareable
	fr := wiretest.Event(t, "ADDED", in)[4:]
	got := decoded(t, f, fr)
	want := got.DeepCopy()
	for i := range fr {
		fr[i] = 0xAA
	}
	for i := range f.scratch[:cap(f.scratch)] {
		f.scratch[:cap(f.scratch)][i] = 0xAA
	}
	if !reflect.DeepEqual(got, want) {
		t.Fatal("decoded object changed with the frame")
	}
}

// A meta field protowire rejects but gogo accepts (a 10-byte varint) makes
// rewriteMeta bail out with lkey holding only the labels seen so far.
func TestDecoderPartialLabelsAreNotShared(t *testing.T) {
	f := testDecoder(true)
	var meta []byte
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 3, protowire.BytesType), []byte("a")) // name
	entry := func(k, v string) []byte {
		var e []byte
		e = protowire.AppendBytes(protowire.AppendTag(e, 1, protowire.BytesType), []byte(k))
		return protowire.AppendBytes(protowire.AppendTag(e, 2, protowire.BytesType), []byte(v))
	}
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 11, protowire.BytesType), entry("app", "x"))
	meta = protowire.AppendTag(meta, 7, protowire.VarintType) // generation: 10-byte varint, last byte 0x7f
	meta = append(meta, 0x81, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x80, 0x7f)
	meta = protowire.AppendBytes(protowire.AppendTag(meta, 11, protowire.BytesType), entry("evil", "1"))
	obj := protowire.AppendBytes(protowire.AppendTag(nil, 1, protowire.BytesType), meta)
	var ref corev1.ConfigMap
	if err := ref.Unmarshal(obj); err != nil {
		t.Fatalf("gogo rejects it too: %v", err)
	}
	f.decode(wiretest.UnknownFrame(t, "ADDED", "ConfigMap", obj)[4:])
	b := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"app": "x"}}}
	gotB := decoded(t, f, wiretest.Event(t, "ADDED", b)[4:])
	if !reflect.DeepEqual(gotB.Labels, b.Labels) {
		t.Fatalf("object b decoded with labels %v, sent %v", gotB.Labels, b.Labels)
	}
}

// Every event type comes out as the frame says, and an ERROR's Status is
// the event's object (the informer turns it into the server's error).
func TestDecodeEventTypesAndErrorStatus(t *testing.T) {
	d := testDecoder(false)
	for _, typ := range []string{"ADDED", "MODIFIED", "DELETED", "BOOKMARK"} {
		ev, err := d.decode(wiretest.Event(t, typ, wiretest.ManagedCM("a"))[4:])
		if err != nil || string(ev.Type) != typ {
			t.Fatalf("%s frame decoded as %q, %v", typ, ev.Type, err)
		}
		if cm, ok := ev.Object.(*corev1.ConfigMap); !ok || cm.Name != "a" {
			t.Fatalf("%s frame: object %#v", typ, ev.Object)
		}
	}
	gone := &metav1.Status{TypeMeta: metav1.TypeMeta{Kind: "Status", APIVersion: "v1"}, Status: metav1.StatusFailure,
		Code: 410, Reason: metav1.StatusReasonExpired, Message: "too old resource version"}
	raw, err := gone.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	ev, err := d.decode(wiretest.UnknownFrame(t, "ERROR", "Status", raw)[4:])
	if err != nil {
		t.Fatalf("ERROR frame: %v", err)
	}
	st, ok := ev.Object.(*metav1.Status)
	if ev.Type != "ERROR" || !ok || st.Code != 410 || st.Reason != metav1.StatusReasonExpired {
		t.Fatalf("ERROR frame decoded as %s %#v", ev.Type, ev.Object)
	}
	// A Status in an event of another type is garbage, not an error.
	if _, err := d.decode(wiretest.UnknownFrame(t, "MODIFIED", "Status", raw)[4:]); err == nil {
		t.Fatal("a MODIFIED event with a Status was accepted")
	}
}
