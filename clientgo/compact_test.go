package clientgo_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// A compact cache through the adapter (Wrap of a compact kinformer
// informer), against the real server: client-go's generated lister and
// the indexer return the server's objects, each read a new object of the
// caller's own (changing it changes neither the cache nor its indexes),
// handlers get the old and new object of an update, and the lister sees
// the update.
func TestWrapCompact(t *testing.T) {
	_, cs, ns := clients(t)
	for i, node := range []string{"n1", "n1", "n2"} {
		create(t, cs, pod(ns, fmt.Sprintf("p%d", i), node, map[string]string{"app": "web", "i": fmt.Sprint(i)}))
	}
	inf := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{Compact: true})
	if !inf.Cache().Compact() {
		t.Fatal("kinformer.New with Compact: the cache is not compact")
	}
	sii := clientgo.Wrap(inf)
	if err := sii.AddIndexers(cache.Indexers{"node": byNode}); err != nil {
		t.Fatal(err)
	}
	checkCompact(t, cs, ns, sii)
}

func checkCompact(t *testing.T, cs kubernetes.Interface, ns string, sii cache.SharedIndexInformer) {
	t.Helper()
	h := &handler{}
	if _, err := sii.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	run(t, sii)
	if !cache.WaitForCacheSync(bounded(t).Done(), sii.HasSynced) {
		t.Fatal("not synced")
	}
	lister := corelisters.NewPodLister(sii.GetIndexer())
	p, err := lister.Pods(ns).Get("p0")
	if err != nil || p.Spec.NodeName != "n1" || p.Labels["i"] != "0" || p.Annotations["note"] != "n" || p.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("lister Get(p0) = %v, %v", p, err)
	}
	// Each read decodes its own object: a compact cache shares none.
	if again, _ := lister.Pods(ns).Get("p0"); again == p {
		t.Fatal("two Gets returned the same object: the cache is not compact")
	}
	// The caller's own: changing it changes neither the cache nor its
	// indexes (without Compact, the mutation detector would panic here).
	p.Labels["i"], p.Spec.NodeName, p.Annotations["note"] = "changed", "n9", "changed"
	again, err := lister.Pods(ns).Get("p0")
	if err != nil || again.Labels["i"] != "0" || again.Spec.NodeName != "n1" || again.Annotations["note"] != "n" {
		t.Fatalf("after changing a read, Get(p0) = %v, %v", again, err)
	}
	if got, err := lister.List(labels.SelectorFromSet(labels.Set{"i": "1"})); err != nil || len(got) != 1 || got[0].Name != "p1" {
		t.Fatalf("lister.List(i=1) = %v, %v", got, err)
	}
	if got, err := lister.Pods(ns).List(labels.Everything()); err != nil || len(got) != 3 {
		t.Fatalf("lister.Pods(ns).List = %d pods, %v", len(got), err)
	}
	idx := sii.GetIndexer()
	if got, err := idx.ByIndex("node", "n1"); err != nil || len(got) != 2 {
		t.Fatalf("ByIndex(node, n1) = %d, %v", len(got), err)
	}
	if got, err := idx.ByIndex("node", "n9"); err != nil || len(got) != 0 {
		t.Fatalf("ByIndex(node, n9) = %d, %v: a changed read reached the index", len(got), err)
	}
	if obj, ok, err := idx.GetByKey(ns + "/p2"); err != nil || !ok || obj.(*corev1.Pod).Spec.NodeName != "n2" {
		t.Fatalf("GetByKey(p2) = %v, %v, %v", obj, ok, err)
	}

	cur, err := cs.CoreV1().Pods(ns).Get(bounded(t), "p1", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	oldRV := cur.ResourceVersion
	cur.Labels["i"] = "one"
	updated, err := cs.CoreV1().Pods(ns).Update(bounded(t), cur, metav1.UpdateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	key := ns + "/p1"
	eventually(t, "OnUpdate of p1", func() bool { return len(h.find("update", key)) == 1 })
	if c := h.find("update", key)[0]; c.oldRV != oldRV || c.rv != updated.ResourceVersion {
		t.Fatalf("OnUpdate(p1): %+v, want old %s new %s", c, oldRV, updated.ResourceVersion)
	}
	if got, err := lister.Pods(ns).Get("p1"); err != nil || got.Labels["i"] != "one" {
		t.Fatalf("lister Get(p1) after the update = %v, %v", got, err)
	}
	if got, err := lister.List(labels.SelectorFromSet(labels.Set{"i": "one"})); err != nil || len(got) != 1 {
		t.Fatalf("lister.List(i=one) = %v, %v", got, err)
	}
}
