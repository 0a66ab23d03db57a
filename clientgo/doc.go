// Package clientgo makes kinformer informers usable where client-go's are:
// a [cache.SharedIndexInformer] whose GetIndexer client-go's generated
// listers accept, and which fits controller-runtime's
// cache.Options.NewInformer.
//
//	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, cache.Indexers{"node": byNode})
//	lister := corelisters.NewPodLister(sii.GetIndexer())
//
//	pods := kinformer.New[*corev1.Pod](clientset.CoreV1().Pods(""), nil) // or from a Factory
//	sii2 := clientgo.WrapWithResync(pods, resync) // Wrap(pods): no default resync
//
// Under client-go's informers.SharedInformerFactory, ForFactory, given to
// the factory's InformerFor once per type before the typed accessors, makes
// the factory's informer for that type a kinformer one, and keeps the
// factory's resync, listers, Start, WaitForCacheSync and Shutdown (see
// ExampleForFactory):
//
//	f.InformerFor(&corev1.ConfigMap{}, clientgo.ForFactory(func(c kubernetes.Interface) *kinformer.Informer[*corev1.ConfigMap] {
//		return kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)
//	}))
//
// Behind client-go's interface, %T does not tell a kinformer informer from
// client-go's own (a factory's typed accessor wraps either). IsKinformer
// does, and Mode says how it caches ("plain", "compact", "projected",
// "compact+projected"); Run says both in one Info line, "Starting kinformer
// informer", with the resource and type, through the logger of its context
// (klog.FromContext, as client-go's informers log).
//
// Events have client-go's meaning: OnAdd's isInInitialList is true for
// the objects of the informer's first list (and of its state file, and of
// the replay to a handler added later); a Deleted that a re-list inferred
// reaches OnDelete as a [cache.DeletedFinalStateUnknown]; a handler's
// resync period (AddEventHandlerWithResyncPeriod, or the informer's
// default) calls OnUpdate(obj, obj) for every cached object, for that
// handler alone ([kinformer.Informer.Resend]). kinformer's Bookmark events
// are not delivered, and its Error events go to the watch error handler,
// with the context given to RunWithContext (client-go's default handler
// logs through its klog.FromContext logger), except routine reconnects
// ([kinformer.Event.Routine]: the server or the way to it down, or the
// server busy, before the backoff has grown), which the informer gets
// over by reconnecting: as client-go's reflector, it does not call the
// handler for those, and logs them at V(4). An outage that outlasts the
// first attempts reaches the handler.
//
// RemoveEventHandler returns at once, as client-go's: a call in progress
// may still run; cache.ShutDownEventHandler waits for it (kinformer's own
// Informer.RemoveEventHandler always waits). A handler's panic goes to
// client-go's crash handlers (utilruntime.HandleCrash: PanicHandlers,
// "Observed a panic"), then crashes the process if utilruntime.ReallyCrash
// (the default) as client-go's informers do; without it the event is
// skipped and the next ones delivered, the first of them a second later
// (client-go's pause, so that a handler that always panics does not spin;
// other handlers are not held up).
//
// A watch-list (a watch with sendInitialEvents) answered with an error is
// followed at once by a paged LIST, as in client-go's reflector, unless the
// server is unavailable (a closed, refused or reset connection, 429, 503,
// 504) or refuses for good (forbidden, unauthorized, not found: the LIST
// would be refused alike): those try the watch-list again after a backoff.
// The next re-list tries a watch-list again.
//
// Wrap keeps everything of the informer it wraps: protobuf or JSON
// decoding straight off the wire, the shared labels and annotations, the
// state file, sharding. NewSharedIndexInformer, over a client-go
// ListerWatcher that hides its client, lists and watches through it and
// keeps what kinformer does after decoding (managedFields dropped, equal
// maps and strings shared between objects, a handler that never blocks
// the watch).
//
// Cached objects are shared between the cache, every handler and every
// reader, as in client-go, and more so: equal label and annotation maps are
// one map. Never modify them; DeepCopy first. Unless the cache is compact
// (Wrap of an informer with kinformer.Options.Compact, of kinformer.New or
// of a Factory with FactoryOptions.Compact): then it holds each object as
// bytes, compressed against a dictionary of the informer's own, and every
// read through the indexer or a lister decodes a copy that is the
// caller's own, at the cost of that decode. Handlers' objects are shared
// between them all the same. Compact is opt-in here, as it is in
// kinformer: client-go's users rely on a lister's cheap reads. What it
// costs, measured side by side with client-go on 20,000 realistic Pods
// (docs/benchmarks.md): the heap after sync falls to 0.05 of client-go's,
// while a Get of one Pod takes about 12 µs instead of 0.5 µs, and a List
// of the whole cache decodes every object (tens of µs a Pod, and their
// garbage): keep the default for a controller that lists its cache often.
//
//	pods := kinformer.New[*corev1.Pod](clientset.CoreV1().Pods(""), &kinformer.Options[*corev1.Pod]{Compact: true})
//	lister := corelisters.NewPodLister(clientgo.Wrap(pods).GetIndexer())
package clientgo
