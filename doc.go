// Package kinformer keeps a local, indexed, thread-safe cache of Kubernetes
// objects in sync with the API server and tells registered handlers about
// every change.
//
// An Informer lists a resource (streaming the list where the server offers
// it, else in pages), then watches it from the list's resourceVersion with
// bookmarks on, and applies every event to its Cache
// before handing it to the handlers registered for its type: Added,
// Modified, Deleted, Bookmark or Error. It recovers by itself: a watch that
// ends is resumed from the last resourceVersion without re-listing; 410 Gone
// or "too large resource version" forces a re-list, diffed against the
// cache so that handlers see only what really changed; failures are retried
// with exponential backoff and jitter; a silent connection is dropped after
// an idle deadline; and an optional resync re-lists from the server on its
// own clock.
//
// The shortest correct use:
//
//	pods := clientset.CoreV1().Pods("default")
//	inf := kinformer.New[*corev1.Pod](pods, nil)
//	inf.AddEventHandler(kinformer.Added, func(e kinformer.Event[*corev1.Pod]) {
//		log.Println("new pod", e.Object.Name)
//	})
//	go inf.Run(ctx)
//	if err := inf.WaitForSync(ctx); err != nil {
//		return err // 403, 404, bad selector, or ctx done
//	}
//	pod, ok := inf.Cache().GetByKey("default/web-0")
//
// Any client-go resource client works as the source: the typed clientset,
// the dynamic client (T = *unstructured.Unstructured, for CRDs) and the
// metadata client (T = *metav1.PartialObjectMetadata).
//
// With a clientset's typed client and a built-in type, the informer opens
// its watches itself on that client's REST client and decodes the protobuf
// stream straight into T on its own goroutine, cutting managedFields out of
// the bytes before decoding (see Options.DisableDirectDecoding). Other
// clients are used through their Watch; for built-in types a protobuf
// client (rest.Config.ContentType "application/vnd.kubernetes.protobuf")
// decodes faster and allocates less than JSON.
//
// Objects handed out by the cache and in events are shared: never modify
// them. Objects with equal labels or annotations may share one map, and
// repeated short strings are shared between objects. By default
// managedFields are stripped before caching (see Options.KeepManagedFields).
package kinformer
