// Package describe finds out, once, what is behind a ListerWatcher: whether
// it may stream lists, the typed, dynamic or metadata client it is, what
// a Factory's source knows of its resource, and the REST and HTTP clients
// of its requests. It asks by type assertion and reflection, in New
// (kinformer's informer.go); everything else reads the description.
package describe

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

// Source is what Of found behind a ListerWatcher.
type Source struct {
	// Streams: it may do watch-lists (not client-go's fakes, which would
	// take one for a plain watch and never end the initial events).
	Streams bool
	// Scoped is a typed client's (client-go's gentype.Client, a
	// Factory's): nil for other sources.
	Scoped RESTScoped
	// Dynamic is a dynamic client's REST client, namespace and resource
	// (a Factory's, or client-go's): Dynamic.Client nil for other
	// sources.
	Dynamic Dynamic
	// Meta is a metadata client's resource; MetaOK false for other
	// sources.
	Meta   schema.GroupVersionResource
	MetaOK bool
	// Hints is what a Factory's source knows of its resource; nil for
	// other sources.
	Hints WireHints
	// REST is the REST client of its requests, and HTTP that client's
	// HTTP client, for kinformer's own requests beside them (the probes,
	// the kube-system uid); nil if kinformer cannot reach them.
	REST *rest.RESTClient
	HTTP *http.Client
	// DetectMutations: the source asks for the mutation detector (a
	// kinformertest.Server's, MutationDetecting).
	DetectMutations bool
}

// Dynamic is a dynamic client's target.
type Dynamic struct {
	Client    rest.Interface
	Namespace string
	GVR       schema.GroupVersionResource
}

// Of finds out what lw is; see Source.
func Of(lw any) Source {
	d := Source{Streams: mayStream(lw)}
	d.Scoped, _ = lw.(RESTScoped)
	if client, namespace, gvr, ok := dynamicTarget(lw); ok {
		d.Dynamic = Dynamic{Client: client, Namespace: namespace, GVR: gvr}
	}
	d.Meta, d.MetaOK = metadataTarget(lw)
	d.Hints, _ = lw.(WireHints)
	d.REST, d.HTTP = restClientOf(lw)
	if m, ok := lw.(MutationDetecting); ok {
		d.DetectMutations = m.DetectMutations()
	}
	return d
}

// Kind returns the kind a source knows its objects have (a Factory's,
// from its scheme), else def.
func (d Source) Kind(def string) string {
	if d.Hints != nil && d.Hints.Kind() != "" {
		return d.Hints.Kind()
	}
	return def
}

// JSONOnly tells whether a source speaks JSON only, whatever its type
// could decode (a Factory's, for types its scheme has no protobuf for).
func (d Source) JSONOnly() bool { return d.Hints != nil && !d.Hints.Protobuf() }

// Resource returns the resource name a source already knows (a
// Factory's, from discovery), or "" for discovery to find.
func (d Source) Resource() string {
	if d.Hints != nil {
		return d.Hints.Resource()
	}
	return ""
}

// WireHints is what a source may know of its resource that the direct
// decoder would otherwise learn by discovery or from the Go type: a
// Factory's lister-watchers know it all (internal/apiclient).
type WireHints interface {
	Kind() string     // the kind; "" if unknown
	Resource() string // the resource's plural name; "" if unknown
	Protobuf() bool   // whether the server sends the type in protobuf
}

// RESTScoped is what client-go's typed resource clients (gentype.Client)
// offer besides List and Watch.
type RESTScoped interface {
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
	case RESTScoped:
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

// dynamicTarget finds the REST client, namespace and resource of
// client-go's dynamic client (dynamic.NewForConfig(cfg).Resource(gvr).
// Namespace(ns), which a Factory's dynamic informers use too), which keeps
// them unexported. They are read by reflection, checked field by field
// (TestDynamicClientRecognised fails if client-go changes them); anything
// else is not recognised, and its own Watch decodes.
func dynamicTarget(lw any) (client rest.Interface, namespace string, gvr schema.GroupVersionResource, ok bool) {
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

// Prober is the liveness prober of the source's HTTP client
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
func (d Source) Prober() liveness.Prober {
	if d.REST == nil {
		return nil
	}
	return liveness.HTTPProber(d.REST.Get().AbsPath(liveness.ProbePath).Param("exclude", "etcd").URL().String(), d.HTTP)
}

// MutationDetecting is what a ListerWatcher implements to turn the
// mutation detector on for informers over it (kinformertest.Server does).
type MutationDetecting interface{ DetectMutations() bool }
