package main

import (
	"bytes"
	"fmt"
	"net/http"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// --kube-api: the caches served under the Kubernetes API's own paths, so
// that any client (client-go's reflector, kubectl, the Python and
// JavaScript clients) lists and watches them as it would the API server:
// get, list (label and field selectors, limit and continue, the
// resourceVersion rules of the API server's watch cache), watch (from a
// resourceVersion the resource's kubeRing covers, bookmarks, watch-list),
// discovery of the resources served, and the API server's Status errors.
// Read only: every other verb is 405.

const (
	// defaultKubeHistoryBytes is --kube-api-history's default: the bytes
	// of events each resource keeps for watches from a resourceVersion.
	defaultKubeHistoryBytes = 16 << 20
	// kubeWatchBatch is how many events a watcher takes from the ring at
	// once.
	kubeWatchBatch = 256
	// kubeBookmarkEvery is how often a watch that allows bookmarks is sent
	// one (the API server sends them about once a minute; more often lets
	// a client resume closer to where it was).
	kubeBookmarkEvery = 10 * time.Second
	// kubeMaxWatch caps a watch's length, as the API server's
	// --min-request-timeout does (it picks 1-2 times 1800 s unless the
	// client asks for less).
	kubeMaxWatch = 30 * time.Minute
	// initialEventsEnd is the annotation of the bookmark that ends a
	// watch-list's initial events (metav1.InitialEventsAnnotationKey).
	initialEventsEnd = metav1.InitialEventsAnnotationKey
)

// kubeRoute is what a request's path names: a discovery document, or a
// resource (and a namespace, and an object).
type kubeRoute struct {
	gv        schema.GroupVersion
	r         *served
	resource  string // as named in the path
	namespace string
	name      string
	onlyName  string // a watch of one object (a watch with a name in its path)
	proto     bool   // answer in protobuf (kubeNegotiate); else JSON
	jsonOK    bool   // the client takes JSON too
}

// lossy is told that an object's protobuf would lose fields (err, a
// *lossyError): the resource is answered in JSON from now on to clients
// that take it, this one included (proto false); to one that does not, a
// Warning says so.
func (rt *kubeRoute) lossy(w http.ResponseWriter, err error) {
	rt.r.protoLossy.Store(true)
	if rt.jsonOK {
		rt.proto = false
		return
	}
	w.Header().Add("Warning", fmt.Sprintf(`299 - "kinformer serve: %s; ask for JSON (Accept: application/json) to have them"`, strings.NewReplacer(`"`, "", `\`, "").Replace(err.Error())))
}

// kubeAPIRequest answers a request under /api or /apis.
func (s *server) kubeAPIRequest(w http.ResponseWriter, req *http.Request) {
	parts := strings.Split(strings.Trim(req.URL.Path, "/"), "/")
	if req.Method != http.MethodGet && req.Method != http.MethodHead {
		kubeStatus(w, apierrors.NewMethodNotSupported(schema.GroupResource{Resource: strings.Join(parts, "/")}, strings.ToLower(req.Method)),
			"kinformer serve answers from its caches: read only (get, list, watch)")
		return
	}
	var rt kubeRoute
	var rest []string
	switch {
	case parts[0] == "api" && len(parts) == 1:
		s.kubeVersions(w)
		return
	case parts[0] == "api":
		rt.gv, rest = schema.GroupVersion{Version: parts[1]}, parts[2:]
	case parts[0] == "apis" && len(parts) == 1:
		s.kubeGroups(w)
		return
	case parts[0] == "apis" && len(parts) == 2:
		s.kubeGroup(w, parts[1])
		return
	default:
		rt.gv, rest = schema.GroupVersion{Group: parts[1], Version: parts[2]}, parts[3:]
	}
	if len(rest) == 0 {
		s.kubeResources(w, rt.gv)
		return
	}
	if len(rest) >= 3 && rest[0] == "namespaces" {
		rt.namespace, rest = rest[1], rest[2:]
	}
	rt.resource = rest[0]
	if len(rest) > 1 {
		rt.name = rest[1]
	}
	rt.r = s.kubeServed(rt.gv, rt.resource)
	gr := schema.GroupResource{Group: rt.gv.Group, Resource: rt.resource}
	switch {
	case rt.r == nil && gr == (schema.GroupResource{Resource: "namespaces"}) && rt.name != "" && len(rest) == 2:
		// A Namespace asked for by name, not served: 403, not 404. After
		// a NotFound of an object, kubectl asks for its namespace, and
		// takes a 404 there for "the namespace does not exist".
		kubeStatus(w, apierrors.NewForbidden(gr, rt.name, fmt.Errorf("namespaces are not served here (serving %s)", s.choices())), "")
		return
	case rt.r == nil:
		kubeStatus(w, apierrors.NewNotFound(gr, ""), fmt.Sprintf("the server could not find the requested resource: %s is not served here (serving %s)", gr, s.choices()))
		return
	case len(rest) > 2:
		kubeStatus(w, apierrors.NewNotFound(gr, rt.name), fmt.Sprintf("subresource %q is not served: kinformer serve answers get, list and watch of the objects", strings.Join(rest[2:], "/")))
		return
	case rt.namespace != "" && !rt.r.res.namespaced:
		kubeStatus(w, apierrors.NewNotFound(gr, rt.name), fmt.Sprintf("%s is cluster-scoped: not under a namespace", gr))
		return
	case rt.r.scope != "" && rt.namespace != rt.r.scope:
		// Never a part for the whole: a list of every namespace from a
		// cache of one would look complete.
		kubeStatus(w, apierrors.NewForbidden(gr, rt.name, fmt.Errorf("this server caches %s of namespace %q only: ask under /namespaces/%s/", gr, rt.r.scope, rt.r.scope)), "")
		return
	}
	var acceptable bool
	if rt.proto, rt.jsonOK, acceptable = kubeNegotiate(req.Header.Get("Accept"), rt.r.res.gvr.GroupVersion().WithKind(rt.r.res.kind)); !acceptable {
		kubeStatus(w, apierrors.NewGenericServerResponse(http.StatusNotAcceptable, "get", gr, rt.name,
			fmt.Sprintf("only application/json is served (and protobuf for built-in types), not %q", req.Header.Get("Accept")), 0, false), "")
		return
	}
	if rt.proto && rt.jsonOK && rt.r.protoLossy.Load() {
		rt.proto = false // its objects have fields protobuf would lose
	}
	if !s.kubeReady(rt.r) {
		w.Header().Set("Retry-After", "1")
		kubeStatus(w, apierrors.NewTooManyRequests(fmt.Sprintf("storage is (re)initializing: %s has not synced yet", rt.r.name), 1), "")
		return
	}
	s.kubeWarn(w, rt.r)
	q := req.URL.Query()
	switch {
	case rt.name != "" && queryBool(q, "watch"):
		// A watch of one object: a watch with metadata.name.
		rt.onlyName = rt.name
		s.kubeWatch(w, req, rt, q)
	case rt.name != "":
		s.kubeGet(w, rt)
	case queryBool(q, "watch"):
		s.kubeWatch(w, req, rt, q)
	default:
		s.kubeList(w, req, rt, q)
	}
}

// kubeReady says whether r can be answered as the API server would: its
// cache has a version (it synced, or restored its state file: it serves at
// once, as /objects does), or, for a view, has synced. Before, the API
// server's watch cache answers 429 while it initializes, and so does this
// (a half-filled cache would pass for the whole). It starts r's history
// at that version if it has not started yet.
func (s *server) kubeReady(r *served) bool {
	if _, view := r.src.(*viewSource); view {
		return r.src.hasSynced()
	}
	rv := r.src.resourceVersion()
	if rv == "" {
		return false
	}
	r.kube.start(rv)
	return true
}

// kubeWarn says, in a Warning header (client-go logs it, kubectl prints
// it), where r's answers differ from the API server's: a shard group's
// member serves its share of the objects; a view's namespaces have no
// common resourceVersion to resume a watch from.
func (s *server) kubeWarn(w http.ResponseWriter, r *served) {
	if s.shard != nil {
		w.Header().Add("Warning", fmt.Sprintf(`299 - "kinformer serve: this replica serves its share of %s only (%s)"`, r.name, strings.NewReplacer(`"`, "", `\`, "").Replace(s.shard.group)))
	}
	if _, view := r.src.(*viewSource); view {
		w.Header().Add("Warning", fmt.Sprintf(`299 - "kinformer serve: %s is served from the namespaces of --namespace-selector, each with its own resourceVersion: a watch cannot resume from one (410, then list again)"`, r.name))
	}
}

// queryBool reads a boolean parameter as the API server does: absent is
// false; present, anything but "0" and "false" (any case) is true, "" and
// "True" (the Python client's) included.
func queryBool(q map[string][]string, k string) bool {
	v, ok := q[k]
	if !ok || len(v) == 0 {
		return false
	}
	return v[0] != "0" && !strings.EqualFold(v[0], "false")
}

// kubeServed finds the resource a path names in gv.
func (s *server) kubeServed(gv schema.GroupVersion, resource string) *served {
	for _, r := range s.resources {
		if r.res.gvr.GroupVersion() == gv && r.res.gvr.Resource == resource {
			return r
		}
	}
	return nil
}

// isKubePath reports whether path is one of --kube-api's, whose errors
// are Status objects.
func isKubePath(path string) bool {
	return path == "/api" || path == "/apis" || path == "/version" || strings.HasPrefix(path, "/api/") || strings.HasPrefix(path, "/apis/")
}

// kubeStatus answers err as the API server does: a Status object, its
// code as the HTTP status; message, if not "", in place of err's.
func kubeStatus(w http.ResponseWriter, err apierrors.APIStatus, message string) {
	st := err.Status()
	if message != "" {
		st.Message = message
	}
	st.Kind, st.APIVersion = "Status", "v1"
	writeJSON(w, int(st.Code), st)
}

// kubeGet answers one object.
func (s *server) kubeGet(w http.ResponseWriter, rt kubeRoute) {
	key := rt.name
	if rt.r.res.namespaced {
		if rt.namespace == "" {
			kubeStatus(w, apierrors.NewNotFound(rt.r.res.gvr.GroupResource(), rt.name), fmt.Sprintf("%s is namespaced: get it under /namespaces/NAMESPACE/", rt.r.res.gvr.GroupResource()))
			return
		}
		key = rt.namespace + "/" + rt.name
	}
	obj, ok := rt.r.src.get(key)
	if !ok {
		kubeStatus(w, apierrors.NewNotFound(rt.r.res.gvr.GroupResource(), rt.name), "")
		return
	}
	var b bytes.Buffer
	var err error
	if rt.proto {
		var lossy error
		if lossy, err = writeProtoObject(&b, obj, &rt.r.protoChecked, !rt.jsonOK); lossy != nil {
			rt.lossy(w, lossy)
		}
	}
	if !rt.proto {
		var j []byte
		j, err = objectJSON(obj)
		b.Reset()
		b.Write(j)
	}
	if err != nil {
		kubeStatus(w, apierrors.NewInternalError(err), "")
		return
	}
	w.Header().Set("Content-Type", map[bool]string{true: contentTypeProtobuf, false: "application/json"}[rt.proto])
	w.WriteHeader(http.StatusOK)
	w.Write(b.Bytes())
}

// kubeSelection is a list's or a watch's selectors.
type kubeSelection struct {
	labels labels.Selector
	fields fields.Selector
	ns     string // "" for every namespace
}

// kubeSelect reads the selectors of q; a Status error if one does not
// parse.
func kubeSelect(q map[string][]string, ns, name string) (kubeSelection, error) {
	get := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	sel := kubeSelection{labels: labels.Everything(), fields: fields.Everything(), ns: ns}
	if l := get("labelSelector"); l != "" {
		if len(l) > maxSelectorLen {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("labelSelector too long: %d bytes, at most %d", len(l), maxSelectorLen))
		}
		var err error
		if sel.labels, err = labels.Parse(l); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("unable to parse requirement: labelSelector %q: %v", l, err))
		}
	}
	if f := get("fieldSelector"); f != "" {
		if len(f) > maxSelectorLen {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector too long: %d bytes, at most %d", len(f), maxSelectorLen))
		}
		var err error
		if sel.fields, err = fields.ParseSelector(f); err != nil {
			return sel, apierrors.NewBadRequest(fmt.Sprintf("fieldSelector %q: %v", f, err))
		}
	}
	if name != "" {
		sel.fields = fields.AndSelectors(sel.fields, fields.OneTermEqualSelector("metadata.name", name))
	}
	return sel, nil
}

// matches says whether o is selected: its namespace, labels and the
// fields the field selector names (metadata.name and metadata.namespace,
// or any other field path of the object, compared as text).
func (sel kubeSelection) matches(o *unstructured.Unstructured) bool {
	if sel.ns != "" && o.GetNamespace() != sel.ns {
		return false
	}
	if !sel.labels.Empty() && !sel.labels.Matches(labels.Set(o.GetLabels())) {
		return false
	}
	return sel.fields.Empty() || sel.fields.Matches(objectFields{o})
}

// objectFields is an object as a fields.Fields: a field path's value as
// text ("" if absent).
type objectFields struct{ o *unstructured.Unstructured }

func (f objectFields) Has(field string) bool {
	_, found, _ := unstructured.NestedFieldNoCopy(f.o.Object, strings.Split(field, ".")...)
	return found
}

func (f objectFields) Get(field string) string {
	switch field {
	case "metadata.name":
		return f.o.GetName()
	case "metadata.namespace":
		return f.o.GetNamespace()
	}
	v, found, _ := unstructured.NestedFieldNoCopy(f.o.Object, strings.Split(field, ".")...)
	if !found || v == nil {
		return ""
	}
	switch v := v.(type) {
	case string:
		return v
	case bool:
		return strconv.FormatBool(v)
	case int64:
		return strconv.FormatInt(v, 10)
	case float64:
		return strconv.FormatFloat(v, 'f', -1, 64)
	}
	return fmt.Sprint(v)
}
