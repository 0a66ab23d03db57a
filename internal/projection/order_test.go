package projection_test

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kinformer/kinformer/internal/projection"
)

// A Go struct's field order is not its protobuf numbers' order: PodSpec
// declares initContainers (20) before containers (2), and the fields kept
// are looked up by number in a list sorted by it. Projected in the bytes,
// such paths keep what Apply keeps on the whole decoded object.
func TestProtoFieldsOutOfGoOrder(t *testing.T) {
	for _, paths := range [][]string{
		{"spec.initContainers.image", "spec.containers.image"},
		{"spec.containers.image", "spec.initContainers.image"},
		{"spec.initContainers.image", "spec.containers.image", "spec.volumes.configMap", "metadata.labels"},
	} {
		f, err := projection.Compile(reflect.TypeFor[*corev1.Pod](), paths)
		if err != nil {
			t.Fatal(err)
		}
		pod := fullPod()
		pod.Spec.InitContainers = []corev1.Container{{Name: "init", Image: "init:1", Args: []string{"--y"}}}
		b, err := pod.Marshal()
		if err != nil {
			t.Fatal(err)
		}
		out, ok := projection.NewProjector(f).Proto(b)
		if !ok {
			t.Fatalf("%v: Proto refused a Pod's bytes", paths)
		}
		got := &corev1.Pod{}
		if err := got.Unmarshal(out); err != nil {
			t.Fatal(err)
		}
		want := &corev1.Pod{}
		if err := want.Unmarshal(b); err != nil {
			t.Fatal(err)
		}
		f.Apply(want)
		if !equality.Semantic.DeepEqual(got, want) {
			t.Errorf("%v: the projected bytes decode to another Pod than the whole decode applied (%d containers, %d init containers; want %d, %d)",
				paths, len(got.Spec.Containers), len(got.Spec.InitContainers), len(want.Spec.Containers), len(want.Spec.InitContainers))
		}
		if len(got.Spec.Containers) != 2 || got.Spec.Containers[1].Image != "img:2" || len(got.Spec.InitContainers) != 1 || got.Spec.InitContainers[0].Image != "init:1" {
			t.Errorf("%v: %d containers, %d init containers; want both images kept", paths, len(got.Spec.Containers), len(got.Spec.InitContainers))
		}
	}
}
