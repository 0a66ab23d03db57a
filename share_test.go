package kinformer

import (
	"reflect"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

// Transform may modify the labels of its object: sharing comes after it,
// so no other object sees the change.
func TestSharingComesAfterTransform(t *testing.T) {
	s := newFakeServer()
	for _, name := range []string{"a", "b", "c"} {
		s.put(&corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: "ns",
			Labels: map[string]string{"app": "web", "name": "x"}}})
	}
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Transform: func(cm *corev1.ConfigMap) (*corev1.ConfigMap, error) {
		if cm.Name == "a" {
			delete(cm.Labels, "name")
		}
		return cm, nil
	}})
	a, _ := inf.Cache().GetByKey("ns/a")
	b, _ := inf.Cache().GetByKey("ns/b")
	c, _ := inf.Cache().GetByKey("ns/c")
	if len(a.Labels) != 1 || len(b.Labels) != 2 || len(c.Labels) != 2 {
		t.Fatalf("labels: a %v, b %v, c %v", a.Labels, b.Labels, c.Labels)
	}
	if !sameMap(b.Labels, c.Labels) || sameMap(a.Labels, b.Labels) {
		t.Fatal("equal labels not shared, or different labels shared")
	}
}
