package objdiff

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// What a report says differs: paths in JSON names, values before and
// after, bounded; semantic equality, so a quantity that cached its string
// is no change.
func TestDiff(t *testing.T) {
	base := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "a", Labels: map[string]string{"app": "web"}},
		Data: map[string]string{"k": "v"}}
	for _, tc := range []struct {
		name   string
		change func(*corev1.ConfigMap)
		want   string
	}{
		{"none", func(*corev1.ConfigMap) {}, ""},
		{"label", func(c *corev1.ConfigMap) { c.Labels["app"] = "db" }, `metadata.labels["app"]: "db", was "web"`},
		{"added and removed", func(c *corev1.ConfigMap) { c.Data["new"] = "x"; delete(c.Data, "k") },
			`data["k"]: absent, was "v"; data["new"]: "x", was absent`},
		{"pointer", func(c *corev1.ConfigMap) { c.Immutable = new(bool) }, "immutable: false, was nil"},
		{"time", func(c *corev1.ConfigMap) { c.CreationTimestamp = metav1.Unix(3600, 0) },
			"metadata.creationTimestamp: 1970-01-01 01:00:00 +0000 UTC, was 0001-01-01 00:00:00 +0000 UTC"},
		{"slice", func(c *corev1.ConfigMap) { c.Finalizers = []string{"f"} }, "metadata.finalizers: 1 items, was 0"},
		{"bounded", func(c *corev1.ConfigMap) {
			c.Name, c.Namespace, c.UID, c.Data["k"] = "b", "other", "u", strings.Repeat("x", 1000)
		}, `metadata.name: "b", was "a"; metadata.namespace: "other", was "ns"; metadata.uid: "u", was ""; …`},
		{"long", func(c *corev1.ConfigMap) { c.Data["k"] = strings.Repeat("é", 100) },
			`data["k"]: "` + strings.Repeat("é", MaxValue-1) + `…, was "v"`},
	} {
		now := base.DeepCopy()
		tc.change(now)
		if got := Diff(now, base); got != tc.want {
			t.Errorf("%s: %q\nwant %q", tc.name, got, tc.want)
		}
	}

	// A quantity that cached its canonical string differs for
	// reflect.DeepEqual, not for what a reader can see.
	q := resource.NewMilliQuantity(1500, resource.DecimalSI)
	pod := &corev1.Pod{Spec: corev1.PodSpec{Volumes: []corev1.Volume{{Name: "v",
		VolumeSource: corev1.VolumeSource{EmptyDir: &corev1.EmptyDirVolumeSource{SizeLimit: q}}}}}}
	was := pod.DeepCopy()
	_ = q.String()
	if reflect.DeepEqual(pod, was) {
		t.Fatal("the quantity did not cache its string: the test shows nothing")
	}
	if got := Diff(pod, was); got != "" {
		t.Fatalf("a quantity's cached string reported: %q", got)
	}
	q.Add(resource.MustParse("1"))
	if got := Diff(pod, was); got != "spec.volumes[0].emptyDir.sizeLimit: 2500m, was 1500m" {
		t.Fatalf("a quantity's change: %q", got)
	}

	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(schema.GroupVersionKind{Version: "v1", Kind: "ConfigMap"})
	u.SetName("a")
	u.SetLabels(map[string]string{"app": "web"})
	uw := u.DeepCopy()
	u.Object["metadata"].(map[string]any)["labels"].(map[string]any)["app"] = "db"
	if got := Diff(u, uw); got != `metadata.labels.app: "db", was "web"` {
		t.Fatalf("unstructured: %q", got)
	}
	// Values that print alike say their types.
	u, uw = uw.DeepCopy(), uw.DeepCopy()
	u.Object["spec"], uw.Object["spec"] = map[string]any{"n": int64(1)}, map[string]any{"n": float64(1)}
	if got := Diff(u, uw); got != "spec.n: 1 (int64), was 1 (float64)" {
		t.Fatalf("types: %q", got)
	}
}
