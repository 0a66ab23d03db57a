package clientgo_test

import (
	"context"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// A client-go SharedInformerFactory whose ConfigMap informer is
// kinformer's: one InformerFor before the typed accessors; the lister,
// Start, WaitForCacheSync, the factory's resync and Shutdown are the
// factory's own.
func ExampleForFactory() {
	var clientset kubernetes.Interface // from kubernetes.NewForConfig
	ns := "default"
	f := informers.NewSharedInformerFactoryWithOptions(clientset, 30*time.Second, informers.WithNamespace(ns))
	f.InformerFor(&corev1.ConfigMap{}, clientgo.ForFactory(func(c kubernetes.Interface) *kinformer.Informer[*corev1.ConfigMap] {
		return kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil) // the factory's namespace
	}))
	configMaps := f.Core().V1().ConfigMaps()
	_, _ = configMaps.Informer().AddEventHandler(cache.ResourceEventHandlerFuncs{
		UpdateFunc: func(old, cur any) {}, // every 30s for every ConfigMap: the factory's resync
	})

	ctx, cancel := context.WithCancel(context.Background())
	f.Start(ctx.Done())
	f.WaitForCacheSync(ctx.Done())
	all, _ := configMaps.Lister().ConfigMaps(ns).List(labels.Everything())
	_ = all
	cancel()
	f.Shutdown()
}
