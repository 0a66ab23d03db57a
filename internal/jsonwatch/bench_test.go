package jsonwatch

import (
	"bytes"
	"fmt"
	"io"
	"strings"
	"testing"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	kjson "k8s.io/apimachinery/pkg/runtime/serializer/json"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/util/framer"
	restclientwatch "k8s.io/client-go/rest/watch"
)

// benchStream is n distinct widget events, as a server sends them.
func benchStream(n int) []byte {
	var b bytes.Buffer
	for i := range n {
		ev := strings.ReplaceAll(widgetEvent, "00001", fmt.Sprintf("%05d", i))
		ev = strings.Replace(ev, `"replicas":3`, fmt.Sprintf(`"replicas":%d`, i%17), 1)
		b.WriteString(ev)
		b.WriteByte('\n')
	}
	return b.Bytes()
}

// The serializers of client-go's dynamic client (k8s.io/client-go/dynamic,
// scheme.go, unexported there): the event decoded with the meta types,
// its object into an Unstructured of the kind it names.
var (
	basicScheme = func() *runtime.Scheme {
		s := runtime.NewScheme()
		metav1.AddToGroupVersion(s, schema.GroupVersion{Version: "v1"})
		return s
	}()
	eventSerializer  = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, basicScheme, basicScheme, kjson.SerializerOptions{})
	objectSerializer = kjson.NewSerializerWithOptions(kjson.DefaultMetaFactory, unstructuredCreater{}, unstructuredTyper{}, kjson.SerializerOptions{})
)

type unstructuredCreater struct{}

func (unstructuredCreater) New(kind schema.GroupVersionKind) (runtime.Object, error) {
	if out, err := basicScheme.New(kind); err == nil {
		return out, nil
	}
	out := &unstructured.Unstructured{}
	out.SetGroupVersionKind(kind)
	return out, nil
}

type unstructuredTyper struct{}

func (unstructuredTyper) ObjectKinds(obj runtime.Object) ([]schema.GroupVersionKind, bool, error) {
	return []schema.GroupVersionKind{obj.GetObjectKind().GroupVersionKind()}, false, nil
}

func (unstructuredTyper) Recognizes(schema.GroupVersionKind) bool { return true }

// BenchmarkDecode: one op decodes 1,000 events; compare the direct
// decoder with client-go's dynamic client's (framer, WatchEvent, then the
// object), managedFields dropped after.
func BenchmarkDecode(b *testing.B) {
	stream := benchStream(1000)
	b.Run("kinformer", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		d := NewDecoder(&Format{StripManagedFields: true, ShareContainers: true})
		for b.Loop() {
			r := d.NewReader(io.NopCloser(bytes.NewReader(stream)))
			for {
				if _, err := r.Next(); err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
			}
		}
	})
	b.Run("client-go", func(b *testing.B) {
		b.SetBytes(int64(len(stream)))
		b.ReportAllocs()
		for b.Loop() {
			rc := io.NopCloser(bytes.NewReader(stream))
			dec := restclientwatchDecoder(stream)
			_ = rc
			for {
				_, obj, err := dec.Decode()
				if err == io.EOF {
					break
				} else if err != nil {
					b.Fatal(err)
				}
				obj.(*unstructured.Unstructured).SetManagedFields(nil)
			}
		}
	})
}

func restclientwatchDecoder(stream []byte) *restclientwatch.Decoder {
	rc := io.NopCloser(bytes.NewReader(stream))
	return restclientwatch.NewDecoder(streaming.NewDecoder(framer.NewJSONFramedReader(rc), eventSerializer), objectSerializer)
}
