package kinformer

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
// (directSource in source.go):
//   - built-in types through a clientset's typed client (or a Factory's):
//     protobuf (internal/protowatch);
//   - *unstructured.Unstructured through client-go's dynamic client (or a
//     Factory's Dynamic): JSON (internal/jsonwatch);
//   - other struct types (custom resources) through a typed client that
//     offers its REST client, as generated clientsets and a Factory's do:
//     JSON into the Go type.

// errNoDirect says the server or the resource does not allow direct
// decoding; the informer goes back to the client's Watch for good.
var errNoDirect = errors.New("direct decoding not possible")

// eventReader is one stream being decoded: a protowatch or jsonwatch
// Reader.
type eventReader interface {
	Next() (watch.Event, error)
	Close()
}

// directWatcher opens the watches that kinformer decodes itself. It
// belongs to the loop's goroutine.
type directWatcher struct {
	client    rest.Interface
	namespace string
	resource  string                      // the resource's plural name, found on first use
	kind      string                      // the kind, for discovery
	path      []string                    // the collection's path, for a client without a group version (dynamic)
	gvr       schema.GroupVersionResource // with path: what it names
	proto     *protowatch.Format
	json      *jsonwatch.Decoder
	shares    bool // objects come stripped and shared
}

// decoding is how a directWatcher decodes, fixed when it is made.
type decoding struct {
	keepManagedFields bool
	// share, if set, makes the decoder strip and share objects itself,
	// and they need no preparing after (see writer.prepare).
	share        *intern.Sharer
	maxJSONEvent int64
	// keepRaw: a protobuf stream gives each object's bytes with it (a
	// compact cache keeps them); lazy: it leaves objects undecoded where
	// it can (protowatch.Format.KeepRaw, Lazy; for unstructured objects,
	// jsonwatch.Format.Lazy: their JSON as it came). Not with share.
	keepRaw, lazy bool
	// fields, if set, is the projection the decoder makes (Options.Fields).
	fields *projection.Fields
}

// newDirectWatcher returns a directWatcher for lw if kinformer can decode
// its watches itself; else nil, and the informer uses lw's own Watch.
// t is the type of the objects to make: T, or for an interface T the
// concrete type (Factory.Typed).
func newDirectWatcher[T Object](src describe.Source, t reflect.Type, dc decoding) *directWatcher {
	keepManagedFields, share, maxJSONEvent := dc.keepManagedFields, dc.share, dc.maxJSONEvent
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
	d := &directWatcher{
		client:    client,
		namespace: rs.GetNamespace(),
		resource:  src.Resource(),
		kind:      src.Kind(elem.Name()),
	}
	if t.Implements(reflect.TypeFor[protowatch.Object]()) && !src.JSONOnly() {
		layout := protowatch.LayoutOf(elem)
		d.proto = &protowatch.Format{
			Kind:               d.kind,
			New:                func() protowatch.Object { return reflect.New(elem).Interface().(protowatch.Object) },
			Layout:             layout,
			StripManagedFields: !keepManagedFields,
			Check:              protowatch.CheckOf(elem),
			KeepRaw:            dc.keepRaw && share == nil,
			Lazy:               dc.lazy && share == nil,
		}
		if dc.fields != nil {
			d.proto.Project = projection.NewProjector(dc.fields)
		}
		if layout != (protowatch.Layout{}) {
			d.proto.Share = share
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
		Fields:             dc.fields,
	})
	d.shares = share != nil
	return d
}

// newDynamicWatcher returns a JSON directWatcher for a dynamic client's
// resource, or nil.
func newDynamicWatcher(src describe.Source, dc decoding) *directWatcher {
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
	return &directWatcher{
		client:    client,
		namespace: namespace,
		resource:  gvr.Resource,
		path:      append(path, gvr.Resource),
		gvr:       gvr,
		// Interned names and values are immutable, whatever a Transform
		// does with the maps; containers are shared only without one,
		// which may modify its object in place. Without one there is
		// nothing left to do after decoding.
		json: jsonwatch.NewDecoder(&jsonwatch.Format{StripManagedFields: !dc.keepManagedFields, ShareContainers: dc.share != nil,
			MaxEvent: dc.maxJSONEvent, Fields: dc.fields, Lazy: dc.lazy && dc.share == nil}),
		shares: dc.share != nil,
	}
}

// sharesObjects says whether the decoder strips and shares its objects.
func (d *directWatcher) sharesObjects() bool { return d.shares }

// encoding names the wire format, for logs.
func (d *directWatcher) encoding() string {
	if d.json != nil {
		return "json"
	}
	return "protobuf"
}

// crdTarget is the CustomResourceDefinition that can serve the resource
// d reads, and the version d reads (crdwait.Target); false for a resource
// no CRD can serve or one not yet known.
func (d *directWatcher) crdTarget() (name, version string, ok bool) {
	gvr := d.gvr
	if d.path == nil {
		gvr = d.client.APIVersion().WithResource(d.resource)
	}
	return crdwait.Target(gvr)
}

// resolve finds the resource's name by discovery. An error wrapping
// errNoDirect means direct decoding is not possible.
func (d *directWatcher) resolve(ctx context.Context) (string, error) {
	res, err := protowatch.Resolve(ctx, d.client, d.kind)
	if _, isStatus := err.(apierrors.APIStatus); (isStatus && IsPersistent(err)) || errors.Is(err, protowatch.ErrAmbiguous) {
		// Discovery refused (403, 404, …) or no single resource: the
		// client's Watch may still work. Anything else (503 while the
		// server starts, a timeout) is retried with the watch.
		return "", fmt.Errorf("%w: discovery: %w", errNoDirect, err)
	}
	if err != nil {
		return "", err
	}
	d.resource = res
	return res, nil
}

// open opens a watch for the loop's goroutine to read and decode itself.
// An error wrapping errNoDirect means it never will.
func (d *directWatcher) open(ctx context.Context, opts metav1.ListOptions) (eventReader, error) {
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
			return nil, fmt.Errorf("%w: %w", errNoDirect, err)
		}
		return nil, err
	}
	return protowatch.NewReader(body, d.proto), nil
}

// list reads one page of a list in JSON, passing each item to fn as it is
// decoded (or an error for one that is not understood). Unlike a watch,
// it waits for the client's rate limiter.
func (d *directWatcher) list(ctx context.Context, opts metav1.ListOptions, fn func(runtime.Object, error)) (jsonwatch.ListMeta, error) {
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
			return lm, fmt.Errorf("%w: reading the list: %v", ErrUnexpectedObject, err)
		}
		return lm, fmt.Errorf("reading the list: %w", err)
	}
	return lm, nil
}

// request is a GET of the resource's collection in JSON with opts.
func (d *directWatcher) request(opts metav1.ListOptions) *rest.Request {
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
func (d *directWatcher) openJSON(ctx context.Context, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	return d.request(opts).Throttle(nil).Stream(ctx)
}
