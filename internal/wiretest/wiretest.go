// Package wiretest builds protobuf watch streams as kube-apiserver sends
// them, for tests of the decoder and of the informers that use it.
package wiretest

import (
	"bytes"
	"encoding/binary"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/scheme"
)

// ManagedCM returns a ConfigMap in namespace "ns" with a bit of everything:
// labels, a long annotation, managedFields, finalizers, data and binary
// data.
func ManagedCM(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{
			Name: name, Namespace: "ns", ResourceVersion: "7", UID: types.UID("u-" + name),
			Labels:      map[string]string{"app": "x"},
			Annotations: map[string]string{"a": strings.Repeat("v", 300)},
			ManagedFields: []metav1.ManagedFieldsEntry{
				{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply, APIVersion: "v1",
					FieldsType: "FieldsV1", FieldsV1: &metav1.FieldsV1{Raw: []byte(`{"f:data":{"f:k":{}}}`)}},
				{Manager: "other", Operation: metav1.ManagedFieldsOperationUpdate, APIVersion: "v1"},
			},
			Finalizers: []string{"f"},
		},
		Data:       map[string]string{"k": strings.Repeat("d", 200), "k2": "v2"},
		BinaryData: map[string][]byte{"b": {0, 1, 2}},
	}
}

// Event encodes obj as kube-apiserver does on a protobuf watch: the
// object as "k8s\0" + runtime.Unknown, inside a metav1.WatchEvent, behind
// a 4-byte length.
func Event(t testing.TB, typ string, obj runtime.Object) []byte {
	t.Helper()
	var buf bytes.Buffer
	ser := protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	if err := scheme.Codecs.EncoderForVersion(ser, corev1.SchemeGroupVersion).Encode(obj, &buf); err != nil {
		t.Fatal(err)
	}
	return Frame(t, typ, buf.Bytes())
}

// Frame wraps raw object bytes in a WatchEvent behind a 4-byte length.
func Frame(t testing.TB, typ string, raw []byte) []byte {
	t.Helper()
	ev := metav1.WatchEvent{Type: typ, Object: runtime.RawExtension{Raw: raw}}
	b, err := ev.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return append(binary.BigEndian.AppendUint32(nil, uint32(len(b))), b...)
}

// UnknownFrame wraps arbitrary object bytes of the given kind.
func UnknownFrame(t testing.TB, typ, kind string, objBytes []byte) []byte {
	t.Helper()
	u := runtime.Unknown{TypeMeta: runtime.TypeMeta{APIVersion: "v1", Kind: kind}, Raw: objBytes}
	b, err := u.Marshal()
	if err != nil {
		t.Fatal(err)
	}
	return Frame(t, typ, append([]byte("k8s\x00"), b...))
}
