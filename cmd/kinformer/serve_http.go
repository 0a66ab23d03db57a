package main

import (
	"bufio"
	"bytes"
	"crypto/sha256"
	"embed"
	"encoding/base64"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"iter"
	"net/http"
	"slices"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus/promhttp"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kinformer/kinformer"
)

//go:embed web
var webFS embed.FS

// handler returns the HTTP API.
func (s *server) handler() http.Handler {
	mux := http.NewServeMux()
	page, err := fs.ReadFile(webFS, "web/index.html")
	if err != nil {
		panic(err) // embedded: cannot happen
	}
	csp := pageCSP(page)
	mux.HandleFunc("GET /{$}", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		w.Header().Set("Cache-Control", "no-cache")
		w.Header().Set("Content-Security-Policy", csp)
		w.Header().Set("X-Content-Type-Options", "nosniff")
		http.ServeContent(w, r, "index.html", time.Time{}, bytes.NewReader(page))
	})
	mux.HandleFunc("GET /objects", s.listObjects)
	mux.HandleFunc("GET /objects/{resource}/{name}", s.getObject)
	mux.HandleFunc("GET /objects/{resource}/{namespace}/{name}", s.getObject)
	mux.HandleFunc("GET /events", s.events)
	mux.HandleFunc("GET /events/recent", s.recentEvents)
	mux.HandleFunc("GET /events/feed", s.feed)
	mux.HandleFunc("GET /stats", s.stats)
	mux.Handle("GET /metrics", promhttp.HandlerFor(s.registry, promhttp.HandlerOpts{}))
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		fmt.Fprintln(w, "ok")
	})
	mux.Handle("GET /readyz", readyHandler(func() []string { return s.notReady() }, s.notes))
	if s.kubeHistory > 0 {
		mux.HandleFunc("/api", s.kubeAPIRequest)
		mux.HandleFunc("/api/", s.kubeAPIRequest)
		mux.HandleFunc("/apis", s.kubeAPIRequest)
		mux.HandleFunc("/apis/", s.kubeAPIRequest)
		mux.HandleFunc("GET /version", s.kubeVersion)
	}
	return s.guard(mux)
}

// pageCSP is the page's Content-Security-Policy: its own inline style and
// script (by hash) and requests to this server, nothing else. The page
// never turns served data into markup; this is the second line of
// defence, should a change ever do so: no injected script or event
// handler would run.
func pageCSP(page []byte) string {
	hashes := func(tag string) string {
		out := ""
		rest := page
		for {
			_, after, ok := bytes.Cut(rest, []byte("<"+tag+">"))
			if !ok {
				return out
			}
			body, after, ok := bytes.Cut(after, []byte("</"+tag+">"))
			if !ok {
				return out
			}
			sum := sha256.Sum256(body)
			out += " 'sha256-" + base64.StdEncoding.EncodeToString(sum[:]) + "'"
			rest = after
		}
	}
	return "default-src 'none'; script-src" + hashes("script") + "; style-src" + hashes("style") +
		"; connect-src 'self'; img-src 'self'; base-uri 'none'; form-action 'none'; frame-ancestors 'none'"
}

// readyHandler answers 200 "ok" when notReady returns nothing, followed
// by the lines of notes (a resource reconnecting: ready, but maybe
// behind), else 503 with notReady's lines: each resource not ready, and
// why.
func readyHandler(notReady, notes func() []string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; charset=utf-8")
		if problems := notReady(); len(problems) > 0 {
			w.WriteHeader(http.StatusServiceUnavailable)
			fmt.Fprintln(w, strings.Join(problems, "\n"))
			return
		}
		fmt.Fprintln(w, "ok")
		for _, n := range notes() {
			fmt.Fprintln(w, n)
		}
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(v)
}

func writeError(w http.ResponseWriter, code int, format string, args ...any) {
	writeJSON(w, code, map[string]any{"error": fmt.Sprintf(format, args...), "code": code})
}

// lookup finds the resource a request names; with name "" it defaults to
// the only resource served. It writes the error response itself.
func (s *server) lookup(w http.ResponseWriter, name string) *served {
	if name == "" {
		if len(s.resources) == 1 {
			return s.resources[0]
		}
		writeError(w, http.StatusBadRequest, "missing resource: want one of %s", s.choices())
		return nil
	}
	r := s.byName[name]
	if r == nil {
		writeError(w, http.StatusNotFound, "resource %q is not served: want one of %s", name, s.choices())
	}
	return r
}

func (s *server) choices() string {
	names := make([]string, 0, len(s.resources))
	for _, r := range s.resources {
		names = append(names, r.name)
	}
	return strings.Join(names, ", ")
}

type objectList struct {
	Resource        string           `json:"resource"`
	ResourceVersion string           `json:"resourceVersion"`
	Items           []map[string]any `json:"items"`
	Count           int              `json:"count"` // last: the items' number is known once they are written
}

// listObjects answers the objects of a resource, streamed: the answer of
// a large cache is never built in memory, and a client that stops reading
// is cut off after the write deadline. Few are served at once.
func (s *server) listObjects(w http.ResponseWriter, req *http.Request) {
	if !s.objectRequests.acquire() {
		tooMany(w, "too many /objects requests at once (%d); retry later", s.objectRequests.max)
		return
	}
	defer s.objectRequests.release()
	q := req.URL.Query()
	r := s.lookup(w, q.Get("resource"))
	if r == nil {
		return
	}
	sel := labels.Everything()
	if l := q.Get("label"); l != "" {
		if len(l) > maxSelectorLen {
			writeError(w, http.StatusBadRequest, "label selector too long: %d bytes, at most %d", len(l), maxSelectorLen)
			return
		}
		var err error
		if sel, err = labels.Parse(l); err != nil {
			writeError(w, http.StatusBadRequest, "bad label selector: %v", err)
			return
		}
	}
	rv := r.src.resourceVersion()
	objects := selectSorted(r.src, q.Get("namespace"), sel)

	// {"resource":…,"resourceVersion":…,"items":[…],"count":…}, an item
	// at a time, in chunks of 32 KiB, each with its own write deadline.
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}, 32<<10)
	var item bytes.Buffer
	enc := json.NewEncoder(&item)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(objectList{Resource: r.name, ResourceVersion: rv}) // strings: {…,"items":null,"count":0}
	head, _, _ := bytes.Cut(item.Bytes(), []byte(`null,"count":0}`))
	bw.Write(head)
	bw.WriteByte('[')
	n := 0
	for obj := range objects {
		item.Reset()
		if err := enc.Encode(obj.Object); err != nil {
			// The status is sent: cut the answer short, so that the
			// client cannot take it for a complete list.
			panic(http.ErrAbortHandler)
		}
		if n > 0 {
			bw.WriteByte(',')
		}
		n++
		if _, err := bw.Write(bytes.TrimSuffix(item.Bytes(), []byte("\n"))); err != nil {
			return // the client is gone, or stalled past the deadline
		}
	}
	fmt.Fprintf(bw, "],\"count\":%d}\n", n)
	_ = bw.Flush()
}

// selectSorted yields the objects of src in namespace ("" for all) whose
// labels match sel, sorted by key. A plain cache's are taken at once
// (pointers). A compact cache decodes every object it returns: its keys
// are taken at once and each object is read, decoded and matched as it
// is reached, so that a request holds one decoded object at a time, not
// its whole selection (16 requests for a large compact cache held
// hundreds of MB). An object deleted meanwhile is left out, one changed is
// served as it is when reached.
func selectSorted(src watchSource, namespace string, sel labels.Selector) iter.Seq[*unstructured.Unstructured] {
	if src.compact() {
		keys, get := src.keyed(namespace)
		slices.Sort(keys)
		return func(yield func(*unstructured.Unstructured) bool) {
			for _, k := range keys {
				o, ok := get(k)
				if !ok || !sel.Matches(labels.Set(o.GetLabels())) {
					continue
				}
				if !yield(o) {
					return
				}
			}
		}
	}
	type keyed struct {
		key string
		obj *unstructured.Unstructured
	}
	objs := src.list(namespace)
	kept := make([]keyed, 0, len(objs))
	for _, o := range objs {
		if sel.Matches(labels.Set(o.GetLabels())) {
			kept = append(kept, keyed{src.key(o), o})
		}
	}
	slices.SortFunc(kept, func(a, b keyed) int { return strings.Compare(a.key, b.key) })
	return func(yield func(*unstructured.Unstructured) bool) {
		for _, k := range kept {
			if !yield(k.obj) {
				return
			}
		}
	}
}

func (s *server) getObject(w http.ResponseWriter, req *http.Request) {
	r := s.lookup(w, req.PathValue("resource"))
	if r == nil {
		return
	}
	ns, name := req.PathValue("namespace"), req.PathValue("name")
	switch {
	case r.res.namespaced && ns == "":
		writeError(w, http.StatusNotFound, "%s is namespaced: use /objects/%s/NAMESPACE/NAME", r.name, r.name)
		return
	case !r.res.namespaced && ns != "":
		writeError(w, http.StatusNotFound, "%s is cluster-scoped: use /objects/%s/NAME", r.name, r.name)
		return
	}
	format := req.URL.Query().Get("format")
	if format != "" && format != "json" && format != "yaml" {
		writeError(w, http.StatusBadRequest, "format %q: want json or yaml", format)
		return
	}
	key := name
	if ns != "" {
		key = ns + "/" + name
	}
	obj, ok := r.src.get(key)
	if !ok {
		writeError(w, http.StatusNotFound, "%s %q not found", r.name, key)
		return
	}
	if format == "yaml" {
		if !s.yamlRenders.acquire() {
			tooMany(w, "too many YAML answers at once (%d); retry later, or ask for JSON", s.yamlRenders.max)
			return
		}
		defer s.yamlRenders.release()
		if n := nodes(obj.Object, maxYAMLNodes); n > maxYAMLNodes {
			writeError(w, http.StatusNotAcceptable, "%s %q has more than %d fields and list items, more than are made into YAML "+
				"(each costs kilobytes of memory to convert): ask for JSON (format=json)", r.name, key, maxYAMLNodes)
			return
		}
		b, err := marshalYAML(obj.Object, maxYAMLBytes)
		if errors.Is(err, errYAMLTooLarge) {
			writeError(w, http.StatusNotAcceptable, "%s %q as YAML would be longer than %d MiB, more than is served "+
				"(it nests %d levels deep, and YAML indents each): ask for JSON (format=json)", r.name, key, maxYAMLBytes>>20, depth(obj.Object))
			return
		}
		if err != nil {
			writeError(w, http.StatusInternalServerError, "%s %q as YAML: %v", r.name, key, err)
			return
		}
		w.Header().Set("Content-Type", "application/yaml; charset=utf-8")
		w.Header().Set("X-Content-Type-Options", "nosniff")
		_, _ = w.Write(b)
		return
	}
	writeJSON(w, http.StatusOK, obj.Object)
}

// startupStats is how a resource's start went (kinformer.Startup), for
// /stats: seconds to the first complete list and until every handler had
// handled its initial pass (so far, while not done), and objects of the
// expected total (0: unknown).
type startupStats struct {
	Synced          bool    `json:"synced"`
	ListSeconds     float64 `json:"listSeconds"`
	HandlersDone    bool    `json:"handlersDone"`
	HandlersSeconds float64 `json:"handlersSeconds"`
	Objects         int     `json:"objects"`
	Expected        int     `json:"expected,omitempty"`
}

func newStartupStats(s kinformer.Startup) *startupStats {
	if !s.Started {
		return nil
	}
	return &startupStats{Synced: s.Synced, ListSeconds: s.ListTook.Seconds(), HandlersDone: s.HandlersDone,
		HandlersSeconds: s.HandlersTook.Seconds(), Objects: s.Objects, Expected: s.Expected}
}

type resourceStats struct {
	Name       string           `json:"name"`
	Kind       string           `json:"kind"`
	Namespace  string           `json:"namespace,omitempty"`
	Namespaced bool             `json:"namespaced"`
	Synced     bool             `json:"synced"`
	Error      string           `json:"error,omitempty"` // a persistent error, and since when
	Objects    int              `json:"objects"`
	Events     map[string]int64 `json:"events"`
	Rate       []int64          `json:"rate"` // events a second, oldest first
	Clients    int              `json:"clients"`
	Shard      *resourceShard   `json:"shard,omitempty"`   // sharded: the informer's share
	Compact    bool             `json:"compact"`           // the cache holds bytes (--compact)
	Startup    *startupStats    `json:"startup,omitempty"` // how its start went
}

// stats feeds the page: counts, and events per second over the last
// minute.
func (s *server) stats(w http.ResponseWriter, req *http.Request) {
	now := s.now()
	out := struct {
		Ready     bool            `json:"ready"`
		Time      time.Time       `json:"time"`
		Sharding  *shardingStats  `json:"sharding,omitempty"`
		Resources []resourceStats `json:"resources"`
	}{Ready: len(s.notReady()) == 0, Time: now}
	if s.shard != nil {
		out.Sharding = s.shard.stats()
	}
	for _, r := range s.resources {
		ev := map[string]int64{}
		for i, t := range eventTypes {
			ev[string(t)] = r.counts[i].Load()
		}
		errMsg := ""
		if err, _ := r.src.lastError(); err != nil {
			errMsg = r.problem(now)
		}
		out.Resources = append(out.Resources, resourceStats{
			Name: r.name, Kind: r.res.kind, Namespace: r.scope, Namespaced: r.res.namespaced,
			Synced: r.src.hasSynced(), Error: errMsg, Objects: r.src.len(), Events: ev,
			Rate: r.rate.last(now), Clients: r.hub.len(), Shard: newResourceShard(r.shardStatus()),
			Compact: r.src.compact(), Startup: newStartupStats(r.src.startup()),
		})
	}
	writeJSON(w, http.StatusOK, out)
}
