package kinformer

import (
	"k8s.io/client-go/util/workqueue"
)

// Enqueue hands an informer's changes to a controller's workqueue: it
// registers one handler that adds the Key of every Added, Modified and
// Deleted event for which filter returns true (a nil filter passes all) to
// q, typically client-go's rate-limiting queue
// (workqueue.NewTypedRateLimitingQueueWithConfig[string]). Bookmark and
// Error events are not enqueued: they concern no object. Remove the handler
// with RemoveEventHandler, or stop the informer, before shutting q down.
//
// Only keys cross over, not objects, because the queue de-duplicates them:
// a key changed ten times while it waits is reconciled once, and never by
// two workers at the same time. So the reconcile function reads the current
// state with inf.Cache().GetByKey(key), which is at least as new as the
// event that queued the key; a missing object means it was deleted (clean
// up whatever it owned). The filter sees the whole event (Old, Cause) and
// may drop changes the controller does not care about, such as Modified
// events where only the status changed.
func Enqueue[T Object](inf *Informer[T], q workqueue.TypedInterface[string], filter func(Event[T]) bool) *Registration {
	if q == nil {
		panic("kinformer.Enqueue: nil queue")
	}
	add := func(e Event[T]) {
		if filter == nil || filter(e) {
			q.Add(e.Key)
		}
	}
	// One ordered registration, not three: one goroutine instead of three,
	// and the keys reach the queue in the order of the changes.
	return inf.AddHandlerFuncs(HandlerFuncs[T]{Added: add, Modified: add, Deleted: add})
}
