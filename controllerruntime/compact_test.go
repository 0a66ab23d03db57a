package controllerruntime_test

import (
	"context"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

func byNodeName(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }

// kcr's default, compressed bytes, in a manager's cache against the real
// server: the informers' caches are compact (each read a new object), and
// Get and List (by namespace, labels and a field index from IndexField;
// typed, unstructured and metadata-only) return what a cache of decoded
// objects (Options.Decoded) returns; changing a returned object does not
// change the next Get; a read with UnsafeDisableDeepCopy returns the
// cache's own object, the same for every such read until it changes, as
// controller-runtime's cache does; an update reaches Get.
func TestCompact(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, p := range []struct{ name, node, app string }{{"a", "n1", "web"}, {"b", "n2", "web"}, {"c", "n1", "api"}} {
		pod := pod(ns, p.name)
		pod.Labels["app"], pod.Spec.NodeName = p.app, p.node
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	// One namespace by a field selector: the informers are the cache's
	// own, not a multi-namespace cache's (whose informers have no indexer).
	cacheOpts := cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)}
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache:               kcr.NewCache,
		Cache:                  cacheOpts,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		t.Fatal(err)
	}
	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNodeName); err != nil {
		t.Fatal(err)
	}
	mctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- mgr.Start(mctx) }()
	t.Cleanup(func() {
		cancel()
		if err := <-done; err != nil {
			t.Errorf("manager: %v", err)
		}
	})
	c := mgr.GetCache()
	wctx, wcancel := context.WithTimeout(ctx, time.Minute)
	defer wcancel()
	if !c.WaitForCacheSync(wctx) {
		t.Fatal("the manager's cache did not sync")
	}
	plain, err := kcr.With(kcr.Options{Decoded: true})(cfg, cacheOpts)
	if err != nil {
		t.Fatal(err)
	}
	if err := plain.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNodeName); err != nil {
		t.Fatal(err)
	}
	runCache(t, plain)

	// The informer is compact: each read through its indexer is decoded
	// anew. With Decoded it is not.
	for _, cc := range []struct {
		what    string
		c       cache.Cache
		compact bool
	}{{"the default", c, true}, {"Decoded", plain, false}} {
		inf, err := cc.c.GetInformer(ctx, &corev1.Pod{})
		if err != nil {
			t.Fatal(err)
		}
		idx := inf.(toolscache.SharedIndexInformer).GetIndexer()
		one, _, _ := idx.GetByKey(ns + "/a")
		two, _, _ := idx.GetByKey(ns + "/a")
		if one == nil || (one == two) == cc.compact {
			t.Fatalf("%s: two reads of the cache: %p and %p, want two objects: %v", cc.what, one, two, cc.compact)
		}
	}

	key := client.ObjectKey{Namespace: ns, Name: "a"}
	var got, want corev1.Pod
	if err := c.Get(ctx, key, &got); err != nil {
		t.Fatal(err)
	}
	if err := plain.Get(ctx, key, &want); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(&got, &want) || got.Spec.NodeName != "n1" || got.Kind != "Pod" {
		t.Fatalf("Get from the compact cache:\n%v\nwithout Compact:\n%v", &got, &want)
	}
	got.Labels["app"], got.Spec.Containers[0].Image = "changed", "changed"
	var raw, raw2 corev1.Pod
	if err := c.Get(ctx, key, &raw, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	if raw.Labels["app"] != "web" || raw.Spec.Containers[0].Image != "busybox" {
		t.Fatalf("Get after changing a returned object: %v", &raw)
	}
	// UnsafeDisableDeepCopy: the cache's own object, the same for every
	// such read (Get and List), as controller-runtime's cache gives it.
	if err := c.Get(ctx, key, &raw2, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	if reflect.ValueOf(raw.Labels).Pointer() != reflect.ValueOf(raw2.Labels).Pointer() {
		t.Fatal("two Gets with UnsafeDisableDeepCopy returned two objects")
	}
	var rawList corev1.PodList
	if err := c.List(ctx, &rawList, client.InNamespace(ns), client.MatchingLabels{"app": "web"}, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	i := slices.IndexFunc(rawList.Items, func(p corev1.Pod) bool { return p.Name == "a" })
	if i < 0 || reflect.ValueOf(rawList.Items[i].Labels).Pointer() != reflect.ValueOf(raw.Labels).Pointer() {
		t.Fatal("a List with UnsafeDisableDeepCopy returned another object than Get's")
	}
	raw.Labels["unsafe"] = "changed" // the cache's own: seen by the next such read
	var raw3 corev1.Pod
	if err := c.Get(ctx, key, &raw3, client.UnsafeDisableDeepCopy); err != nil {
		t.Fatal(err)
	}
	if raw3.Labels["unsafe"] != "changed" {
		t.Fatal("a change to the cache's own object is not seen by the next UnsafeDisableDeepCopy read")
	}
	var again corev1.Pod // a copy read decodes the bytes, as they came
	if err := c.Get(ctx, key, &again); err != nil {
		t.Fatal(err)
	}
	if !equality.Semantic.DeepEqual(&again, &want) {
		t.Fatalf("Get after changing returned objects:\n%v\nwant\n%v", &again, &want)
	}

	lists := []struct {
		what string
		opts []client.ListOption
		want []string
	}{
		{"namespace", []client.ListOption{client.InNamespace(ns)}, []string{"a", "b", "c"}},
		{"labels", []client.ListOption{client.MatchingLabels{"app": "web"}}, []string{"a", "b"}},
		{"field index", []client.ListOption{client.InNamespace(ns), client.MatchingFields{"spec.nodeName": "n1"}}, []string{"a", "c"}},
		{"field index, all namespaces", []client.ListOption{client.MatchingFields{"spec.nodeName": "n2"}}, []string{"b"}},
	}
	for _, l := range lists {
		var list, plainList corev1.PodList
		if err := c.List(ctx, &list, l.opts...); err != nil {
			t.Fatalf("%s: %v", l.what, err)
		}
		if err := plain.List(ctx, &plainList, l.opts...); err != nil {
			t.Fatalf("%s, without Compact: %v", l.what, err)
		}
		byName := func(a, b corev1.Pod) int { return strings.Compare(a.Name, b.Name) }
		slices.SortFunc(list.Items, byName)
		slices.SortFunc(plainList.Items, byName)
		var names []string
		for _, p := range list.Items {
			names = append(names, p.Name)
		}
		if !slices.Equal(names, l.want) || !equality.Semantic.DeepEqual(list.Items, plainList.Items) {
			t.Fatalf("List by %s: %v, want %v and the items of a cache without Compact", l.what, names, l.want)
		}
		list.Items[0].Labels["app"] = "changed"
	}

	// Unstructured and metadata-only, each its own informer.
	u := &unstructured.Unstructured{}
	u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
	if err := c.Get(ctx, key, u); err != nil {
		t.Fatal(err)
	}
	if node, _, _ := unstructured.NestedString(u.Object, "spec", "nodeName"); node != "n1" || u.GetLabels()["app"] != "web" {
		t.Fatalf("unstructured Get: %v", u.Object)
	}
	var metas, plainMetas metav1.PartialObjectMetadataList
	metas.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	plainMetas.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("PodList"))
	if err := c.List(ctx, &metas, client.InNamespace(ns), client.MatchingLabels{"app": "api"}); err != nil {
		t.Fatal(err)
	}
	if err := plain.List(ctx, &plainMetas, client.InNamespace(ns), client.MatchingLabels{"app": "api"}); err != nil {
		t.Fatal(err)
	}
	if len(metas.Items) != 1 || metas.Items[0].Name != "c" || !equality.Semantic.DeepEqual(metas.Items, plainMetas.Items) {
		t.Fatalf("metadata List:\n%v\nwithout Compact:\n%v", metas.Items, plainMetas.Items)
	}

	// An update reaches the compact cache.
	cur, err := cs.CoreV1().Pods(ns).Get(ctx, "a", metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	cur.Labels["app"] = "api"
	if _, err := cs.CoreV1().Pods(ns).Update(ctx, cur, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(30 * time.Second)
	for {
		var p corev1.Pod
		if err := c.Get(ctx, key, &p); err != nil {
			t.Fatal(err)
		}
		if p.Labels["app"] == "api" {
			var u corev1.Pod // a new version: the cache's own anew
			if err := c.Get(ctx, key, &u, client.UnsafeDisableDeepCopy); err != nil {
				t.Fatal(err)
			}
			if u.Labels["app"] != "api" || u.Labels["unsafe"] != "" {
				t.Fatalf("UnsafeDisableDeepCopy Get after an update: %v", u.Labels)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the update did not reach the compact cache: %v", p.Labels)
		}
		time.Sleep(20 * time.Millisecond)
	}
}
