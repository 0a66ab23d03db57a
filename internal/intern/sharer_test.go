package intern

import (
	"fmt"
	"reflect"
	"strings"
	"sync/atomic"
	"testing"
	"unsafe"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/resource"

	"github.com/kinformer/kinformer/internal/wiretest"
)

func sameMap(a, b map[string]string) bool {
	return reflect.ValueOf(a).UnsafePointer() == reflect.ValueOf(b).UnsafePointer()
}

func TestMapPoolSharesEqualMaps(t *testing.T) {
	var p Sharer
	a := p.Map(map[string]string{"app": "web", "tier": "front"})
	b := p.Map(map[string]string{"tier": "front", "app": "web"})
	c := p.Map(map[string]string{"app": "web", "tier": "back"})
	if !sameMap(a, b) {
		t.Error("equal maps not shared")
	}
	if sameMap(a, c) || c["tier"] != "back" {
		t.Error("different maps shared")
	}
	// Lengths are part of the key: no two different maps collide.
	d := p.Map(map[string]string{"ab": "c"})
	e := p.Map(map[string]string{"a": "bc"})
	if sameMap(d, e) {
		t.Error("maps with the same concatenation shared")
	}
	big := map[string]string{"last-applied": strings.Repeat("x", MaxMapBytes)}
	if got := p.Map(big); !sameMap(got, big) || p.Maps() != 4 {
		t.Errorf("a large map was pooled (%d entries)", p.Maps())
	}
	if p.Map(nil) != nil {
		t.Error("nil map replaced")
	}
}

// Once forgotten, a map changed in place (by someone who should not have)
// is no longer given to new objects.
func TestForgetMaps(t *testing.T) {
	var p Sharer
	a := p.Map(map[string]string{"app": "web"})
	a["app"] = "changed"
	if b := p.Map(map[string]string{"app": "web"}); !sameMap(a, b) {
		t.Fatal("not shared: the test shows nothing")
	}
	var stale atomic.Bool
	p.Stale = &stale
	stale.Store(true)
	if b := p.Map(map[string]string{"app": "web"}); sameMap(a, b) || b["app"] != "web" || p.Maps() != 1 || stale.Load() {
		t.Fatalf("after Stale: %v, %d maps, stale %v", b, p.Maps(), stale.Load())
	}
	a = p.Map(map[string]string{"app": "web"})
	a["app"] = "changed"
	stale.Store(true)
	if b, ok := p.WireMap([]byte{10}); ok || stale.Load() || p.Maps() != 0 {
		t.Fatalf("WireMap after Stale: %v %v, stale %v, %d maps", b, ok, stale.Load(), p.Maps())
	}
}

func TestMapPoolIsBounded(t *testing.T) {
	var p Sharer
	first := p.Map(map[string]string{"pod": "0"})
	for i := 1; i < 5*Generation; i++ {
		p.Map(map[string]string{"pod": fmt.Sprint(i)})
		p.Map(map[string]string{"pod": fmt.Sprint(i)}) // repeated: admitted
		if n := p.Maps(); n > 2*Generation {
			t.Fatalf("%d maps remembered, more than two generations", n)
		}
	}
	if again := p.Map(map[string]string{"pod": "0"}); sameMap(again, first) {
		t.Error("a map unseen for generations is still remembered")
	}
	// A map seen in every generation stays shared.
	var q Sharer
	keep := q.Map(map[string]string{"app": "web"})
	for i := range 5 * Generation {
		q.Map(map[string]string{"pod": fmt.Sprint(i)})
		if i%Generation == 0 && !sameMap(q.Map(map[string]string{"app": "web"}), keep) {
			t.Fatal("a map in use was forgotten")
		}
	}
}

func TestInternIsBounded(t *testing.T) {
	var sh Sharer
	keep := sh.String(strings.Clone("kube-system"))
	for i := range 5 * Generation {
		sh.String(fmt.Sprintf("pod-%d", i))
		if n := sh.Strings(); n > 2*Generation {
			t.Fatalf("%d strings remembered, more than two generations", n)
		}
		if i%Generation == 0 {
			if got := sh.String(strings.Clone("kube-system")); unsafe.StringData(got) != unsafe.StringData(keep) {
				t.Fatal("a string in use was forgotten")
			}
		}
	}
}

// Values seen once are not remembered past AdmitAll entries: objects that
// share little do not fill the tables. A value seen again is remembered at
// its second sighting and shared from the third.
func TestUniqueValuesAreNotRemembered(t *testing.T) {
	var sh Sharer
	for i := range 5 * Generation {
		sh.String(fmt.Sprintf("uid-%d", i))
		sh.Map(map[string]string{"uid": fmt.Sprint(i)})
		sh.RememberWireMap([]byte(fmt.Sprintf("\x0auid-%d", i)), map[string]string{"x": "y"}, true)
	}
	// The string table also holds the maps' keys and values interned.
	if n, m := sh.Strings(), sh.Maps(); n > AdmitAll+8 || m > AdmitAll+8 {
		t.Fatalf("%d strings and %d maps remembered of unique values, want about %d", n, m, AdmitAll)
	}
	a := sh.String(strings.Clone("repeated"))
	b := sh.String(strings.Clone("repeated"))
	c := sh.String(strings.Clone("repeated"))
	if a != "repeated" || unsafe.StringData(c) != unsafe.StringData(b) {
		t.Error("a string seen three times is not shared")
	}
	m1 := sh.Map(map[string]string{"app": "web"})
	m2 := sh.Map(map[string]string{"app": "web"})
	m3 := sh.Map(map[string]string{"app": "web"})
	if m1["app"] != "web" || !sameMap(m2, m3) {
		t.Error("a map seen three times is not shared")
	}
	wire := []byte("\x0aapp=web")
	sh.RememberWireMap(wire, map[string]string{"app": "web"}, true)
	w := map[string]string{"app": "web"}
	sh.RememberWireMap(wire, w, true)
	if got, ok := sh.WireMap(wire); !ok || !sameMap(got, w) {
		t.Error("wire bytes seen twice are not remembered")
	}
}

func TestContainersShareEqualResources(t *testing.T) {
	var sh Sharer
	pod := func(cpu, mem string) *corev1.Pod {
		return &corev1.Pod{Spec: corev1.PodSpec{Containers: []corev1.Container{{Name: "app",
			Resources: corev1.ResourceRequirements{
				Requests: corev1.ResourceList{corev1.ResourceCPU: resource.MustParse(cpu), corev1.ResourceMemory: resource.MustParse(mem)},
				Limits:   corev1.ResourceList{corev1.ResourceMemory: resource.MustParse(mem)},
			}}}}}
	}
	a, b, c, d := pod("100m", "64Mi"), pod("100m", "64Mi"), pod("200m", "64Mi"), pod("100m", "67108864")
	for _, p := range []*corev1.Pod{a, b, c, d} {
		sh.Object(p)
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

func TestInternSharesStrings(t *testing.T) {
	a, b := wiretest.ManagedCM("a"), wiretest.ManagedCM("b")
	// Give b copies of its own, as a decoder would.
	b.Namespace = strings.Clone(a.Namespace)
	b.Labels = map[string]string{strings.Clone("app"): strings.Clone("x")}
	b.Data = map[string]string{strings.Clone("k"): "other"}
	var sh Sharer
	sh.Object(a)
	sh.Object(b)
	same := func(what, x, y string) {
		t.Helper()
		if x != y || unsafe.StringData(x) != unsafe.StringData(y) {
			t.Errorf("%s: %q and %q not shared", what, x, y)
		}
	}
	same("namespace", a.Namespace, b.Namespace)
	same("label value", a.Labels["app"], b.Labels["app"])
	key := func(m map[string]string) string {
		for k := range m {
			if k == "app" || k == "k" {
				return k
			}
		}
		return ""
	}
	same("label key", key(a.Labels), key(b.Labels))
	same("data key", key(a.Data), key(b.Data))
	if a.Data["k"] == b.Data["k"] {
		t.Fatal("test data broken")
	}
	long := a.Annotations["a"]
	if sh.String(long) != long || unsafe.StringData(sh.String(strings.Clone(long))) == unsafe.StringData(long) {
		t.Error("a long string was interned")
	}
}

// A map found by its content and one found by its wire bytes never stand
// in for each other, even if the bytes of their keys were alike.
func TestContentAndWireKeysDoNotCollide(t *testing.T) {
	var sh Sharer
	m := sh.Map(map[string]string{"app": "web"})
	if _, ok := sh.WireMap(append([]byte(nil), sh.buf...)); ok { // the content key just built
		t.Fatal("a content key was found as wire bytes")
	}
	wire := []byte{0x5a, 0x09, 0x0a, 0x03, 'a', 'p', 'p', 0x12, 0x02, 'x', 'y'} // labels {app: xy}
	other := map[string]string{"app": "xy"}
	sh.RememberWireMap(wire, other, true)
	if got, ok := sh.WireMap(wire); !ok || !sameMap(got, other) {
		t.Fatal("a map remembered by its wire bytes was not found")
	}
	if again := sh.Map(map[string]string{"app": "web"}); !sameMap(again, m) {
		t.Fatal("the map remembered by content was lost")
	}
}
