package kinformer

import (
	"errors"
	"sort"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/store"
)

func TestMetaNamespaceKey(t *testing.T) {
	for _, tc := range []struct {
		obj  *corev1.ConfigMap
		want string
	}{
		{cm("default", "web"), "default/web"},
		{cm("", "cluster-wide"), "cluster-wide"},
	} {
		if got := MetaNamespaceKey(tc.obj); got != tc.want {
			t.Errorf("MetaNamespaceKey(%s/%s) = %q, want %q", tc.obj.Namespace, tc.obj.Name, got, tc.want)
		}
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: "kube-system"}}
	if got := MetaNamespaceKey(ns); got != "kube-system" {
		t.Errorf("cluster-scoped key = %q", got)
	}
}

// The root's names for the storage engine's: the same index, the same
// sentinel (errors.Is holds across the two).
func TestStoreNames(t *testing.T) {
	if IndexNamespace != store.IndexNamespace {
		t.Errorf("IndexNamespace %q, the store's %q", IndexNamespace, store.IndexNamespace)
	}
	c := newCache[*corev1.ConfigMap](nil, nil)
	if _, err := c.ByIndex("nope", "x"); !errors.Is(err, ErrUnknownIndex) || !strings.Contains(err.Error(), `unknown index "nope"`) {
		t.Errorf("ByIndex of an unknown index: %v", err)
	}
	if _, ok := c.Indexers()[IndexNamespace]; !ok {
		t.Errorf("no %q index: %v", IndexNamespace, c.Indexers())
	}
}

func TestCachePutRemoveReplace(t *testing.T) {
	c := newCache[*corev1.ConfigMap](nil, nil)
	a, b := cm("ns", "a"), cm("ns", "b")
	a.ResourceVersion, b.ResourceVersion = "1", "2"
	if _, existed := c.s.Put("ns/a", plain(a)); existed {
		t.Fatal("put into empty cache reported an existing object")
	}
	c.s.Put("ns/b", plain(b))
	if got, ok := c.Get(cm("ns", "a")); !ok || got != a {
		t.Fatalf("Get(a) = %v, %v", got, ok)
	}
	if _, ok := c.GetByKey("ns/zzz"); ok {
		t.Fatal("GetByKey found a missing key")
	}
	a2 := cm("ns", "a")
	a2.ResourceVersion = "3"
	if old, existed := c.s.Put("ns/a", plain(a2)); !existed || old.Object() != a {
		t.Fatalf("put returned old=%v existed=%v", old, existed)
	}
	if old, existed := c.s.Remove("ns/b"); !existed || old.Object() != b {
		t.Fatalf("remove returned %v %v", old, existed)
	}
	if _, existed := c.s.Remove("ns/b"); existed {
		t.Fatal("second remove found the object")
	}
	if c.Len() != 1 || c.ListKeys()[0] != "ns/a" {
		t.Fatalf("keys = %v", c.ListKeys())
	}

	// replace: a unchanged (same rv), x new, a2 stays the cached instance.
	same := cm("ns", "a")
	same.ResourceVersion = "3"
	x := cm("ns", "x")
	x.ResourceVersion = "4"
	var got []string
	w, events := newTestWriter(c)
	items := c.s.NewItems(0)
	for _, o := range []*corev1.ConfigMap{same, x} {
		w.collect(items, arrivalOf(o), prepared[*corev1.ConfigMap])
	}
	w.replace(items, "4", nil)
	for _, e := range events() {
		got = append(got, string(e.Type)+" "+e.Object.Name)
	}
	if strings.Join(got, ",") != "ADDED x" {
		t.Fatalf("replace events = %v, want only ADDED x", got)
	}
	if o, _ := c.GetByKey("ns/a"); o != a2 {
		t.Fatal("replace swapped an unchanged object instead of keeping the cached one")
	}
	// replace: a changed, x gone.
	changed := cm("ns", "a")
	changed.ResourceVersion = "5"
	got = nil
	var oldSeen *corev1.ConfigMap
	w.replace(plainAll(map[string]*corev1.ConfigMap{"ns/a": changed}), "5", nil)
	for _, e := range events() {
		got = append(got, string(e.Type)+" "+e.Object.Name)
		if e.Type == Modified {
			oldSeen = e.Old
		}
	}
	sort.Strings(got)
	if strings.Join(got, ",") != "DELETED x,MODIFIED a" || oldSeen != a2 {
		t.Fatalf("replace events = %v (old %v)", got, oldSeen)
	}
	if c.Len() != 1 {
		t.Fatalf("Len = %d", c.Len())
	}
}
