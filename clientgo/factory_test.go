package clientgo_test

import (
	"context"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// A client-go SharedInformerFactory with kinformer informers (ForFactory):
// Start, WaitForCacheSync, the typed lister, handler resyncs at the
// factory's period, Shutdown.
func TestForFactory(t *testing.T) {
	_, cs, ns := clients(t)
	for _, name := range []string{"a", "b"} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(bounded(t), &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name}, Data: map[string]string{"k": name},
		}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f := informers.NewSharedInformerFactoryWithOptions(cs, time.Second, informers.WithNamespace(ns))
	var made *kinformer.Informer[*corev1.ConfigMap]
	ours := f.InformerFor(&corev1.ConfigMap{}, clientgo.ForFactory(func(c kubernetes.Interface) *kinformer.Informer[*corev1.ConfigMap] {
		made = kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)
		return made
	}))
	cms := f.Core().V1().ConfigMaps()
	if ours == nil || made == nil {
		t.Fatal("InformerFor did not make the kinformer informer")
	}
	var mu sync.Mutex
	resyncs := map[string]int{}
	if _, err := cms.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{UpdateFunc: func(old, cur any) {
		if old == cur {
			mu.Lock()
			defer mu.Unlock()
			resyncs[cur.(*corev1.ConfigMap).Name]++
		}
	}}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	shut := false
	shutdown := func() {
		if !shut {
			shut = true
			cancel()
			f.Shutdown()
		}
	}
	defer shutdown()
	for typ, ok := range f.WaitForCacheSync(bounded(t).Done()) {
		if !ok {
			t.Fatalf("%v not synced", typ)
		}
	}
	if cm, err := cms.Lister().ConfigMaps(ns).Get("b"); err != nil || cm.Data["k"] != "b" {
		t.Fatalf("lister Get(b) = %v, %v", cm, err)
	}
	// The typed accessor's lister reads the kinformer cache: the same object.
	listed, _ := cms.Lister().ConfigMaps(ns).Get("a")
	if cached, ok := made.Cache().GetNamespaced(ns, "a"); !ok || listed != cached {
		t.Fatal("the factory's lister does not read the kinformer informer's cache")
	}
	began := time.Now()
	eventually(t, "three resyncs of each object", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return resyncs["a"] >= 3 && resyncs["b"] >= 3
	})
	if d := time.Since(began); d > 10*time.Second {
		t.Fatalf("three resyncs took %v at a 1s period", d)
	}
	shutdown()
	if !cms.Informer().IsStopped() {
		t.Fatal("the informer runs on after Shutdown")
	}
}
