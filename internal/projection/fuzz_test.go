package projection_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// FuzzProto: whatever bytes a Pod's Check passes (what its Unmarshal
// accepts, but for the generated code's leniencies that read past a
// field's end: garbage no server sends), projecting them first gives what
// clearing the decoded Pod gives.
func FuzzProto(f *testing.F) {
	b, _ := (&corev1.Pod{Spec: corev1.PodSpec{NodeName: "n", Containers: []corev1.Container{{Name: "c", Image: "i"}}}}).Marshal()
	f.Add(b)
	f.Add(b[:len(b)/2])
	fields, _ := projection.Compile(reflect.TypeFor[*corev1.Pod](), podPaths)
	pr := projection.NewProjector(fields)
	check := protowatch.CheckOf(reflect.TypeFor[corev1.Pod]())
	f.Fuzz(func(t *testing.T, b []byte) {
		whole := &corev1.Pod{}
		if err := whole.Unmarshal(b); err != nil || !check.Valid(b) {
			return
		}
		out, ok := pr.Proto(b)
		if !ok {
			return // decoded whole, then cleared: Apply
		}
		got := &corev1.Pod{}
		if err := got.Unmarshal(out); err != nil {
			t.Fatalf("projected bytes do not decode: %v", err)
		}
		fields.Apply(whole)
		if !equality.Semantic.DeepEqual(got, whole) {
			t.Fatalf("got %+v\nwant %+v", got, whole)
		}
	})
}
