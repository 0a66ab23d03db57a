package kinformer

import (
	"net/http"
	"reflect"
	"strings"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/watchlist"

	"github.com/kinformer/kinformer/internal/liveness"
)

// What kinformer finds behind a ListerWatcher, asked once, in New
// (describeSource), by type assertion and reflection: whether it may stream
// lists, the typed, dynamic or metadata client it is, what a Factory's
// source knows of its resource, and the REST and HTTP clients of its
// requests. Everything else reads the description.

// described is what describeSource found behind a ListerWatcher.
type described struct {
	// streams: it may do watch-lists (mayStream: not client-go's fakes).
	streams bool
	// scoped is a typed client's (client-go's gentype.Client, a
	// Factory's): nil for other sources.
	scoped restScoped
	// dyn is a dynamic client's REST client, namespace and resource (a
	// Factory's, or client-go's): dyn.client nil for other sources.
	dyn dynamicDesc
	// meta is a metadata client's resource; metaOK false for other
	// sources.
	meta   schema.GroupVersionResource
	metaOK bool
	// hints is what a Factory's source knows of its resource; nil for
	// other sources.
	hints wireHints
	// rest is the REST client of its requests, and http that client's
	// HTTP client, for kinformer's own requests beside them (the probes,
	// the kube-system uid); nil if kinformer cannot reach them.
	rest *rest.RESTClient
	http *http.Client
	// detectMutations: the source asks for the mutation detector (a
	// kinformertest.Server's, mutationDetecting).
	detectMutations bool
}

// dynamicDesc is a dynamic client's target.
type dynamicDesc struct {
	client    rest.Interface
	namespace string
	gvr       schema.GroupVersionResource
}

// describeSource finds out what lw is; see described.
func describeSource(lw any) described {
	d := described{streams: mayStream(lw)}
	d.scoped, _ = lw.(restScoped)
	if client, namespace, gvr, ok := dynamicTarget(lw); ok {
		d.dyn = dynamicDesc{client: client, namespace: namespace, gvr: gvr}
	}
	d.meta, d.metaOK = metadataTarget(lw)
	d.hints, _ = lw.(wireHints)
	d.rest, d.http = restClientOf(lw)
	if m, ok := lw.(mutationDetecting); ok {
		d.detectMutations = m.DetectMutations()
	}
	return d
}

// kind returns the kind a source knows its objects have (a Factory's,
// from its scheme), else def.
func (d described) kind(def string) string {
	if d.hints != nil && d.hints.Kind() != "" {
		return d.hints.Kind()
	}
	return def
}

// jsonOnly tells whether a source speaks JSON only, whatever its type
// could decode (a Factory's, for types its scheme has no protobuf for).
func (d described) jsonOnly() bool { return d.hints != nil && !d.hints.Protobuf() }

// resource returns the resource name a source already knows (a
// Factory's, from discovery), or "" for discovery to find.
func (d described) resource() string {
	if d.hints != nil {
		return d.hints.Resource()
	}
	return ""
}

// wireHints is what a source may know of its resource that the direct
// decoder would otherwise learn by discovery or from the Go type: a
// Factory's lister-watchers know it all (internal/apiclient).
type wireHints interface {
	Kind() string     // the kind; "" if unknown
	Resource() string // the resource's plural name; "" if unknown
	Protobuf() bool   // whether the server sends the type in protobuf
}

// restScoped is what client-go's typed resource clients (gentype.Client)
// offer besides List and Watch.
type restScoped interface {
	GetClient() rest.Interface
	GetNamespace() string
}

// probeClient is what a ListerWatcher may offer for the probe when it is
// neither a typed nor a dynamic client: the REST client its requests go
// through.
type probeClient interface {
	ProbeClient() rest.Interface
}

// mayStream tells whether a client can do watch-lists: not client-go's
// fake clients, which would take the request for a plain watch and never
// end the initial events. They say so through client-go's marker method,
// where they have it; the per-resource fakes do not, so they are recognised
// by their package.
func mayStream(lw any) bool {
	if watchlist.DoesClientNotSupportWatchListSemantics(lw) {
		return false
	}
	t := reflect.TypeOf(lw)
	if t == nil {
		return false
	}
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	return !strings.HasSuffix(t.PkgPath(), "/fake")
}

// restClientOf returns the REST client of lw's requests and its HTTP
// client, for requests of kinformer's own beside them (the probes); nil
// if kinformer cannot reach it.
func restClientOf(lw any) (*rest.RESTClient, *http.Client) {
	var client rest.Interface
	switch c := lw.(type) {
	case probeClient:
		client = c.ProbeClient()
	case restScoped:
		client = c.GetClient()
	default:
		client, _, _, _ = dynamicTarget(lw)
	}
	rc, ok := client.(*rest.RESTClient)
	if !ok || rc == nil || reflect.ValueOf(rc).IsNil() {
		return nil, nil
	}
	if rc.Client == nil {
		return rc, http.DefaultClient
	}
	return rc, rc.Client
}

// dynamicResource is what a source of unstructured objects may offer for
// direct decoding: a REST client without a group version, and the
// resource.
type dynamicResource interface {
	dynamicTarget() (client rest.Interface, namespace string, gvr schema.GroupVersionResource)
}

// dynamicTarget finds the REST client, namespace and resource of a dynamic
// source: a Factory's, or client-go's dynamic client
// (dynamic.NewForConfig(cfg).Resource(gvr).Namespace(ns)), which keeps
// them unexported. They are read by reflection, checked field by field
// (TestDynamicClientRecognised fails if client-go changes them); anything
// else is not recognised, and its own Watch decodes.
func dynamicTarget(lw any) (client rest.Interface, namespace string, gvr schema.GroupVersionResource, ok bool) {
	if d, isDyn := lw.(dynamicResource); isDyn {
		client, namespace, gvr = d.dynamicTarget()
		return client, namespace, gvr, client != nil
	}
	v := reflect.ValueOf(lw)
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return nil, "", gvr, false
	}
	e := v.Elem()
	if t := e.Type(); t.PkgPath() != "k8s.io/client-go/dynamic" || t.Name() != "dynamicResourceClient" || t.Kind() != reflect.Struct {
		return nil, "", gvr, false
	}
	c, ns, res := e.FieldByName("client"), e.FieldByName("namespace"), e.FieldByName("resource")
	if !c.IsValid() || c.Type() != reflect.TypeFor[*dynamic.DynamicClient]() || c.IsNil() ||
		!ns.IsValid() || ns.Kind() != reflect.String ||
		!res.IsValid() || res.Type() != reflect.TypeFor[schema.GroupVersionResource]() {
		return nil, "", gvr, false
	}
	rc := c.Elem().FieldByName("client")
	if !rc.IsValid() || rc.Type() != reflect.TypeFor[rest.Interface]() || rc.IsNil() {
		return nil, "", gvr, false
	}
	client = reflect.NewAt(rc.Type(), unsafe.Pointer(rc.UnsafeAddr())).Elem().Interface().(rest.Interface)
	gvr = schema.GroupVersionResource{
		Group: res.Field(0).String(), Version: res.Field(1).String(), Resource: res.Field(2).String(),
	}
	if gvr.Version == "" || gvr.Resource == "" {
		return nil, "", gvr, false
	}
	return client, ns.String(), gvr, true
}

// metadataTarget returns the resource of a client-go metadata client
// (metadata.NewForConfig(cfg).Resource(gvr).Namespace(ns)), also as the
// Factory wraps it; false for any other ListerWatcher.
func metadataTarget(lw any) (gvr schema.GroupVersionResource, ok bool) {
	v := reflect.ValueOf(lw)
	if v.Kind() == reflect.Struct { // a wrapper embedding the client (internal/apiclient)
		// FieldByIndexErr: the name may be reached through a nil
		// embedded pointer of someone's own type (FieldByName panics).
		if sf, ok := v.Type().FieldByName("ResourceInterface"); ok {
			if f, err := v.FieldByIndexErr(sf.Index); err == nil && f.Kind() == reflect.Interface && !f.IsNil() {
				v = f.Elem()
			}
		}
	}
	if v.Kind() != reflect.Pointer || v.IsNil() {
		return gvr, false
	}
	e := v.Elem()
	if t := e.Type(); t.PkgPath() != "k8s.io/client-go/metadata" || t.Name() != "client" || t.Kind() != reflect.Struct {
		return gvr, false
	}
	res := e.FieldByName("resource")
	if !res.IsValid() || res.Type() != reflect.TypeFor[schema.GroupVersionResource]() {
		return gvr, false
	}
	gvr = schema.GroupVersionResource{Group: res.Field(0).String(), Version: res.Field(1).String(), Resource: res.Field(2).String()}
	return gvr, gvr.Resource != ""
}

// prober is the liveness prober of the source's HTTP client
// (internal/liveness), or nil when kinformer cannot reach it. Dead
// connections: a watch whose HTTP/2 connection has carried nothing for
// Options.ProbeAfter gets its connection checked by a GET /livez sent on
// it through the same HTTP client; no answer within ProbeTimeout closes
// the connection, and every watch on it resumes on a new one. The probe
// needs the client's HTTP client: a clientset's typed client, client-go's
// dynamic client, a Factory's informers (metadata ones included), or a
// ListerWatcher with a ProbeClient() rest.Interface method. Other sources
// rely on the transport's own health checks and the idle deadline
// (IdleMargin).
func (d described) prober() liveness.Prober {
	if d.rest == nil {
		return nil
	}
	return liveness.HTTPProber(d.rest.Get().AbsPath(liveness.ProbePath).Param("exclude", "etcd").URL().String(), d.http)
}

// mutationDetecting is what a ListerWatcher implements to turn the
// mutation detector on for informers over it (kinformertest.Server does).
type mutationDetecting interface{ DetectMutations() bool }
