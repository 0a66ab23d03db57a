package kinformer

import (
	"context"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
)

// Object is what an informer caches: any Kubernetes object with metadata,
// such as *corev1.Pod, *unstructured.Unstructured or
// *metav1.PartialObjectMetadata.
type Object interface {
	runtime.Object
	metav1.Object
}

// ListerWatcher is the shape of every client-go resource client: the typed
// clientset (clientset.CoreV1().Pods(ns)), the dynamic client
// (dyn.Resource(gvr).Namespace(ns)) and the metadata client. L is the list
// type the client returns, for example *corev1.PodList; Go infers it.
type ListerWatcher[L runtime.Object] interface {
	List(ctx context.Context, opts metav1.ListOptions) (L, error)
	Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error)
}

// KeyFunc returns the cache key of an object.
type KeyFunc[T Object] func(obj T) string

// MetaNamespaceKey is the default key: "namespace/name", or just "name" for
// cluster-scoped objects.
func MetaNamespaceKey[T Object](obj T) string {
	if ns := obj.GetNamespace(); ns != "" {
		return ns + "/" + obj.GetName()
	}
	return obj.GetName()
}
