package kinformer

import (
	"fmt"
	"reflect"
	"strings"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestMapPoolSharesEqualMaps(t *testing.T) {
	var p sharer
	a := p.share(map[string]string{"app": "web", "tier": "front"})
	b := p.share(map[string]string{"tier": "front", "app": "web"})
	c := p.share(map[string]string{"app": "web", "tier": "back"})
	if !sameMap(a, b) {
		t.Error("equal maps not shared")
	}
	if sameMap(a, c) || c["tier"] != "back" {
		t.Error("different maps shared")
	}
	// Lengths are part of the key: no two different maps collide.
	d := p.share(map[string]string{"ab": "c"})
	e := p.share(map[string]string{"a": "bc"})
	if sameMap(d, e) {
		t.Error("maps with the same concatenation shared")
	}
	big := map[string]string{"last-applied": strings.Repeat("x", mapPoolMaxBytes)}
	if got := p.share(big); !sameMap(got, big) || p.maps.len() != 4 {
		t.Errorf("a large map was pooled (%d entries)", p.maps.len())
	}
	if p.share(nil) != nil {
		t.Error("nil map replaced")
	}
}

func TestMapPoolIsBounded(t *testing.T) {
	var p sharer
	first := p.share(map[string]string{"pod": "0"})
	for i := 1; i < 5*tableGeneration; i++ {
		p.share(map[string]string{"pod": fmt.Sprint(i)})
		if n := p.maps.len(); n > 2*tableGeneration {
			t.Fatalf("%d maps remembered, more than two generations", n)
		}
	}
	if again := p.share(map[string]string{"pod": "0"}); sameMap(again, first) {
		t.Error("a map unseen for generations is still remembered")
	}
	// A map seen in every generation stays shared.
	var q sharer
	keep := q.share(map[string]string{"app": "web"})
	for i := range 5 * tableGeneration {
		q.share(map[string]string{"pod": fmt.Sprint(i)})
		if i%tableGeneration == 0 && !sameMap(q.share(map[string]string{"app": "web"}), keep) {
			t.Fatal("a map in use was forgotten")
		}
	}
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

func TestInternIsBounded(t *testing.T) {
	var sh sharer
	keep := sh.intern(strings.Clone("kube-system"))
	for i := range 5 * tableGeneration {
		sh.intern(fmt.Sprintf("pod-%d", i))
		if n := sh.strs.len(); n > 2*tableGeneration {
			t.Fatalf("%d strings remembered, more than two generations", n)
		}
		if i%tableGeneration == 0 {
			if got := sh.intern(strings.Clone("kube-system")); unsafe.StringData(got) != unsafe.StringData(keep) {
				t.Fatal("a string in use was forgotten")
			}
		}
	}
}

func TestContainersShareEqualResources(t *testing.T) {
	var sh sharer
	pod := func(cpu, mem string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
			}}}}}
	}
	a, b, c, d := pod("100m", "64Mi"), pod("100m", "64Mi"), pod("200m", "64Mi"), pod("100m", "67108864")
	for _, p := range []*corev1.Pod{a, b, c, d} {
		sh.internObject(p, false)
	}
	same := func(x, y corev1.ResourceList) bool {
		return reflect.ValueOf(x).UnsafePointer() == reflect.ValueOf(y).UnsafePointer()
	}
	ra, rb, rc, rd := a.Spec.Containers[0].Resources, b.Spec.Containers[0].Resources, c.Spec.Containers[0].Resources, d.Spec.Containers[0].Resources
	if !same(ra.Requests, rb.Requests) || !same(ra.Limits, rb.Limits) {
		t.Error("equal resources not shared")
	}
	if same(ra.Requests, rc.Requests) || !same(ra.Limits, rc.Limits) {
		t.Error("requests: different ones shared, or equal limits not")
	}
	// 64Mi and 67108864 are the same amount in different formats: not
	// shared, so each pod shows what it was given.
	if same(ra.Limits, rd.Limits) {
		t.Error("quantities of different formats shared")
	}
	if q := rc.Requests[corev1.ResourceCPU]; q.String() != "200m" {
		t.Errorf("cpu request %s", q.String())
	}
	if q := rd.Limits[corev1.ResourceMemory]; q.String() != "67108864" {
		t.Errorf("memory limit %s", q.String())
	}
}
