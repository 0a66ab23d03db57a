package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"net/http"
	"reflect"
	"sync"

	"github.com/prometheus/client_golang/prometheus"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/apiclient"
	"github.com/kinformer/kinformer/internal/persist"
)

// The Factory: its options and the informers it makes. Their lifetime
// (Start, WaitForSync, Stop, StopShared, Release) is in factory_life.go;
// which requests share an informer, and how their options merge, in
// factory_share.go; the clients, kinds and discovery behind it in
// internal/apiclient.

// FactoryOptions configure a Factory. The zero value (or nil) is valid.
type FactoryOptions struct {
	// Registerer receives the metrics of every informer of the factory
	// (one Metrics, see NewMetrics). Default: no metrics.
	Registerer prometheus.Registerer

	// Metrics, if set, receives the metrics of every informer of the
	// factory instead of a Metrics of its own on Registerer (which is then
	// unused): for a program whose registry already has one, for its own
	// informers or another factory's. Informers of the same resource add
	// up (see Metrics). Default: none.
	Metrics *Metrics

	// Logger is the informers' logger, for those whose Options leave it
	// nil. Default: as Options.Logger's.
	Logger *slog.Logger

	// Scheme maps Go types to kinds for Shared, and decodes them. Default:
	// client-go's kubernetes/scheme.Scheme (every built-in type); give your
	// own, with your typed custom resources added, to share those.
	Scheme *runtime.Scheme

	// StateDir, if set, is every informer's Options.StateDir, unless its
	// first consumer gives one: each keeps its cache in its own file there,
	// and starts warm after a restart (see Options.StateDir). Default:
	// none.
	StateDir string

	// StateKeys, if set, are every informer's Options.StateKeys, unless
	// its first consumer gives some: they encrypt the state files, and
	// without them Secrets are not written (see Options.StateKeys).
	StateKeys [][]byte

	// Sharding, if set, is every informer's Options.Sharding, unless its
	// first consumer gives one: each caches and handles only this
	// replica's share of its resource (a *sharding.Sharding; see Sharder).
	// Default: none.
	Sharding Sharder

	// HTTPClient, if set, carries every request of the factory's
	// informers, as the client of client-go's NewForConfigAndClient: it
	// brings its own transport (TLS, credentials, proxy, dialer), so the
	// rest.Config's transport settings are not used, but its host, path,
	// rate limits, user agent and content types are. Default: one made
	// from the rest.Config (rest.HTTPClientFor).
	HTTPClient *http.Client

	// MaxInitialLists bounds how many of the factory's informers make
	// their initial list at once (a ListGate, Options.ListGate, unless an
	// informer's first consumer gives its own): the others wait their
	// turn, so that a factory starting many informers does not take every
	// seat of its priority level on the API server. Default
	// DefaultMaxInitialLists; negative: no bound.
	MaxInitialLists int

	// Compact, if set, is every informer's Options.Compact, as StateDir
	// is: an informer whose first consumer leaves Compact false is made
	// compact all the same (false is not a choice, as StateDir's "" is
	// not), and every later consumer of it gets it compact, whatever its
	// own Options say. Each cache then holds its objects as bytes and
	// decodes them on every read (see Options.Compact). Default: off.
	Compact bool
}

// Factory makes shared informers, for programs where several controllers
// want the same resource: however many consumers ask for a resource (in a
// namespace, with selectors), there is one informer, one cache, one list
// and one watch on the wire.
//
// The factory owns its informers' lifetime: each runs on a goroutine the
// factory starts (Start, or Shared after Start) and Stop joins. Consumers
// add handlers and read caches, but do not Start, Run or Stop a shared
// informer themselves. Each Shared, Typed, Metadata or Dynamic call
// acquires the informer it returns; a consumer done with it calls
// Release, and the last release stops it (a controller whose CRD went
// away, say, while another consumer still reads the resource keeps it
// running). StopShared stops one whoever holds it.
//
// A Factory is safe for concurrent use.
type Factory struct {
	cfg    *rest.Config
	http   *http.Client    // FactoryOptions.HTTPClient; nil: made from cfg
	scheme *runtime.Scheme // FactoryOptions.Scheme; nil: client-go's
	log    *slog.Logger
	reg    prometheus.Registerer
	state  string // FactoryOptions.StateDir
	// stateKeys are FactoryOptions.StateKeys.
	stateKeys [][]byte
	shard     Sharder   // FactoryOptions.Sharding
	compact   bool      // FactoryOptions.Compact
	gate      *ListGate // FactoryOptions.MaxInitialLists; nil: no bound

	// Set up on first use, because NewFactory returns no error.
	setupOnce sync.Once
	setupErr  error
	api       *apiclient.Clients
	metrics   *Metrics // FactoryOptions.Metrics, or one on Registerer; nil for none

	mu      sync.Mutex // guards entries, retired, started and stopped
	entries map[factoryKey]*factoryEntry
	retired []*factoryEntry // stopped, perhaps not yet ended
	started bool
	stopped bool
}

// factoryEntry is one shared informer.
type factoryEntry struct {
	resource string         // "pods", "deployments.apps": its Name, and named in errors
	inf      sharedInformer // an *Informer[T] of the key's type
	keyFunc  uintptr        // funcID of its KeyFunc as given (0: the default)
	indexes  map[string]uintptr
	// onHandler reports whether the caller runs one of its handlers.
	onHandler func() bool
	// refs counts the calls that returned it, less the Releases: at 0
	// it is stopped and forgotten.
	refs   int
	cancel context.CancelFunc // nil until started
	done   chan struct{}      // closed when its Run has returned; nil until started
}

// sharedInformer is what the factory does with an *Informer[T] of any T.
type sharedInformer interface {
	Run(context.Context) error
	WaitForSync(context.Context) error
	dropMetrics()
	describe() CacheInfo
}

// NewFactory returns a factory of informers that talk to the server cfg
// describes, through one HTTP client and one client-side rate limiter (as a
// clientset). A nil opts means the defaults. Nothing is sent to the server
// until the first Shared or Dynamic, which returns any error in cfg.
func NewFactory(cfg *rest.Config, opts *FactoryOptions) *Factory {
	var o FactoryOptions
	if opts != nil {
		o = *opts
	}
	if o.MaxInitialLists == 0 {
		o.MaxInitialLists = DefaultMaxInitialLists
	}
	return &Factory{cfg: cfg, http: o.HTTPClient, scheme: o.Scheme, log: o.Logger, reg: o.Registerer, metrics: o.Metrics, state: o.StateDir, stateKeys: o.StateKeys, shard: o.Sharding,
		compact: o.Compact, gate: NewListGate(o.MaxInitialLists), entries: map[factoryKey]*factoryEntry{}}
}

// stateUser is the part of a state file's identity (Options.StateKey)
// that says whom cfg acts as: two users of one state directory never
// share a file, so one is never served a cache the other wrote. (Each
// informer restores only after the server has authorized a list of its
// own; this keeps apart also users who may both list.)
func stateUser(cfg *rest.Config) string { return " user=" + persist.User(cfg) }

// setup makes, once, what every informer of the factory shares: its
// clients, and its metrics.
func (f *Factory) setup() error {
	f.setupOnce.Do(func() {
		api, err := apiclient.Connect(f.cfg, f.scheme, f.http)
		if err != nil {
			f.setupErr = fmt.Errorf("kinformer: NewFactory: %w", err)
			return
		}
		if f.metrics == nil && f.reg != nil {
			if f.metrics, err = NewMetrics(f.reg); err != nil {
				f.setupErr = err
				return
			}
		}
		f.api = api
	})
	return f.setupErr
}

// Shared returns the factory's informer of T's resource in namespace (""
// for all namespaces; ignored for a cluster-scoped resource) with opts'
// selectors, making it on first request: the same *Informer[T] for the same
// type, namespace, label selector and field selector. T's kind comes from
// the factory's scheme and its resource from the server's discovery, which
// is cached and refreshed once when a kind is not found (a CRD installed
// since).
//
// Consumers of one informer must agree on its options, and an error says
// which they do not: Transform and KeyFunc (the same function value, or
// both nil for the default, which MetaNamespaceKey given explicitly also
// is: a declared function is the same wherever it is named, but closures
// made twice may be two, even of one literal with equal captures, so make a
// closure once and give that value to every consumer), KeepManagedFields,
// DisableStreamingList, DisableDirectDecoding, PageSize, WatchTimeout,
// IdleMargin, Backoff (after defaults), StateDir, StateNoSync, StateKeys, Sharding
// and Compact (after the factory's: with FactoryOptions.Compact every
// consumer gets a compact informer, so none differs; without it, a
// consumer asking for Compact and one not asking cannot share, since one
// may change the objects it reads and the other's are the cache's own).
// Some merge instead:
//   - Indexers are added to the informer's, before it has started or
//     while it runs (built from its cache); an index already there under
//     the same name must be the same function.
//   - ResyncPeriod: the informer resyncs at the shortest period asked for;
//     asked for after the start, from then on. A resync only fires events
//     for differences, so resyncing more often than a consumer asked
//     changes nothing it sees.
//   - Fields: the informer keeps the union of its consumers' (whole
//     objects if one asks for them). A consumer asking a running informer
//     for more makes it re-list under the union: Modified (CauseRelist)
//     for each object it held, with the new fields; WaitForSync waits for
//     that list.
//   - DetectMutations: any consumer's turns it on, before the start (an
//     error after, wrapping ErrStarted).
//
// The factory sets Name (the resource, "pods" or "deployments.apps") and
// Metrics; Logger defaults to FactoryOptions.Logger. The first consumer's
// Logger is the informer's. With a StateDir, the state file's StateKey
// also says whom the factory's rest.Config acts as: two users never share
// a file.
//
// Built-in types are listed in protobuf, and watched with kinformer's
// direct decoder, as through a clientset; other types in JSON.
func Shared[T Object](f *Factory, namespace string, opts *Options[T]) (*Informer[T], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil, fmt.Errorf("kinformer: Shared[%s]: want a pointer to a struct type registered in the scheme (Dynamic for unstructured objects)", t)
	}
	obj, _ := reflect.New(t.Elem()).Interface().(runtime.Object)
	typed, err := f.api.ForType(obj)
	if err != nil {
		return nil, fmt.Errorf("kinformer: Shared[%s]: %w", t, err)
	}
	k, o := keyOf(f, t, typed.Mapping, namespace, opts)
	return share(f, k, o, nil, func(o *Options[T]) (*Informer[T], error) {
		lw, err := f.api.ListerWatcher(typed, k.namespace)
		if err != nil {
			return nil, fmt.Errorf("kinformer: %w", err)
		}
		return New[T](lw, o), nil
	})
}

// Typed returns the factory's informer of example's type, as Shared does,
// for a program that knows the type only at run time (controller-runtime's
// cache, handed a client.Object): its objects are of example's type, made
// by kinformer's own decoders as Shared's are, and seen as Object. example
// must be a pointer to a struct type of the factory's scheme. Shared[T]
// and Typed of the same type are two informers.
func (f *Factory) Typed(example runtime.Object, namespace string, opts *Options[Object]) (*Informer[Object], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	t := reflect.TypeOf(example)
	if t == nil || t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !t.Implements(reflect.TypeFor[Object]()) {
		return nil, fmt.Errorf("kinformer: Typed(%T): want a pointer to a struct type with metadata, registered in the scheme", example)
	}
	typed, err := f.api.ForType(example)
	if err != nil {
		return nil, fmt.Errorf("kinformer: Typed(%s): %w", t, err)
	}
	k, o := keyOf(f, t, typed.Mapping, namespace, opts)
	k.boxed = true
	return share(f, k, o, t, func(o *Options[Object]) (*Informer[Object], error) {
		lw, err := f.api.ListerWatcher(typed, k.namespace)
		if err != nil {
			return nil, fmt.Errorf("kinformer: %w", err)
		}
		return newInformer[Object](lw, o, t), nil
	})
}

// Metadata returns the factory's informer of the resource gvr as
// PartialObjectMetadata: metadata only, through client-go's metadata
// client, for a program that needs no more of a large resource (owner
// references, labels). Shared as Shared's are.
func (f *Factory) Metadata(gvr schema.GroupVersionResource, namespace string, opts *Options[*metav1.PartialObjectMetadata]) (*Informer[*metav1.PartialObjectMetadata], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	mapping, err := f.api.ForResource(gvr)
	if err != nil {
		return nil, fmt.Errorf("kinformer: Metadata(%s): %w", gvr, err)
	}
	k, o := keyOf(f, reflect.TypeFor[*metav1.PartialObjectMetadata](), mapping, namespace, opts)
	return share(f, k, o, nil, func(o *Options[*metav1.PartialObjectMetadata]) (*Informer[*metav1.PartialObjectMetadata], error) {
		return New[*metav1.PartialObjectMetadata](f.api.Metadata(k.gvr, k.namespace), o), nil
	})
}

// Dynamic returns the factory's informer of the resource gvr as
// unstructured objects (custom resources without Go types), shared as
// Shared's are. The resource must be known to the server's discovery
// (refreshed once if it is not), which also says whether it is namespaced.
func (f *Factory) Dynamic(gvr schema.GroupVersionResource, namespace string, opts *Options[*unstructured.Unstructured]) (*Informer[*unstructured.Unstructured], error) {
	if err := f.setup(); err != nil {
		return nil, err
	}
	mapping, err := f.api.ForResource(gvr)
	if err != nil {
		return nil, fmt.Errorf("kinformer: Dynamic(%s): %w", gvr, err)
	}
	k, o := keyOf(f, reflect.TypeFor[*unstructured.Unstructured](), mapping, namespace, opts)
	return share(f, k, o, nil, func(o *Options[*unstructured.Unstructured]) (*Informer[*unstructured.Unstructured], error) {
		return New[*unstructured.Unstructured](f.api.Dynamic(k.gvr, k.namespace), o), nil
	})
}
