// Package controllerruntime is controller-runtime's cache on kinformer: a
// cache.NewCacheFunc for a manager, so that an existing controller switches
// in one line.
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{NewCache: kcr.NewCache})
//
// It honours cache.Options as controller-runtime's own cache does:
// HTTPClient (it carries every request of the informers and of the
// RESTMapper; default: one made from the rest.Config), Scheme, Mapper,
// DefaultNamespaces, DefaultLabelSelector, DefaultFieldSelector,
// DefaultTransform, DefaultUnsafeDisableDeepCopy, ByObject (and each
// namespace's Config), SyncPeriod (the handlers' resync, jittered as
// controller-runtime's), ReaderFailOnMissingInformer,
// DefaultWatchErrorHandler and NewInformer. It serves typed, unstructured
// and PartialObjectMetadata objects, takes IndexField before or after the
// start, and Get and List return what controller-runtime's would, errors
// included. A client made with controller-runtime's read-your-writes
// (client.CacheOptions.EnableReadYourWritesConsistency) reads its own
// writes from it, projected kinds included.
//
// Its informers are a kinformer.Factory's: typed built-in kinds are
// decoded by kinformer's protobuf decoder, custom resources and
// unstructured objects by its JSON one (PartialObjectMetadata by
// client-go's), and equal labels and annotations are shared between
// cached objects. managedFields are kept, as controller-runtime's cache
// keeps them (Options.DropManagedFields drops them). Each informer holds
// its objects as compressed bytes (kinformer's Options.Compact), about a
// third of a manager's heap against controller-runtime's cache: every Get
// and List decodes what it returns, in place of the deep copy
// controller-runtime's makes, and a read with UnsafeDisableDeepCopy
// returns the cache's own object, decoded once and kept (Options.Decoded
// says more, and holds decoded objects instead). The informers log
// through controller-runtime's logger, the manager's, named "kinformer",
// each line naming its informer's kind (Options.Logger says what and at
// which level), one at Info as each starts, with its resource and mode
// (IsKinformer tells its informers from those of NewInformer); so do
// their watch errors, unless DefaultWatchErrorHandler is set.
//
// With adds kinformer's own options (Options): a state directory (a
// restarted manager starts warm), sharding between replicas, metrics, a
// logger of its own, managedFields dropped, the cache mutation detector,
// decoded objects instead of bytes, and projections (a kind's cache keeping only the
// fields the controller reads; NewClient refuses to write such an object
// back).
//
// What differs from controller-runtime's cache: EnableWatchBookmarks
// (DefaultEnableWatchBookmarks, and Config's and ByObject's) is ignored,
// as kinformer always asks for bookmarks; without DefaultWatchErrorHandler,
// watch errors go to the logger above, not to client-go's default handler
// (klog); informers of NewInformer, which are the caller's, get none of
// kinformer's options, and keep their own default watch error handler.
package controllerruntime

import (
	"context"
	"fmt"
	"log/slog"
	"maps"
	"net/http"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/client/apiutil"

	"github.com/kinformer/kinformer"
)

// This file restates, from controller-runtime v0.25.2, pkg/cache/cache.go
// (New's defaulting of cache.Options into per-namespace and per-object
// cache.Configs: defaultOpts, defaultConfig, the selectors that keep
// namespaces apart) and pkg/cache/delegating_by_gvk_cache.go (byGVK).

// defaultSyncPeriod is controller-runtime's: the default handler resync.
const defaultSyncPeriod = 10 * time.Hour

// Options are kinformer's own, beyond cache.Options (With). The zero
// value is NewCache's. They apply to the kinformer informers the cache
// makes, not to those of cache.Options.NewInformer.
type Options struct {
	// StateDir keeps every informer's cache on disk (kinformer's
	// Options.StateDir), so that a restarted manager starts warm: its
	// handlers get every object of the file, then what changed while it
	// was down. Each informer restored logs one Info line, "kinformer:
	// restored from the state file", with its kind and the number of
	// objects (see Logger), and another once it has caught up with the
	// server. Default: none.
	StateDir string

	// StateKeys encrypt the state files (kinformer's Options.StateKeys,
	// kinformer.ReadStateKeys reads them from a file): without them
	// Secrets are not kept on disk. Default: none.
	StateKeys [][]byte

	// Sharding makes every informer cache and handle only this replica's
	// share of its resource (a *sharding.Sharding from
	// github.com/kinformer/kinformer/sharding). Default: none.
	Sharding kinformer.Sharder

	// Registerer receives the informers' metrics. Default: none.
	Registerer prometheus.Registerer

	// Logger receives the informers' logs, each line with its informer's
	// kind, resource and namespace: at Warn every list or watch that
	// failed and is retried (a connection cut or refused, a server
	// restarting: routine, never at Error); at Info each informer's
	// start ("kinformer: informer started", with its resource, form and
	// mode: plain, compact, projected or compact+projected, the words of
	// clientgo.Mode), restores from StateDir, re-lists and the like; at
	// Error a handler's panic and a
	// cached object changed in place (DetectMutations). Without
	// cache.Options.DefaultWatchErrorHandler, a failure that retrying
	// cannot fix (kinformer.IsPersistent: forbidden, not found, a bad
	// selector) and an object the informer could not use (a Transform's
	// error) are also logged at Error. Default: controller-runtime's
	// logger (sigs.k8s.io/controller-runtime/pkg/log.Log, which
	// ctrl.SetLogger sets), named "kinformer": slog's Error is logr's
	// error, Warn and Info are V(0), Debug is V(4).
	// slog.New(slog.DiscardHandler) discards everything, handler panics
	// included.
	Logger *slog.Logger

	// DropManagedFields drops metadata.managedFields from every cached
	// object, as kinformer does by default and controller-runtime's
	// TransformStripManagedFields does: they are often half an object's
	// size and rarely read. Off by default, as in controller-runtime's
	// cache, whose behaviour NewCache keeps; recommended unless the
	// controller reads managedFields from the cache.
	DropManagedFields bool

	// DetectMutations turns on kinformer's cache mutation detector for
	// every informer (see kinformer's Options.DetectMutations; also
	// KINFORMER_CACHE_MUTATION_DETECTOR): a cached object changed in
	// place, by a handler or through UnsafeDisableDeepCopy, is reported
	// with an error naming it. Its informers hold decoded objects (see
	// Decoded), and it doubles their memory: for tests and canaries. The
	// environment variable alone checks only informers that hold decoded
	// objects: a compact one's reads are copies, but for those with
	// UnsafeDisableDeepCopy, which are not checked.
	DetectMutations bool

	// Decoded keeps every informer's objects decoded, as controller-
	// runtime's own cache does, and Get and List deep-copy them. By
	// default each informer's cache holds compressed bytes (kinformer's
	// Options.Compact): a cached object takes a fraction of its protobuf
	// (JSON for custom resources) instead of its decoded tree, and every
	// Get and List decodes what it returns, which is then the caller's own
	// without the deep copy controller-runtime's cache makes (a decode
	// costs about what that copy does). A read with UnsafeDisableDeepCopy
	// returns the cache's own object, as controller-runtime promises: the
	// object is decoded by the first such read and kept decoded, beside
	// its bytes, until it changes (kinformer's Cache.GetKept). Informers
	// whose reads are all of that kind (UnsafeDisableDeepCopy in
	// cache.Options or ByObject), that have a Transform, or that detect
	// mutations (DetectMutations) hold decoded objects anyway, as do
	// those of cache.Options.NewInformer, which are not kinformer's. Set
	// Decoded for a controller that lists its whole cache often, where a
	// decode per object and per List costs more than the memory saved
	// (docs/benchmarks.md, the cr section, has both). Default: off.
	Decoded bool

	// Deprecated: compressed bytes are the default (see Decoded); Compact
	// changes nothing.
	Compact bool

	// NamespaceSelector, if not empty, is a label selector of Namespace
	// objects ("tenant=acme"): the cache holds the namespaces whose labels
	// match it, besides cache.Options.DefaultNamespaces, and follows them
	// while it runs. A namespace labelled later joins: the handlers get
	// OnAdd for each of its objects; one unlabelled or deleted leaves: they
	// get OnDelete, with a cache.DeletedFinalStateUnknown, for each. The
	// kinds of ByObject with their own Namespaces keep theirs. It needs
	// permission to list and watch namespaces (as metadata). Not with
	// DefaultNamespaces[""] (every other namespace). See AddNamespace to
	// change the namespaces by hand. Default: none.
	NamespaceSelector string

	// IfAllowed holds each namespaced kind only in the namespaces where
	// the client may list and watch it, as SelfSubjectAccessReviews say
	// (kinformer's Namespaces.IfAllowed, per kind): a controller granted
	// Roles in some namespaces, and not the cluster, caches what it may
	// read instead of failing on the rest. The namespaces are those of
	// cache.Options.DefaultNamespaces and NamespaceSelector (and the
	// Namespaces of ByObject), or every namespace if neither is given
	// (then it needs permission to list and watch namespaces, as
	// metadata). A kind is reviewed in each namespace when first used
	// (GetInformer, Get, List, IndexField) and when a namespace joins,
	// and again every Recheck while the cache runs: a namespace granted
	// joins the kind (its informers' handlers get OnAdd for its objects),
	// one revoked leaves it (OnDelete for each, with a
	// cache.DeletedFinalStateUnknown). Get and List of a kind in a
	// namespace refused fail as for a namespace the cache does not hold;
	// a List of all namespaces lists those allowed; WaitForCacheSync
	// waits for those allowed. A review costs two SelfSubjectAccessReviews
	// (list, watch) per kind and namespace, each Recheck, unless the
	// client may list and watch the kind everywhere (then one per kind):
	// with many namespaces, choose Recheck accordingly. A kind allowed
	// again while its handlers still handle its leave joins at the
	// recheck after. Not with DefaultNamespaces[""] nor a ByObject's
	// Namespaces[""]. Default: off.
	IfAllowed bool
	// Recheck is how often IfAllowed reviews the permissions again.
	// Default 1 minute.
	Recheck time.Duration

	// ByObject projects the cache of some kinds: each kind's informers
	// keep only the fields named (kinformer's Options.Fields: paths in
	// JSON names, such as "metadata.labels", "spec.nodeName",
	// "status.conditions"), in every form it is read in (typed and
	// unstructured; metadata-only reads keep the metadata paths). Keyed
	// by an object of the kind, as cache.Options.ByObject. Fields left out
	// are never decoded, and a kind's cache shrinks to what the
	// controller reads.
	//
	// Whatever Fields say, a projected cache keeps what controller-runtime
	// itself reads: metadata.labels (label selectors, LabelChangedPredicate),
	// metadata.ownerReferences (Owns, handler.EnqueueRequestForOwner),
	// metadata.generation (GenerationChangedPredicate), and the fields the
	// kind's field selector in cache.Options reads; and, as every kinformer
	// projection, name, namespace, uid and resourceVersion (which
	// read-your-writes waits on). An index (IndexField, or AddIndexers on
	// the informer) that reads a field left out is refused with an error
	// wrapping kinformer.ErrFields that names
	// kcr.Options.ByObject[Kind].Fields: list what it reads there.
	//
	// An object read from a projected cache is never one to write back:
	// every copy Get and List return carries the annotation
	// ProjectedAnnotation, which the API server refuses to store (an
	// Update or Create of it fails validation), and a client made by
	// NewClient refuses Create, Update, Status().Update and whole-object
	// patches (client.Merge, client.Apply) of such an object with
	// ErrProjected, before any request. Change a projected object with a
	// patch of what you changed (client.MergeFrom of the object as read),
	// or read it whole with the manager's APIReader first. Reads with
	// UnsafeDisableDeepCopy are the cache's own objects, not copies, and
	// carry no mark: never write them. A path that is not a field of the
	// kind fails NewCache.
	ByObject map[client.Object]ByObject
}

// ByObject is kinformer's options of one kind (Options.ByObject).
type ByObject struct {
	// Fields are the fields the kind's cache keeps (kinformer's
	// Options.Fields). Default: whole objects.
	Fields []string
}

// NewCache is a cache.NewCacheFunc: controller-runtime's cache on
// kinformer informers, with the zero Options (With(Options{})): no state
// directory, sharding or metrics, managedFields kept, logs to
// controller-runtime's logger.
func NewCache(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
	return With(Options{})(cfg, opts)
}

// With returns a cache.NewCacheFunc with kinformer's own options:
// StateDir, StateKeys, Sharding, Registerer, Logger, DropManagedFields,
// DetectMutations, Decoded, NamespaceSelector, IfAllowed, Recheck and
// ByObject (see Options; Compact is deprecated: compressed bytes are the
// default).
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
//		NewCache: kcr.With(kcr.Options{StateDir: dir, DropManagedFields: true}),
//	})
func With(o Options) cache.NewCacheFunc {
	return func(cfg *rest.Config, opts cache.Options) (cache.Cache, error) {
		return newCache(cfg, opts, o)
	}
}

func newCache(cfg *rest.Config, opts cache.Options, ko Options) (cache.Cache, error) {
	if cfg == nil {
		return nil, fmt.Errorf("kcr.NewCache: nil rest.Config")
	}
	// The kinds of ByObject that take DefaultNamespaces follow them as
	// they change (AddNamespace and the like).
	inherit := map[client.Object]bool{}
	for obj, bo := range opts.ByObject {
		inherit[obj] = bo.Namespaces == nil
	}
	var nsSel labels.Selector
	if ko.NamespaceSelector != "" {
		var err error
		if nsSel, err = labels.Parse(ko.NamespaceSelector); err != nil {
			return nil, fmt.Errorf("kcr: Options.NamespaceSelector %q: %w", ko.NamespaceSelector, err)
		}
		if _, ok := opts.DefaultNamespaces[metav1.NamespaceAll]; ok {
			return nil, fmt.Errorf("kcr: Options.NamespaceSelector: %w", errAllNamespaces)
		}
	}
	if ko.IfAllowed {
		if _, ok := opts.DefaultNamespaces[metav1.NamespaceAll]; ok {
			return nil, fmt.Errorf("kcr: Options.IfAllowed: %w", errAllNamespaces)
		}
		for obj, bo := range opts.ByObject {
			if _, ok := bo.Namespaces[metav1.NamespaceAll]; ok {
				return nil, fmt.Errorf("kcr: Options.IfAllowed: ByObject[%T].Namespaces[\"\"]: %w", obj, errAllNamespaces)
			}
		}
		if nsSel == nil && len(opts.DefaultNamespaces) == 0 {
			nsSel = labels.Everything() // every namespace the client may read
		}
	}
	opts, err := defaultOpts(cfg, opts)
	if err != nil {
		return nil, err
	}
	log := loggerOf(ko)
	sh := &shared{
		log: log,
		factory: kinformer.NewFactory(cfg, &kinformer.FactoryOptions{
			Registerer: ko.Registerer, Logger: log, Scheme: opts.Scheme,
			StateDir: ko.StateDir, StateKeys: ko.StateKeys, Sharding: ko.Sharding,
			HTTPClient: opts.HTTPClient,
		}),
		scheme:          opts.Scheme,
		mapper:          opts.Mapper,
		failOnMissing:   opts.ReaderFailOnMissingInformer,
		watchErrHandler: opts.DefaultWatchErrorHandler,
		keepManaged:     !ko.DropManagedFields,
		detectMutations: ko.DetectMutations,
		compact:         !ko.Decoded,
		fields:          map[schema.GroupVersionKind][]string{},
		cfg:             cfg,
		httpClient:      opts.HTTPClient,
		newInformer:     opts.NewInformer,
		recheck:         ko.Recheck,
	}
	if ko.IfAllowed {
		if sh.recheck <= 0 {
			sh.recheck = time.Minute
		}
		if sh.review, err = reviewer(sh); err != nil {
			return nil, err
		}
	}
	for obj, bo := range ko.ByObject {
		gvk, err := apiutil.GVKForObject(obj, opts.Scheme)
		if err != nil {
			return nil, fmt.Errorf("kcr: Options.ByObject: %w", err)
		}
		if len(bo.Fields) == 0 {
			continue
		}
		if err := checkFields(opts.Scheme, gvk, bo.Fields); err != nil {
			return nil, err
		}
		sh.fields[gvk] = slices.Clone(bo.Fields)
	}
	var defaultCache cache.Cache
	var following []*multiNamespaceCache // those that follow the cache's namespaces
	if len(opts.DefaultNamespaces) > 0 || nsSel != nil {
		global := defaultsToConfig(&opts)
		m := newMultiNamespaceCache(sh, opts.DefaultNamespaces, &global, defaultConfig(cache.Config{}, global))
		following = append(following, m)
		defaultCache = m
	} else {
		defaultCache = newNamespaceCache(sh, defaultsToConfig(&opts), metav1.NamespaceAll)
	}
	var top cache.Cache = defaultCache
	if len(opts.ByObject) > 0 {
		d := &byGVK{scheme: opts.Scheme, caches: map[schema.GroupVersionKind]cache.Cache{}, fallback: defaultCache}
		for obj, bo := range opts.ByObject {
			gvk, err := apiutil.GVKForObject(obj, opts.Scheme)
			if err != nil {
				return nil, fmt.Errorf("failed to get GVK for type %T: %w", obj, err)
			}
			follows := false
			if nsSel != nil && inherit[obj] {
				if follows, err = apiutil.IsObjectNamespaced(obj, opts.Scheme, opts.Mapper); err != nil {
					return nil, err
				}
			}
			if len(bo.Namespaces) > 0 || follows {
				m := newMultiNamespaceCache(sh, bo.Namespaces, nil, defaultConfig(byObjectToConfig(bo), defaultsToConfig(&opts)))
				if inherit[obj] && (follows || nsSel == nil) {
					following = append(following, m)
				}
				d.caches[gvk] = m
			} else {
				d.caches[gvk] = newNamespaceCache(sh, byObjectToConfig(bo), metav1.NamespaceAll)
			}
		}
		top = d
	}
	set := newNamespaceSet(sh, following, slices.Collect(maps.Keys(opts.DefaultNamespaces)))
	fc := &factoryCache{Cache: top, factory: sh.factory, namespaces: set}
	if nsSel != nil {
		if err := set.follow(nsSel); err != nil {
			return nil, err
		}
	}
	return fc, nil
}

// shared is what every namespace cache of one NewCache shares.
type shared struct {
	log             *slog.Logger // Options.Logger, or controller-runtime's
	factory         *kinformer.Factory
	scheme          *runtime.Scheme
	mapper          meta.RESTMapper
	failOnMissing   bool
	watchErrHandler toolscache.WatchErrorHandlerWithContext
	keepManaged     bool
	detectMutations bool
	compact         bool // not Options.Decoded: informers hold compressed bytes where they can
	// fields holds the projection of each projected kind (Options.ByObject).
	fields     map[schema.GroupVersionKind][]string
	cfg        *rest.Config
	httpClient *http.Client
	// newInformer is cache.Options.NewInformer: when set, informers are
	// its, over client-go ListWatches, not the factory's.
	newInformer func(toolscache.ListerWatcher, runtime.Object, time.Duration, toolscache.Indexers) toolscache.SharedIndexInformer
	// review says, with Options.IfAllowed, whether the client may list
	// and watch a kind in a namespace (multi_allowed.go); nil without.
	review  func(context.Context, schema.GroupVersionKind, string) (bool, string, error)
	recheck time.Duration // Options.Recheck
}

// factoryCache runs the factory, the one owner of its informers' runs,
// while the cache runs: Start starts it (its informers made before, and
// those made later at once) and stops it once the cache has stopped.
type factoryCache struct {
	cache.Cache
	factory    *kinformer.Factory
	once       atomic.Bool   // Start has been called
	namespaces *namespaceSet // the namespaces that may change
}

// NeedLeaderElection says that every replica runs the cache (a manager
// asks).
func (c *factoryCache) NeedLeaderElection() bool { return false }

func (c *factoryCache) Start(ctx context.Context) error {
	if c.once.Swap(true) {
		return c.Cache.Start(ctx) // its error; the first Start owns the factory
	}
	defer c.factory.Stop()
	c.factory.Start()
	return c.Cache.Start(ctx)
}

// checkFields checks a kind's Fields against its Go type in the scheme
// (as paths only for a kind the scheme has no type of).
func checkFields(s *runtime.Scheme, gvk schema.GroupVersionKind, paths []string) error {
	var example any
	if obj, err := s.New(gvk); err == nil {
		example = obj
	}
	if err := kinformer.CheckFields(example, paths); err != nil {
		why := strings.TrimPrefix(err.Error(), kinformer.ErrFields.Error()+": ")
		return fieldsError(fmt.Sprintf("kcr.Options.ByObject[%s].Fields: %s", gvk.Kind, why))
	}
	return nil
}
