// Package direct is the informer's glue to its own decoders: when
// kinformer opens a watch (or a JSON list) itself on the client's REST
// client and decodes the stream straight into the informer's type,
// instead of going through the client's Watch, and how.
package direct

import (
	"context"
	"errors"
	"fmt"
	"io"
	"reflect"

	"github.com/go-json-experiment/json/jsontext"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/crdwait"
	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/jsonwatch"
	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// Direct decoding: kinformer opens the watch itself on the client's REST
// client and decodes the stream straight into T, on the loop's goroutine
// (the root's directSource, source.go):
//   - built-in types through a clientset's typed client (or a Factory's):
//     protobuf (internal/protowatch);
//   - *unstructured.Unstructured through client-go's dynamic client (or a
//     Factory's Dynamic): JSON (internal/jsonwatch);
//   - other struct types (custom resources) through a typed client that
//     offers its REST client, as generated clientsets and a Factory's do:
//     JSON into the Go type.

// ErrNoDirect says the server or the resource does not allow direct
// decoding; the informer goes back to the client's Watch for good.
var ErrNoDirect = errors.New("direct decoding not possible")

// EventReader is one stream being decoded: a protowatch or jsonwatch
// Reader.
type EventReader interface {
	Next() (watch.Event, error)
	Close()
}

// Watcher opens the watches that kinformer decodes itself. It belongs to
// the loop's goroutine.
type Watcher struct {
	client    rest.Interface
	namespace string
	resource  string                      // the resource's plural name, found on first use
	kind      string                      // the kind, for discovery
	path      []string                    // the collection's path, for a client without a group version (dynamic)
	gvr       schema.GroupVersionResource // with path: what it names
	// Proto is the protobuf stream's format; nil for JSON. Fixed by New:
	// only a test may wrap its New, to count the objects decoded.
	Proto      *protowatch.Format
	json       *jsonwatch.Decoder
	shares     bool                 // objects come stripped and shared
	persistent func(err error) bool // kinformer.IsPersistent: discovery refused for good
}

// Decoding is how a Watcher decodes, fixed when it is made.
type Decoding struct {
	// KeepManagedFields: the decoder keeps metadata.managedFields (by
	// default it cuts them, Options.KeepManagedFields).
	KeepManagedFields bool
	// Share, if set, makes the decoder strip and share objects itself,
	// and they need no preparing after (the root's writer.prepare).
	Share *intern.Sharer
	// MaxJSONEvent bounds the bytes of a JSON event (0: jsonwatch.MaxEvent).
	MaxJSONEvent int64
	// KeepRaw: a protobuf stream gives each object's bytes with it (a
	// compact cache keeps them); Lazy: it leaves objects undecoded where
	// it can (protowatch.Format.KeepRaw, Lazy; for unstructured objects,
	// jsonwatch.Format.Lazy: their JSON as it came). Not with Share.
	KeepRaw, Lazy bool
	// Fields, if set, is the projection the decoder makes (Options.Fields).
	Fields *projection.Fields
}

// New returns a Watcher for the source src describes if kinformer can
// decode its watches itself; else nil, and the informer uses the
// source's own Watch. t is the type of the objects to make: T, or for an
// interface T the concrete type (Factory.Typed). persistent tells a
// refusal of discovery that retrying cannot change (kinformer's
// IsPersistent), after which the informer uses the client's Watch for
// good; with nil, discovery is tried again at every watch (tests of
// sources whose resource is known, which never ask).
func New[T any](src describe.Source, t reflect.Type, dc Decoding, persistent func(error) bool) *Watcher {
	d := newWatcher[T](src, t, dc)
	if d != nil {
		d.persistent = persistent
	}
	return d
}

func newWatcher[T any](src describe.Source, t reflect.Type, dc Decoding) *Watcher {
	keepManagedFields, share, maxJSONEvent := dc.KeepManagedFields, dc.Share, dc.MaxJSONEvent
	if !src.Streams {
		return nil
	}
	if t == reflect.TypeFor[*unstructured.Unstructured]() {
		return newDynamicWatcher(src, dc)
	}
	rs := src.Scoped
	if rs == nil {
		return nil
	}
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct || !t.AssignableTo(reflect.TypeFor[T]()) {
		return nil
	}
	client := rs.GetClient()
	if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil
	}
	elem := t.Elem()
	d := &Watcher{
		client:    client,
		namespace: rs.GetNamespace(),
		resource:  src.Resource(),
		kind:      src.Kind(elem.Name()),
	}
	if t.Implements(reflect.TypeFor[protowatch.Object]()) && !src.JSONOnly() {
		layout := protowatch.LayoutOf(elem)
		d.Proto = &protowatch.Format{
			Kind:               d.kind,
			New:                func() protowatch.Object { return reflect.New(elem).Interface().(protowatch.Object) },
			Layout:             layout,
			StripManagedFields: !keepManagedFields,
			Check:              protowatch.CheckOf(elem),
			KeepRaw:            dc.KeepRaw && share == nil,
			Lazy:               dc.Lazy && share == nil,
		}
		if dc.Fields != nil {
			d.Proto.Project = projection.NewProjector(dc.Fields)
		}
		if layout != (protowatch.Layout{}) {
			d.Proto.Share = share
			d.shares = share != nil
		}
		return d
	}
	d.json = jsonwatch.NewDecoder(&jsonwatch.Format{
		New:                func() runtime.Object { return reflect.New(elem).Interface().(runtime.Object) },
		Kind:               d.kind,
		StripManagedFields: !keepManagedFields,
		Share:              share,
		ShareContainers:    share != nil,
		MaxEvent:           maxJSONEvent,
		Fields:             dc.Fields,
	})
	d.shares = share != nil
	return d
}

// newDynamicWatcher returns a JSON Watcher for a dynamic client's
// resource, or nil.
func newDynamicWatcher(src describe.Source, dc Decoding) *Watcher {
	client, namespace, gvr := src.Dynamic.Client, src.Dynamic.Namespace, src.Dynamic.GVR
	if client == nil {
		return nil
	}
	path := []string{"/api"}
	if gvr.Group != "" {
		path = []string{"/apis", gvr.Group}
	}
	path = append(path, gvr.Version)
	if namespace != "" {
		path = append(path, "namespaces", namespace)
	}
	return &Watcher{
		client:    client,
		namespace: namespace,
		resource:  gvr.Resource,
		path:      append(path, gvr.Resource),
		gvr:       gvr,
		// Interned names and values are immutable, whatever a Transform
		// does with the maps; containers are shared only without one,
		// which may modify its object in place. Without one there is
		// nothing left to do after decoding.
		json: jsonwatch.NewDecoder(&jsonwatch.Format{StripManagedFields: !dc.KeepManagedFields, ShareContainers: dc.Share != nil,
			MaxEvent: dc.MaxJSONEvent, Fields: dc.Fields, Lazy: dc.Lazy && dc.Share == nil}),
		shares: dc.Share != nil,
	}
}

// SharesObjects says whether the decoder strips and shares its objects.
func (d *Watcher) SharesObjects() bool { return d.shares }

// JSON says whether it reads JSON, which it can also list in (List);
// else protobuf.
func (d *Watcher) JSON() bool { return d.json != nil }

// KeepsRaw says whether its protobuf stream gives each object's bytes
// with it (Decoding.KeepRaw).
func (d *Watcher) KeepsRaw() bool { return d.Proto != nil && d.Proto.KeepRaw }

// Resource is the resource's plural name ("" until discovery found it).
func (d *Watcher) Resource() string { return d.resource }

// Client is the REST client it opens watches on.
func (d *Watcher) Client() rest.Interface { return d.client }

// Encoding names the wire format, for logs.
func (d *Watcher) Encoding() string {
	if d.json != nil {
		return "json"
	}
	return "protobuf"
}

// CRDTarget is the CustomResourceDefinition that can serve the resource
// d reads, and the version d reads (crdwait.Target); false for a resource
// no CRD can serve or one not yet known.
func (d *Watcher) CRDTarget() (name, version string, ok bool) {
	gvr := d.gvr
	if d.path == nil {
		gvr = d.client.APIVersion().WithResource(d.resource)
	}
	return crdwait.Target(gvr)
}

// resolve finds the resource's name by discovery. An error wrapping
// ErrNoDirect means direct decoding is not possible.
func (d *Watcher) resolve(ctx context.Context) (string, error) {
	res, err := protowatch.Resolve(ctx, d.client, d.kind)
	if _, isStatus := err.(apierrors.APIStatus); (isStatus && d.persistent != nil && d.persistent(err)) || errors.Is(err, protowatch.ErrAmbiguous) {
		// Discovery refused (403, 404, …) or no single resource: the
		// client's Watch may still work. Anything else (503 while the
		// server starts, a timeout) is retried with the watch.
		return "", fmt.Errorf("%w: discovery: %w", ErrNoDirect, err)
	}
	if err != nil {
		return "", err
	}
	d.resource = res
	return res, nil
}

// Open opens a watch for the loop's goroutine to read and decode itself.
// An error wrapping ErrNoDirect means it never will.
func (d *Watcher) Open(ctx context.Context, opts metav1.ListOptions) (EventReader, error) {
	if d.resource == "" {
		if _, err := d.resolve(ctx); err != nil {
			return nil, err
		}
	}
	if d.json != nil {
		body, err := d.openJSON(ctx, opts)
		if err != nil {
			return nil, err
		}
		return d.json.NewReader(body), nil
	}
	body, err := protowatch.Open(ctx, d.client, d.namespace, d.resource, opts)
	if err != nil {
		if apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err) {
			return nil, fmt.Errorf("%w: %w", ErrNoDirect, err)
		}
		return nil, err
	}
	return protowatch.NewReader(body, d.Proto), nil
}

// List reads one page of a list in JSON, passing each item to fn as it is
// decoded (or an error for one that is not understood). Unlike a watch,
// it waits for the client's rate limiter. A list that is not JSON at all
// is a *GarbledError. Only for a Watcher that reads JSON (JSON).
func (d *Watcher) List(ctx context.Context, opts metav1.ListOptions, fn func(runtime.Object, error)) (jsonwatch.ListMeta, error) {
	if d.resource == "" {
		if _, err := d.resolve(ctx); err != nil {
			return jsonwatch.ListMeta{}, err
		}
	}
	body, err := d.request(opts).Stream(ctx)
	if err != nil {
		return jsonwatch.ListMeta{}, err
	}
	defer body.Close()
	lm, err := d.json.List(body, fn)
	if err != nil {
		if errors.As(err, new(*jsontext.SyntacticError)) {
			return lm, &GarbledError{Err: err}
		}
		return lm, fmt.Errorf("reading the list: %w", err)
	}
	return lm, nil
}

// request is a GET of the resource's collection in JSON with opts.
func (d *Watcher) request(opts metav1.ListOptions) *rest.Request {
	req := d.client.Get()
	if d.path != nil {
		req = req.AbsPath(d.path...).SpecificallyVersionedParams(&opts, metav1.ParameterCodec, metav1.Unversioned)
	} else {
		req = req.NamespaceIfScoped(d.namespace, d.namespace != "").Resource(d.resource).VersionedParams(&opts, metav1.ParameterCodec)
	}
	return req.SetHeader("Accept", jsonwatch.MediaType)
}

// openJSON opens a JSON watch, as client-go's typed or dynamic client
// would (its configuration, credentials and TLS), not rate-limited: a
// watch is one long request.
func (d *Watcher) openJSON(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	return d.request(opts).Throttle(nil).Stream(ctx)
}

// GarbledError is a list whose body is not JSON: the server sent what the
// informer cannot use (kinformer.ErrUnexpectedObject).
type GarbledError struct{ Err error }

func (e *GarbledError) Error() string { return "reading the list: " + e.Err.Error() }

// Unwrap returns the JSON reader's error.
func (e *GarbledError) Unwrap() error { return e.Err }
