package kinformer

import (
	"fmt"
	"log/slog"
	"maps"
	"os"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer/internal/backoff"
	"github.com/kinformer/kinformer/internal/projection"
)

// Options configure an Informer. The zero value (or a nil *Options) is
// valid: every field has a default, given in its comment.
type Options[T Object] struct {
	// LabelSelector and FieldSelector restrict what is listed and watched.
	// An object that stops matching fires Deleted.
	LabelSelector string
	FieldSelector string

	// ResyncPeriod, if positive, re-lists from the server on its own clock,
	// whether or not the watch is busy, and fires events only for the
	// differences found: a consistency check, not a replay of the cache.
	ResyncPeriod time.Duration

	// ListGate, if set, bounds how many informers sharing it make their
	// initial list at once (see ListGate): this one waits for a place
	// before each list it makes until it first syncs. A Factory gives its
	// informers one of FactoryOptions.MaxInitialLists places. Default:
	// none.
	ListGate *ListGate

	// StartupLogAfter is how long the informer's first list, or a
	// handler's initial pass, may take before one Info log line says
	// which is not done and how far it is (Informer.Startup,
	// Registration.Startup). Default 30 seconds; negative: never.
	StartupLogAfter time.Duration

	// KeyFunc keys the cache. Default [MetaNamespaceKey].
	KeyFunc KeyFunc[T]

	// Indexers adds named indexes to the cache, queried with
	// [Cache.ByIndex]. [IndexNamespace] is always present.
	Indexers map[string]IndexFunc[T]

	// Transform is applied to every object before it is cached and handed to
	// handlers; it may modify the object in place and return it. An error
	// fires an Error event wrapping [ErrTransform], and the object is skipped.
	// It runs after managedFields have been stripped, and must not change
	// what KeyFunc reads (name, namespace).
	Transform func(T) (T, error)

	// Fields, if set, projects the cache: it keeps only these fields of
	// each object, named by their paths in JSON ("metadata.labels",
	// "spec.nodeName", "spec.containers.image": a path through a list
	// names the field in each element; one that ends at a struct, a map
	// or a list keeps it whole), and always metadata.name, namespace, uid
	// and resourceVersion (what the default key and IndexNamespace read).
	// A KeyFunc, Indexers or Transform of your own must read only kept
	// fields: list what they read. A KeyFunc or an index found reading a
	// field left out (each is called on a probe object with every field
	// set, whole and projected: a lookup of one map key it cannot see) is
	// an ErrFields error as a bad path is, and AddIndexers refuses one. The fields left out are never decoded:
	// for built-in types they are cut from the protobuf bytes before
	// decoding, for custom resources and unstructured objects skipped
	// unread in the JSON; objects that reach kinformer decoded whole (a
	// paged list through a clientset, DisableDirectDecoding) are cleared
	// of them before they are cached. Events, Get, List, ByIndex and
	// Select see the projected object, and with Compact the projected
	// bytes are what is stored; with StateDir the projection is part of
	// the state file's identity. A path that is not a field of the type
	// (checked against the Go type; an unstructured informer's paths are
	// taken as they are) makes the informer fail (Run, WaitForSync and
	// LastError return an error wrapping ErrFields), and a Factory or
	// kcr return it at once.
	//
	// A projected object is never one to write back: an Update of it
	// would clear on the server every field left out. Change objects with
	// a patch of the fields you mean to change (server-side apply, or a
	// JSON merge patch), never with an Update of a cached object.
	// Default: whole objects.
	Fields []string
	// KeepManagedFields keeps metadata.managedFields, which by default are
	// dropped: they are often half an object's size and rarely read.
	KeepManagedFields bool

	// DisableStreamingList makes every list a paged LIST. By default the
	// informer lists with a watch-list (a watch with sendInitialEvents,
	// KEP-3157, which Kubernetes calls "watch-list") where the server offers
	// it: objects are decoded, transformed and
	// stored one by one, never held as a whole list. Servers without it
	// (before 1.27, or with the WatchList feature off) are detected and
	// paged instead.
	DisableStreamingList bool

	// DisableDirectDecoding makes every watch and list go through the
	// client's own methods and decoders. By default kinformer opens the
	// watch itself on the client's REST client, with the same configuration
	// and credentials, and decodes the stream straight into T:
	//   - built-in types through a clientset's typed client
	//     (clientset.CoreV1().Pods(ns), …) or a Factory: protobuf, one
	//     reused buffer per watch instead of three copies of every object,
	//     managedFields cut out of the bytes instead of decoded and dropped;
	//   - custom resources through client-go's dynamic client
	//     (dyn.Resource(gvr).Namespace(ns)), a Factory's Dynamic, or a typed
	//     client or Factory for a Go struct without protobuf: JSON, in one
	//     pass over the tokens, managedFields skipped unread, field names
	//     and short values shared between objects, and small repeated
	//     objects too when there is no Transform.
	//     Their paged lists are decoded the same way.
	// The resource's name is looked up once by discovery where the client
	// does not say it; a server that refuses discovery or the format is
	// detected and the client's own Watch used instead. Paged lists of
	// built-in types go through the client.
	DisableDirectDecoding bool

	// PageSize is the limit of each page of a paged list. Default 500.
	PageSize int64

	// WatchTimeout is the shortest server-side timeout asked for a watch;
	// each watch asks for a random duration in [WatchTimeout, 2*WatchTimeout)
	// so that many informers do not reconnect in step. Default 5 minutes.
	WatchTimeout time.Duration

	// IdleMargin is how long past its server-side timeout a watch may stay
	// silent (no event, no bookmark, not closed) before the informer takes
	// the connection for dead, drops it and resumes. Default 30 seconds.
	IdleMargin time.Duration

	// ProbeAfter is how long the HTTP/2 connection under a watch may carry
	// nothing before kinformer asks whether it is alive: a GET
	// /livez?exclude=etcd (which the API server does not queue) sent on
	// that same connection, at most one at a time per connection
	// however many watches share it, and none while events flow. No
	// answer within ProbeTimeout, and the connection is taken for dead:
	// it is closed, and every watch on it resumes on a new one. A quiet
	// connection costs a probe per ProbeAfter; a dead one is found within
	// ProbeAfter + ProbeTimeout of its last frame. Default 5 seconds;
	// negative: never probe (the transport's own HTTP/2 health check,
	// 45 s in client-go, and IdleMargin remain). It needs the client's
	// HTTP client: a clientset's typed client, client-go's dynamic client,
	// a Factory's informers, or a ListerWatcher with a
	// ProbeClient() rest.Interface method. Over HTTP/1.1 a watch holds its
	// connection alone and nothing can be sent on it: not probed.
	ProbeAfter time.Duration

	// ProbeTimeout is how long a probe (ProbeAfter) may take before the
	// connection is taken for dead: longer than a slow server's answer.
	// Default 5 seconds.
	ProbeTimeout time.Duration

	// Backoff paces retries after failed lists and watches.
	// Zero fields take [DefaultBackoff]'s values.
	Backoff Backoff

	// StateDir, if set, keeps the cache and its resourceVersion on disk, in
	// a go.etcd.io/bbolt file in this directory named for what the
	// informer watches (resource, namespace, selectors, key function,
	// format; a Factory's also whom its rest.Config acts as), so that a new
	// process with the same options starts warm. The file is read and
	// checked first, but nothing of it reaches the cache or the handlers
	// until a one-object list, authorized as this client, has succeeded: a
	// 401 or 403 leaves the cache empty and the file untouched, and
	// WaitForSync returns the error. Then its handlers get Added
	// (CauseRestore) for every object in the file, then exactly what
	// changed while it was down, from a watch at the file's resourceVersion
	// (or, if the server has compacted it, a re-list diffed against the
	// restored cache). WaitForSync returns once the informer has caught up
	// with the server as of its start. Changes are committed in batches
	// (StateInterval), each in one transaction: a process killed at any
	// moment leaves a consistent file. The directory must be the user's own
	// and writable by no one else, and a file a regular file of the user's
	// with mode 0600 (no symlink); files are named by an HMAC with the
	// directory's own key (kinformer.key). A file that cannot be used is
	// reported (ErrSnapshot) and the informer lists: a damaged one is set
	// aside, an unsafe one (or directory) left as it is. Objects are kept as
	// cached: after Transform, without managedFields unless
	// KeepManagedFields. One informer at a time may use a file.
	StateDir string

	// StateKeys encrypt the objects in the state file (StateDir) with
	// AES-256-GCM: each 32 bytes, the first encrypts, any of them
	// decrypts, and a file found with objects under another than the
	// first is encrypted again with the first as it is loaded (to rotate,
	// put the new key first, keep the old one until every informer has
	// started once with both, then drop it). Keep them away from the
	// directory (ReadStateKeys reads a file of them, a mounted Secret for
	// example). A file written without keys, or with other ones, is not
	// used: it is reported once (ErrSnapshot, with its size), set aside,
	// and the informer lists. Without StateKeys the objects are written
	// in the clear (in a private file), except an informer of Secrets,
	// which then keeps no state file at all (a log line says so).
	StateKeys [][]byte

	// StateKey names what the informer watches for its state file, when
	// the client cannot say: required with StateDir for a dynamic client
	// or a ListerWatcher of your own (for example "https://host
	// apps/v1/deployments ns=default"); it must differ between clusters,
	// resources and namespaces. Clientset typed clients and a Factory's
	// informers need none.
	StateKey string

	// StateInterval is the longest a change waits before it is committed to
	// the state file; a batch also starts once 4096 objects have changed.
	// Default 250ms.
	StateInterval time.Duration

	// StateNoSync skips the fsync after each commit. A killed process still
	// leaves a consistent file; an operating-system crash or power loss may
	// lose the last commits or damage the file (then reported and set
	// aside, and the informer lists).
	StateNoSync bool

	// Compact keeps each cached object as bytes instead of a tree of Go
	// structs and maps: built-in types as their protobuf, custom resources
	// and unstructured objects as JSON, managedFields cut (unless
	// KeepManagedFields) and after Transform, with its key, resourceVersion,
	// namespace and index values beside it (computed once, as it arrives).
	// Reads decode: Get, List, ByIndex and Select return objects decoded
	// for the caller, its own to change; an event's Object and Old are
	// decoded once per event, on the handlers' side, and shared by its
	// handlers as without Compact. A cached Pod then takes about its
	// protobuf's size, a fraction of the decoded one, and each read costs
	// a decode of the object (a few µs to tens of µs). With StateDir the
	// state file holds the same bytes, so a warm restart loads them
	// without decoding. For memory-bound, read-light caches (every Pod of
	// a cluster); a controller that reads its whole cache often is better
	// served without. DetectMutations has nothing to check in a compact
	// cache and is ignored. What readers and handlers see is what they
	// would see without Compact, but for typed custom resources (Go
	// structs over JSON, encoded by encoding/json): an empty list or map
	// under omitempty reads back nil. An informer whose T is an interface
	// without a concrete type (over a ListerWatcher of Object) has no type
	// to decode into and keeps a plain cache (a warning says so).
	// Default: off.
	//
	// A compact cache holds each object compressed against a dictionary
	// of its own, made from the first objects it holds (s2 with a raw
	// dictionary, github.com/klauspost/compress): the objects of one kind
	// in one cluster are near copies of each other, and a realistic Pod
	// takes about a third of its protobuf, for about a microsecond more
	// per read. An informer of fewer than 24 objects makes no dictionary
	// (unless they are 64 KiB or more). A compressed entry carries a
	// checksum: damaged, it is never read as an object (a read does not
	// find it; its event is an Error naming its key). With StateDir the
	// state file holds the compressed entries and their dictionary: a
	// warm restart takes both back as they are.
	Compact bool
	// CompactUncompressed, with Compact, holds each object's bytes as
	// they came instead of compressing them. It changes how objects are
	// held, not what anyone reads: consumers of a Factory share an
	// informer whatever they ask, and the first one's choice holds.
	// Default: off.
	CompactUncompressed bool

	// Sharding, if set, makes the informer cache and handle only this
	// replica's share of the resource: objects whose metadata.uid hashes
	// into the slots the Sharder serves (a *sharding.Sharding, from
	// package sharding, on Leases; see Sharder). Lists and
	// watches carry the share as shardSelector, so that a server with the
	// ShardedListAndWatch feature sends only it; the informer filters by
	// the same hash itself as well, so a server without it gives handlers
	// the same events (ShardStatus says which is in effect). When the share
	// changes, objects that leave it get Deleted and objects that join it
	// Added, both CauseReshard; a shrink is done from the cache, a growth
	// by a re-list. Handlers are not called while the subscription is not
	// Valid (the replica's Lease may be counted dead by the others). The
	// informer is synced once it has listed its first, non-empty share.
	// Default: none, the whole resource.
	Sharding Sharder

	// Name names the informer in its logs and metrics: its resource, such
	// as "pods" or "deployments.apps" (a Factory sets it). Default: T's
	// kind in lower case ("pod"; "unstructured" for dynamic clients).
	Name string

	// Metrics, if set, receives the informer's Prometheus metrics, labelled
	// with Name (see NewMetrics). The informer stays in its gauges for the
	// life of the Metrics (a Factory drops the informers it stops). Default:
	// none.
	Metrics *Metrics

	// DetectMutations keeps a deep copy of every cached object and
	// compares the object with it when the informer replaces or removes it,
	// and every second while the informer runs: a handler or reader that
	// changes a cached object in place (they are shared, and equal label
	// and annotation maps are shared between objects) is reported in an
	// Error event wrapping [ErrMutated], naming the object's key and what
	// differs, and in an error log line (and counted, with Metrics). Each
	// change is reported once; the informer goes on. It doubles the memory
	// the cached objects take and costs a comparison of each every second:
	// for tests and debugging. Copies are made with DeepCopyObject: a type
	// whose DeepCopyObject is not exact (a JSON round trip, which turns
	// int64s into float64s) is said once in an error line, and objects
	// whose copy differs are not checked. A check that panics (a
	// DeepCopyObject or String method of the type that does) is reported
	// in an Error event and an error log line, and turns the detector off;
	// the informer goes on. The environment variable
	// KINFORMER_CACHE_MUTATION_DETECTOR ([EnvMutationDetector]) turns it on
	// for every informer of the process ("panic" also panics at each
	// detection), and informers over a kinformertest.Server have it on.
	// Default: off, at no cost.
	DetectMutations bool

	// Logger receives the informer's logs. Default: informational logs are
	// discarded, and a handler's panic and a cached object's mutation
	// (errors) go to slog.Default().
	Logger *slog.Logger
}

// compactAll makes every informer compact: set by the package's tests
// (KINFORMER_TEST_COMPACT) to run them all both ways.
var compactAll bool

const (
	defaultPageSize     = 500
	defaultWatchTimeout = 5 * time.Minute
	defaultIdleMargin   = 30 * time.Second
	defaultProbeAfter   = 5 * time.Second
	defaultProbeTimeout = 5 * time.Second
	defaultStartupLog   = 30 * time.Second
)

// withDefaults returns a copy of o with every zero field set to its default.
func (o *Options[T]) withDefaults() Options[T] {
	var out Options[T]
	if o != nil {
		out = *o
	}
	if out.KeyFunc == nil {
		out.KeyFunc = MetaNamespaceKey[T]
	}
	if compactAll {
		out.Compact = true
	}
	if out.PageSize <= 0 {
		out.PageSize = defaultPageSize
	}
	if out.WatchTimeout <= 0 {
		out.WatchTimeout = defaultWatchTimeout
	}
	if out.IdleMargin <= 0 {
		out.IdleMargin = defaultIdleMargin
	}
	if out.ProbeAfter == 0 {
		out.ProbeAfter = defaultProbeAfter
	}
	if out.ProbeTimeout <= 0 {
		out.ProbeTimeout = defaultProbeTimeout
	}
	if out.StartupLogAfter == 0 {
		out.StartupLogAfter = defaultStartupLog
	}
	out.Backoff = out.Backoff.withDefaults()
	if nilSharder(out.Sharding) {
		out.Sharding = nil
	}
	return out
}

// CheckFields returns an error wrapping ErrFields if fields (as
// Options.Fields) are not paths of fields of example's type, a pointer to
// a struct; for nil or an *unstructured.Unstructured they are checked as
// paths only. New, a Factory and kcr check the same.
func CheckFields(example any, fields []string) error {
	t := reflect.TypeOf(example)
	if t == nil || t == reflect.TypeFor[*unstructured.Unstructured]() {
		t = nil
	}
	if _, err := projection.Compile(t, fields); err != nil {
		return fmt.Errorf("%w: %w", ErrFields, err)
	}
	return nil
}

// checkReads tells whether a KeyFunc of the user's (not the default) or
// an IndexFunc reads fields the projection f leaves out: each is called
// on a probe object with every field set and on the same object
// projected (projection.Probe), and must give the same. A function that
// panics on the probe is given the benefit of the doubt.
func checkReads[T Object](f *projection.Fields, key KeyFunc[T], indexers map[string]IndexFunc[T]) error {
	if f == nil {
		return nil
	}
	w, p := f.Probe()
	whole, ok1 := w.(T)
	proj, ok2 := p.(T)
	if !ok1 || !ok2 {
		return nil // untyped: nothing to probe
	}
	call := func(fn func(T) []string, obj T) (vals []string, ok bool) {
		defer func() {
			if recover() != nil {
				ok = false
			}
		}()
		vals = slices.Clone(fn(obj))
		slices.Sort(vals)
		return vals, true
	}
	if key != nil {
		fn := func(o T) []string { return []string{key(o)} }
		if a, ok := call(fn, whole); ok {
			if b, ok := call(fn, proj); ok && !slices.Equal(a, b) {
				return fmt.Errorf("%w: the KeyFunc reads fields Fields leave out (on one object it keys %q whole and %q projected): add what it reads to Fields", ErrFields, a[0], b[0])
			}
		}
	}
	for _, name := range slices.Sorted(maps.Keys(indexers)) {
		a, okA := call(indexers[name], whole)
		b, okB := call(indexers[name], proj)
		if okA && okB && !slices.Equal(a, b) {
			return fmt.Errorf("%w: index %q reads fields Fields leave out (on one object it gives %q whole and %q projected): add what it reads to Fields", ErrFields, name, a, b)
		}
	}
	return nil
}

// Backoff is the retry policy after a failed list or watch: the first wait is
// Initial, each next one Factor times longer up to Max, and each is shortened
// by a random fraction of up to Jitter so that informers restarted together
// spread out. After ResetAfter without a failure the wait starts again from
// Initial.
//
// The defaults (DefaultBackoff) follow the Kubernetes clients' experience:
// 800 ms is short enough not to be noticed after a blip, 30 s long enough
// that thousands of clients do not flatten a recovering API server, and two
// minutes of health means the last trouble is over.
type Backoff struct {
	Initial    time.Duration
	Max        time.Duration
	Factor     float64
	Jitter     float64 // in [0, 1]
	ResetAfter time.Duration
}

// DefaultBackoff returns the policy used for any zero field of
// Options.Backoff: 800 ms doubling to 30 s, up to 25 % shorter at random,
// reset after 2 minutes without a failure.
func DefaultBackoff() Backoff { return Backoff(backoff.Default()) }

func (b Backoff) withDefaults() Backoff { return Backoff(backoff.Policy(b).WithDefaults()) }

// EnvMutationDetector names the environment variable read by New for every
// informer: "true" or "1" turns the mutation detector on
// (Options.DetectMutations) whatever the options say; "panic" turns it on
// and makes each detection panic after it is reported, to fail a test
// binary loudly. Any other value, or none, leaves it to the options.
const EnvMutationDetector = "KINFORMER_CACHE_MUTATION_DETECTOR"

// mutationEnv reads EnvMutationDetector.
func mutationEnv() (on, panics bool) {
	switch strings.ToLower(strings.TrimSpace(os.Getenv(EnvMutationDetector))) {
	case "true", "1":
		return true, false
	case "panic":
		return true, true
	}
	return false, false
}
