package clientgo

import (
	"time"

	"k8s.io/client-go/informers/internalinterfaces"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
)

// ForFactory makes kinformer informers the ones of a client-go
// informers.SharedInformerFactory: give it to the factory's InformerFor,
// once per type and before the typed accessors are called, and the
// factory's Informer(), Lister(), Start, WaitForCacheSync and Shutdown use
// a kinformer informer for that type, made by newInformer from the
// factory's client.
//
//	f := informers.NewSharedInformerFactoryWithOptions(clientset, 30*time.Second, informers.WithNamespace(ns))
//	f.InformerFor(&corev1.ConfigMap{}, clientgo.ForFactory(func(c kubernetes.Interface) *kinformer.Informer[*corev1.ConfigMap] {
//		return kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)
//	}))
//	lister := f.Core().V1().ConfigMaps().Lister() // kinformer's cache
//
// The factory's resync period (or the one given to
// WithCustomResyncConfig for the type) is the handlers' default resync, as
// WrapWithResync. The factory keeps its namespace and tweakListOptions to
// itself: give newInformer's informer the same (the namespace of its
// typed client, Options.LabelSelector and Options.FieldSelector).
func ForFactory[T kinformer.Object](newInformer func(client kubernetes.Interface) *kinformer.Informer[T]) internalinterfaces.NewInformerFunc {
	return func(client kubernetes.Interface, resync time.Duration) cache.SharedIndexInformer {
		return WrapWithResync(newInformer(client), resync)
	}
}
