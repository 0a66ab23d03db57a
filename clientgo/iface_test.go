package clientgo

import (
	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
)

// The adapters satisfy client-go's interfaces (a compile-time check).
var (
	_ cache.SharedIndexInformer              = (*informer[*corev1.Pod])(nil)
	_ cache.Indexer                          = (*indexer[*corev1.Pod])(nil)
	_ cache.Controller                       = controller[*corev1.Pod]{}
	_ cache.ResourceEventHandlerRegistration = (*handle[*corev1.Pod])(nil)
	_ cache.SharedIndexInformer              = (*informer[kinformer.Object])(nil)
)
