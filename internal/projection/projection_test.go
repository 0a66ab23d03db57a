package projection_test

import (
	"bytes"
	"encoding/json"
	"errors"
	"reflect"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"

	"github.com/kinformer/kinformer/internal/jsonwatch"
	"github.com/kinformer/kinformer/internal/projection"
)

var podPaths = []string{"metadata.labels", "metadata.ownerReferences", "spec.nodeName", "spec.containers.image",
	"spec.volumes.configMap", "status.phase", "status.conditions"}

func fullPod() *corev1.Pod {
	tr := true
	return &corev1.Pod{
		TypeMeta: metav1.TypeMeta{Kind: "Pod", APIVersion: "v1"},
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "u-1", ResourceVersion: "42", Generation: 3,
			Labels:            map[string]string{"app": "web"},
			Annotations:       map[string]string{"big": strings.Repeat("x", 100)},
			OwnerReferences:   []metav1.OwnerReference{{APIVersion: "apps/v1", Kind: "ReplicaSet", Name: "rs", UID: "u-rs", Controller: &tr}},
			ManagedFields:     []metav1.ManagedFieldsEntry{{Manager: "kubectl", Operation: metav1.ManagedFieldsOperationApply}},
			CreationTimestamp: metav1.Unix(1700000000, 0),
		},
		Spec: corev1.PodSpec{
			NodeName: "node-1",
			Containers: []corev1.Container{
				{Name: "a", Image: "img:1", Args: []string{"--x"}, Resources: corev1.ResourceRequirements{
					Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse("100m")}}},
				{Name: "b", Image: "img:2", Env: []corev1.EnvVar{{Name: "E", Value: "v"}}},
			},
			Volumes: []corev1.Volume{{Name: "v", VolumeSource: corev1.VolumeSource{
				ConfigMap: &corev1.ConfigMapVolumeSource{LocalObjectReference: corev1.LocalObjectReference{Name: "cm"}}}}},
			Priority: new(int32(7)),
		},
		Status: corev1.PodStatus{
			Phase:      corev1.PodRunning,
			PodIP:      "10.0.0.1",
			Conditions: []corev1.PodCondition{{Type: corev1.PodReady, Status: corev1.ConditionTrue}},
		},
	}
}

// projectedPod is fullPod as the projection podPaths keeps it, written out
// by hand.
func projectedPod() *corev1.Pod {
	full := fullPod()
	return &corev1.Pod{
		TypeMeta: full.TypeMeta,
		ObjectMeta: metav1.ObjectMeta{
			Name: "p", Namespace: "ns", UID: "u-1", ResourceVersion: "42",
			Labels: full.Labels, OwnerReferences: full.OwnerReferences,
		},
		Spec: corev1.PodSpec{
			NodeName:   "node-1",
			Containers: []corev1.Container{{Image: "img:1"}, {Image: "img:2"}},
			Volumes:    []corev1.Volume{{VolumeSource: corev1.VolumeSource{ConfigMap: full.Spec.Volumes[0].ConfigMap}}},
		},
		Status: corev1.PodStatus{Phase: corev1.PodRunning, Conditions: full.Status.Conditions},
	}
}

func TestApplyTyped(t *testing.T) {
	f, err := projection.Compile(reflect.TypeFor[*corev1.Pod](), podPaths)
	if err != nil {
		t.Fatal(err)
	}
	p := fullPod()
	f.Apply(p)
	if want := projectedPod(); !equality.Semantic.DeepEqual(p, want) {
		t.Fatalf("got %+v\nwant %+v", p, want)
	}
	again := p.DeepCopy()
	f.Apply(again)
	if !equality.Semantic.DeepEqual(p, again) {
		t.Fatal("a second Apply changed the object")
	}
}

func TestProtoMatchesApply(t *testing.T) {
	f, err := projection.Compile(reflect.TypeFor[*corev1.Pod](), podPaths)
	if err != nil {
		t.Fatal(err)
	}
	b, err := fullPod().Marshal()
	if err != nil {
		t.Fatal(err)
	}
	pr := projection.NewProjector(f)
	out, ok := pr.Proto(b)
	if !ok {
		t.Fatal("Proto refused a Pod's bytes")
	}
	if len(out) >= len(b) {
		t.Fatalf("projected %d bytes of %d", len(out), len(b))
	}
	got := &corev1.Pod{}
	if err := got.Unmarshal(out); err != nil {
		t.Fatal(err)
	}
	want := projectedPod()
	want.TypeMeta = metav1.TypeMeta{} // not in the protobuf of the object
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Projecting projected bytes changes nothing.
	again, ok := pr.Proto(bytes.Clone(out))
	if !ok || !bytes.Equal(again, out) {
		t.Fatal("projecting again changed the bytes")
	}
	// Broken bytes are refused, not projected into something else.
	if _, ok := pr.Proto(b[:len(b)-3]); ok {
		t.Fatal("truncated bytes projected")
	}
}

func TestJSONMatchesApply(t *testing.T) {
	f, err := projection.Compile(reflect.TypeFor[*corev1.Pod](), podPaths)
	if err != nil {
		t.Fatal(err)
	}
	b, err := json.Marshal(fullPod())
	if err != nil {
		t.Fatal(err)
	}
	// Through jsonwatch's typed decoder, which skips what f leaves out
	// in the token stream (as it decodes a list's item).
	obj, err := jsonwatch.NewDecoder(&jsonwatch.Format{New: func() runtime.Object { return &corev1.Pod{} }, Kind: "Pod", Fields: f}).Object(b)
	if err != nil {
		t.Fatal(err)
	}
	got := obj.(*corev1.Pod)
	want := projectedPod()
	want.TypeMeta = metav1.TypeMeta{} // the typed decoder leaves the kind to the type
	if !equality.Semantic.DeepEqual(got, want) {
		t.Fatalf("got %+v\nwant %+v", got, want)
	}
	// Untyped: the same paths over the same JSON keep the same, whether
	// skipped in the token stream (jsonwatch) or cleared after (Apply).
	u, err := projection.Compile(nil, podPaths)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := utiljson.Unmarshal(b, &m); err != nil {
		t.Fatal(err)
	}
	u.Apply(m)
	skipped, err := jsonwatch.NewDecoder(&jsonwatch.Format{Fields: u}).Object(b)
	if err != nil {
		t.Fatal(err)
	}
	wantMap := skipped.(*unstructured.Unstructured).Object
	if !reflect.DeepEqual(m, wantMap) {
		t.Fatalf("untyped Apply %v\nwant %v", m, wantMap)
	}
}

func TestCompileErrors(t *testing.T) {
	pod := reflect.TypeFor[*corev1.Pod]()
	for _, c := range []struct {
		paths []string
		want  string
	}{
		{[]string{"spec.nodename"}, `PodSpec has no field "nodename"`},
		{[]string{"status.phase.x"}, "kept whole"},
		{[]string{"metadata.labels.app"}, "is a map"},
		{[]string{"spec..nodeName"}, "not a field path"},
		{[]string{""}, "not a field path"},
		{[]string{"spec.containers.resources.requests.cpu"}, "is a map"},
		{[]string{"metadata.creationTimestamp.seconds"}, "kept whole"},
	} {
		_, err := projection.Compile(pod, c.paths)
		if err == nil || !errors.Is(err, projection.ErrPath) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q: %v, want an projection.ErrPath saying %q", c.paths, err, c.want)
		}
	}
	// Leaves with an encoding of their own end a path without an error.
	if _, err := projection.Compile(reflect.TypeFor[*appsv1.Deployment](), []string{"spec.strategy.rollingUpdate.maxSurge", "metadata.creationTimestamp"}); err != nil {
		t.Fatal(err)
	}
	_ = intstr.IntOrString{}
}

func TestPathsAndUnion(t *testing.T) {
	pod := reflect.TypeFor[*corev1.Pod]()
	a, err := projection.Compile(pod, []string{"spec.nodeName", "spec.containers.image", "spec"})
	if err != nil {
		t.Fatal(err)
	}
	if got := a.String(); got != "apiVersion,kind,metadata.name,metadata.namespace,metadata.resourceVersion,metadata.uid,spec" {
		t.Fatalf("paths %s", got)
	}
	b, _ := projection.Compile(pod, []string{"status.phase"})
	u, err := projection.Union(a, b)
	if err != nil {
		t.Fatal(err)
	}
	if !projection.Covers(u, a) || !projection.Covers(u, b) || projection.Covers(a, u) || projection.Covers(b, a) {
		t.Fatal("projection.Covers disagrees with projection.Union")
	}
	if w, _ := projection.Union(a, nil); w != nil || !projection.Covers(nil, a) || projection.Covers(a, nil) {
		t.Fatal("nil is everything")
	}
	if !projection.Equal(u, u) || projection.Equal(a, b) || projection.Equal(a, nil) || !projection.Equal(nil, nil) {
		t.Fatal("projection.Equal")
	}
}

func BenchmarkProto(b *testing.B) {
	f, _ := projection.Compile(reflect.TypeFor[*corev1.Pod](), podPaths)
	raw, _ := fullPod().Marshal()
	pr := projection.NewProjector(f)
	b.ReportAllocs()
	for b.Loop() {
		if _, ok := pr.Proto(raw); !ok {
			b.Fatal("refused")
		}
	}
}

// Inline structs, by value or pointer, and a direct field that hides an
// inline one's, as encoding/json has them.
func TestInline(t *testing.T) {
	type Inner struct {
		A string `json:"a"`
		B string `json:"b"`
	}
	type Ptr struct {
		C string `json:"c"`
	}
	type Outer struct {
		Inner `json:",inline"`
		*Ptr  `json:",inline"`
		B     int `json:"b"`
		D     string
		Meta  metav1.ObjectMeta `json:"metadata"`
	}
	f, err := projection.Compile(reflect.TypeFor[*Outer](), []string{"a", "b", "c"})
	if err != nil {
		t.Fatal(err)
	}
	o := &Outer{Inner: Inner{A: "a", B: "inner"}, Ptr: &Ptr{C: "c"}, B: 2, D: "d"}
	f.Apply(o)
	if o.A != "a" || o.Inner.B != "" || o.B != 2 || o.C != "c" || o.D != "" {
		t.Fatalf("%+v %+v", o, *o.Ptr)
	}
	if _, err := projection.Compile(reflect.TypeFor[*Outer](), []string{"D"}); err != nil {
		t.Fatalf("a field without a json tag is named by its Go name: %v", err)
	}
}

func TestProbe(t *testing.T) {
	f, err := projection.Compile(reflect.TypeFor[*corev1.Pod](), []string{"spec.nodeName"})
	if err != nil {
		t.Fatal(err)
	}
	w, p := f.Probe()
	whole, proj := w.(*corev1.Pod), p.(*corev1.Pod)
	if whole.Spec.NodeName != "x" || proj.Spec.NodeName != "x" || whole.Status.Phase != "x" || proj.Status.Phase != "" ||
		len(whole.Spec.Containers) != 1 || whole.Spec.Containers[0].Image != "x" || proj.Spec.Containers != nil || proj.Name != "x" {
		t.Fatalf("whole %+v\nprojected %+v", whole, proj)
	}
	if u, _ := projection.Compile(nil, []string{"a"}); u != nil {
		if w, p := u.Probe(); w != nil || p != nil {
			t.Fatal("an untyped projection has nothing to probe")
		}
	}
}
