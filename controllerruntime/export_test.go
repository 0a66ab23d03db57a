package controllerruntime

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
)

// SetAcquiredHook sets what is called with each kinformer informer's
// LastError once the factory has handed it out, before its watch error
// handler is set; restore unsets it.
func SetAcquiredHook(f func(lastError func() (error, time.Time))) (restore func()) {
	acquiredHook.Store(&f)
	return func() { acquiredHook.Store(nil) }
}

// SetReviewHook makes review the access review of every cache made with
// Options.IfAllowed until restore, instead of SelfSubjectAccessReviews.
func SetReviewHook(review func(ctx context.Context, gvk schema.GroupVersionKind, namespace string) (bool, string, error)) (restore func()) {
	reviewHook.Store(&review)
	return func() { reviewHook.Store(nil) }
}
