// Package kinformer keeps a local, indexed, thread-safe cache of Kubernetes
// objects in sync with the API server and tells registered handlers about
// every change.
//
// The shortest correct use:
//
//	pods := clientset.CoreV1().Pods("default")
//	inf := kinformer.New[*corev1.Pod](pods, nil)
//	inf.AddEventHandler(kinformer.Added, func(e kinformer.Event[*corev1.Pod]) {
//		log.Println("new pod", e.Key)
//	})
//	go inf.Run(ctx)
//	if err := inf.WaitForSync(ctx); err != nil {
//		return err // 403, 404, bad selector, or ctx done
//	}
//	pod, ok := inf.Cache().GetByKey("default/web-0")
//
// # What an informer does
//
// An [Informer] lists a resource (with a watch-list where the server offers
// it, else in pages), then watches it from the list's resourceVersion with
// bookmarks on, and applies every event to its [Cache] before handing it to
// the handlers registered for its type: [Added], [Modified], [Deleted],
// [Bookmark] or [Error]. It recovers by itself: a watch that ends is
// resumed from the last resourceVersion without re-listing; 410 Gone or
// "too large resource version" forces a re-list, diffed against the cache
// so that handlers see only what really changed; failures are retried with
// exponential backoff and jitter ([Backoff]); a silent connection is dropped
// after an idle deadline ([Options.IdleMargin]); and an optional resync
// ([Options.ResyncPeriod]) re-lists from the server on its own clock.
//
// # Handlers
//
// Each registration has its own queue and goroutine: a slow handler delays
// only itself. Registrations are independent of each other, so a consumer
// that folds state from several event types registers them together, in
// one ordered registration:
//
//	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{
//		Added:    func(e kinformer.Event[*corev1.Pod]) { state[e.Key] = e.Object },
//		Modified: func(e kinformer.Event[*corev1.Pod]) { state[e.Key] = e.Object },
//		Deleted:  func(e kinformer.Event[*corev1.Pod]) { delete(state, e.Key) },
//	})
//
// [Event.Cause] says whether the server sent an event or the informer
// inferred it: a Deleted with [CauseRelist] was found missing by a re-list
// (its final state is unknown), an Added with [CauseReplay] replays the cache
// to a handler added late. A handler that panics is recovered and logged
// ([Options.Logger], else [log/slog.Default]); a handler that wants its
// informer to stop calls [Informer.RequestStop], not [Informer.Stop].
//
// # Clients
//
// Any client-go resource client works as the source: the typed clientset,
// the dynamic client (T = *unstructured.Unstructured, for CRDs) and the
// metadata client (T = *metav1.PartialObjectMetadata). [New] panics if the
// client's list type does not hold T.
//
// Where it can reach the client's REST client, the informer opens its
// watches itself and decodes them on its own goroutine: a clientset's
// typed client (protobuf for built-in types, straight into T), the dynamic
// client (JSON), and every [Factory] informer (protobuf for built-in
// types, JSON for the others). These decoders cut managedFields out of
// the bytes before decoding and share equal labels and annotations
// between objects; with [Options.Compact], a protobuf object the cache
// can keep as it came is not decoded at all until it is read or handled.
// Other clients (the metadata client, fakes, a ListerWatcher of your own)
// are used through their Watch; for built-in types a protobuf client
// (rest.Config.ContentType "application/vnd.kubernetes.protobuf") decodes
// faster and allocates less than JSON. See [Options.DisableDirectDecoding].
//
// # Many consumers, and controllers
//
// A [Factory] gives every consumer of the same type, namespace and selectors
// the same informer ([Shared], [Factory.Dynamic]): one list and one watch
// however many controllers use it. [NewMetrics] exports Prometheus metrics
// of every informer given it (a Factory does so with
// [FactoryOptions.Registerer]). For controllers: [Informer.WaitForResourceVersion]
// to read their own writes, [Enqueue] to hand keys to a client-go workqueue,
// [Cache.Select] and [View] as listers, [Informer.LastError] for health after
// sync, and package kinformertest for unit tests without a server.
//
// # Durable cache
//
// With [Options.StateDir] (or [FactoryOptions.StateDir]) the cache and its
// resourceVersion are kept in a file, and a new process starts warm: Added
// with [CauseRestore] for every object in the file, then exactly the
// changes made while it was down, from a watch at the file's
// resourceVersion (a re-list diffed against the restored cache if that
// history is gone). [Informer.WaitForSync] returns once caught up. An
// unusable file is reported with [ErrSnapshot] and replaced after a full
// list.
//
// # Sharding
//
// With [Options.Sharding] (or [FactoryOptions.Sharding]) an informer caches
// and handles only its replica's share of the resource: the objects whose
// metadata.uid hashes into the slots a [Sharder] gives it. Package sharding
// is the Sharder of a group of replicas on Kubernetes Leases:
//
//	sh := sharding.New(cfg, sharding.Options{Group: "widget-controller", Namespace: "ops", Identity: podName})
//	go sh.Run(ctx)
//	inf := kinformer.New[*corev1.Pod](pods, &kinformer.Options[*corev1.Pod]{Sharding: sh})
//
// Objects that leave the share get [Deleted] and objects that join it
// [Added], both with [CauseReshard]; [Informer.ShardStatus] says what the
// informer holds and whether the API server filters it.
//
// # Sharing and memory
//
// Objects handed out by the cache and in events are shared: never modify
// them. Objects with equal labels or annotations may share one map, and
// repeated short strings are shared between objects. By default
// managedFields are stripped before caching (see [Options.KeepManagedFields]).
//
// [Options.DetectMutations] (or [EnvMutationDetector] in the environment,
// "panic" to panic too; always over a kinformertest.Server) finds code that
// modifies them anyway: each cached object is compared with a copy as it
// is replaced or removed and every second, and a change is reported in an
// Error event wrapping [ErrMutated] that names the object and what differs.
package kinformer
