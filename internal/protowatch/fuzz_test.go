package protowatch

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"reflect"
	"testing"

	"google.golang.org/protobuf/encoding/protowire"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/wiretest"
)

// The seeds run as plain tests; `go test -fuzz FuzzX ./internal/protowatch`
// explores. Committed seeds are in testdata/fuzz/<name>.

// FuzzReader: a stream of any bytes never panics, never loops, and costs
// memory in proportion to the bytes that came, not to the lengths they
// claim.
func FuzzReader(f *testing.F) {
	f.Add(wiretest.Event(f, "ADDED", wiretest.ManagedCM("a")))
	f.Add(append(wiretest.Event(f, "BOOKMARK", wiretest.ManagedCM("b")), 0, 0, 0))
	f.Add(wiretest.UnknownFrame(f, "ERROR", "Status", []byte{0x0a, 0x00}))
	f.Add(length(maxFrame))
	f.Add([]byte(`{"type":"ADDED"}`))
	f.Fuzz(func(t *testing.T, b []byte) {
		for _, share := range []bool{false, true} {
			format := testDecoder(share).f
			format.KeepRaw = true // ignored with share
			r := NewReader(io.NopCloser(bytes.NewReader(b)), format)
			var calls int
			var rawErr string
			n := allocated(func() {
				for ; calls <= len(b)/4+2; calls++ {
					ev, err := r.Next()
					var ee *EventError
					if err != nil && !errors.As(err, &ee) {
						break
					}
					if err == nil && rawErr == "" {
						rawErr = checkRaw(r, ev.Object, share)
					}
				}
			})
			if rawErr != "" {
				t.Fatal(rawErr)
			}
			if calls > len(b)/4+1 {
				t.Fatalf("%d calls to Next on %d bytes without an end", calls, len(b))
			}
			// Objects cost more than their bytes (a map entry of two
			// bytes is a string header and a bucket slot), but by a
			// bounded factor.
			if limit := uint64(len(b))*256 + 1<<20; n > limit {
				t.Fatalf("%d bytes allocated for a stream of %d", n, len(b))
			}
			if _, err := r.Next(); err != io.EOF {
				t.Fatalf("after the end: %v", err)
			}
		}
	})
}

// FuzzLazy: an object a Lazy Format leaves undecoded decodes to what the
// same Format without Lazy decodes, and its metadata says the same.
func FuzzLazy(f *testing.F) {
	f.Add(wiretest.Event(f, "ADDED", wiretest.ManagedCM("a")))
	f.Add(append(wiretest.Event(f, "MODIFIED", wiretest.ManagedCM("b")), wiretest.Event(f, "BOOKMARK", wiretest.ManagedCM("b"))...))
	f.Fuzz(func(t *testing.T, b []byte) {
		plain := NewReader(io.NopCloser(bytes.NewReader(b)), testDecoder(false).f)
		lf := *testDecoder(false).f
		lf.Lazy = true
		lazy := NewReader(io.NopCloser(bytes.NewReader(b)), &lf)
		for range len(b)/4 + 2 {
			want, werr := plain.Next()
			got, gerr := lazy.Next()
			if (werr == nil) != (gerr == nil) {
				t.Fatalf("plain: %v, lazy: %v", werr, gerr)
			}
			if werr != nil {
				var ee *EventError
				if !errors.As(werr, &ee) {
					return
				}
				continue
			}
			raw, ok := got.Object.(*Raw)
			if !ok {
				if !reflect.DeepEqual(got, want) {
					t.Fatalf("decoded %+v, want %+v", got, want)
				}
				continue
			}
			cm := &corev1.ConfigMap{}
			if err := cm.Unmarshal(raw.Data); err != nil {
				t.Fatalf("undecoded bytes do not decode: %v", err)
			}
			w := want.Object.(*corev1.ConfigMap)
			if got.Type != want.Type || !reflect.DeepEqual(cm, w) {
				t.Fatalf("%s undecoded: %+v, decoded: %s %+v", got.Type, cm, want.Type, w)
			}
			if m := raw.Meta; m.Name != w.Name || m.Namespace != w.Namespace || m.UID != string(w.UID) || m.ResourceVersion != w.ResourceVersion {
				t.Fatalf("metadata %+v, object %+v", m, w.ObjectMeta)
			}
		}
	})
}

// checkRaw says what is wrong with the bytes RawOf gives for obj: they
// must decode to an object equal to it (none with share).
func checkRaw(r *Reader, obj any, share bool) string {
	raw := r.RawOf(obj)
	cm, _ := obj.(*corev1.ConfigMap)
	switch {
	case raw == nil:
		return "" // none (bytes that keep their managedFields), or not a ConfigMap
	case share:
		return "bytes kept with share"
	}
	again := &corev1.ConfigMap{}
	if err := again.Unmarshal(raw); err != nil {
		return "the kept bytes do not decode: " + err.Error()
	}
	if !reflect.DeepEqual(again, cm) {
		return fmt.Sprintf("the kept bytes decode to %+v, the object is %+v", again, cm)
	}
	return ""
}

// FuzzRewriteMeta: for any object bytes that the type's Unmarshal takes,
// decoding after the surgery (managedFields cut, labels and annotations
// found by their wire bytes and shared) equals decoding them as they are
// and clearing managedFields; so does decoding them again, from the maps
// the first decoding left to share.
func FuzzRewriteMeta(f *testing.F) {
	cm, _ := wiretest.ManagedCM("a").Marshal()
	f.Add(cm)
	dup := protowire.AppendBytes(protowire.AppendTag(bytes.Clone(cm), 1, protowire.BytesType), []byte{0x5a, 0x02, 0x0a, 0x00})
	f.Add(dup)
	f.Add([]byte{0x0a, 0x04, 0x5a, 0x02, 0x0a, 0x00})
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, b []byte) {
		checkSurgery(t, b)
	})
}

// checkSurgery decodes obj as client-go would and with the surgery, twice,
// with one decoder, and fails the test where they differ.
func checkSurgery(t *testing.T, obj []byte) {
	t.Helper()
	want := &corev1.ConfigMap{}
	if err := want.Unmarshal(obj); err != nil {
		return // ours may be lenient where managedFields were broken: no claim
	}
	want.ManagedFields = nil
	d := testDecoder(true)
	fr := wiretest.UnknownFrame(t, "ADDED", "ConfigMap", obj)[4:]
	for i := range 2 {
		ev, err := d.decode(fr)
		if err != nil {
			t.Fatalf("decoding %d: Unmarshal takes the bytes, the decoder says %v", i, err)
		}
		got := ev.Object.(*corev1.ConfigMap)
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("decoding %d differs:\n got %#v\nwant %#v", i, got, want)
		}
	}
}

// FuzzMetaSurgery builds valid objects from fuzzed strings (names,
// labels, annotations, data, managedFields), as a server would send them,
// and checks the surgery on ConfigMaps and Pods.
func FuzzMetaSurgery(f *testing.F) {
	f.Add("a", "ns", "app=x,tier=web", "a="+string(make([]byte, 300)), "k=v", uint8(2), true)
	f.Add("", "", "", "", "", uint8(0), false)
	f.Add("x", "", "=,=", "k=\x00\xff", "", uint8(200), true)
	f.Fuzz(func(t *testing.T, name, ns, labels, annotations, data string, managed uint8, pod bool) {
		meta := metav1.ObjectMeta{Name: name, Namespace: ns, UID: types.UID(name + "-uid"), ResourceVersion: "7",
			Labels: pairs(labels), Annotations: pairs(annotations), Finalizers: []string{data}}
		for i := range int(managed % 8) {
			meta.ManagedFields = append(meta.ManagedFields, metav1.ManagedFieldsEntry{Manager: name, Operation: metav1.ManagedFieldsOperationApply,
				APIVersion: "v1", FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(data)}, Subresource: string(rune('a' + i))})
		}
		var obj interface {
			runtime.Object
			Marshal() ([]byte, error)
		}
		var kind string
		var fresh func() Object
		if pod {
			obj = &corev1.Pod{ObjectMeta: meta, Spec: corev1.PodSpec{NodeName: data, Containers: []corev1.Container{{Name: name, Image: data}}}}
			kind, fresh = "Pod", func() Object { return &corev1.Pod{} }
		} else {
			obj = &corev1.ConfigMap{ObjectMeta: meta, Data: pairs(data)}
			kind, fresh = "ConfigMap", func() Object { return &corev1.ConfigMap{} }
		}
		raw, err := obj.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		want := fresh()
		if err := want.Unmarshal(raw); err != nil {
			t.Fatalf("a marshalled %s does not unmarshal: %v", kind, err)
		}
		intern.ObjectMeta(want).ManagedFields = nil
		d := &decoder{f: &Format{Kind: kind, New: fresh, Layout: LayoutOf(reflect.TypeOf(want).Elem()), StripManagedFields: true, Share: &intern.Sharer{}}}
		fr := wiretest.UnknownFrame(t, "ADDED", kind, raw)[4:]
		for i := range 2 {
			ev, err := d.decode(fr)
			if err != nil {
				t.Fatalf("decoding %d: %v", i, err)
			}
			if !reflect.DeepEqual(ev.Object, want) {
				t.Fatalf("decoding %d differs:\n got %#v\nwant %#v", i, ev.Object, want)
			}
		}
		if kind == "ConfigMap" {
			checkSurgery(t, raw)
		}
	})
}

// pairs reads "k=v,k2=v2" into a map; nil for "".
func pairs(s string) map[string]string {
	if s == "" {
		return nil
	}
	m := map[string]string{}
	for _, kv := range bytes.Split([]byte(s), []byte(",")) {
		k, v, _ := bytes.Cut(kv, []byte("="))
		m[string(k)] = string(v)
	}
	return m
}
