package kinformer

import (
	"sort"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
)

func names2(objs []*corev1.ConfigMap) []string {
	var out []string
	for _, o := range objs {
		out = append(out, o.Namespace+"/"+o.Name)
	}
	sort.Strings(out)
	return out
}

func TestSelectGetNamespacedAndView(t *testing.T) {
	a, b := newFakeServer(), newFakeServer()
	a.put(cm("a", "web-1", "app", "web"))
	a.put(cm("a", "db-1", "app", "db"))
	b.put(cm("b", "web-2", "app", "web"))
	infA, _ := startInformer(t, a, nil)
	infB, _ := startInformer(t, b, &Options[*corev1.ConfigMap]{KeyFunc: func(o *corev1.ConfigMap) string { return "k:" + o.Name }})
	web := labels.SelectorFromSet(labels.Set{"app": "web"})

	if got := names2(infA.Cache().Select("a", web)); len(got) != 1 || got[0] != "a/web-1" {
		t.Fatalf("Select(a, app=web) = %v", got)
	}
	if got := names2(infA.Cache().Select("", nil)); len(got) != 2 {
		t.Fatalf("Select(all) = %v", got)
	}
	if got := infA.Cache().Select("b", nil); len(got) != 0 {
		t.Fatalf("Select(b) on a = %v", got)
	}
	if o, ok := infB.Cache().GetNamespaced("b", "web-2"); !ok || o.Name != "web-2" {
		t.Fatal("GetNamespaced with a custom KeyFunc")
	}
	if _, ok := infA.Cache().GetNamespaced("b", "web-1"); ok {
		t.Fatal("GetNamespaced found an object in another namespace")
	}

	v := NewView(infA, infB)
	if !v.HasSynced() {
		t.Fatal("view not synced")
	}
	if got := names2(v.Select("", web)); len(got) != 2 || got[0] != "a/web-1" || got[1] != "b/web-2" {
		t.Fatalf("view Select(app=web) = %v", got)
	}
	if _, ok := v.GetNamespaced("b", "web-2"); !ok {
		t.Fatal("view GetNamespaced")
	}
	if _, ok := v.GetByKey("a/db-1"); !ok {
		t.Fatal("view GetByKey")
	}
	seen := make(chan string, 10)
	v.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Added: func(e cmEvent) { seen <- e.Object.Namespace + "/" + e.Object.Name }})
	got := map[string]bool{}
	ctx := bounded(t)
	for range 3 {
		select {
		case k := <-seen:
			got[k] = true
		case <-ctx.Done():
			t.Fatalf("view handler replay: %v", got)
		}
	}
	if !got["a/web-1"] || !got["a/db-1"] || !got["b/web-2"] {
		t.Fatalf("view handler replay: %v", got)
	}
}
