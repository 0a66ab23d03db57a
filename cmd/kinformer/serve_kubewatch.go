package main

import (
	"bufio"
	"encoding/json"
	"fmt"
	"net/http"
	"runtime"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/validation/field"

	"github.com/kinformer/kinformer"
)

// kubeWatch answers a watch, as the API server's watch cache does:
//   - from "" or "0", or with sendInitialEvents=true (watch-list): ADDED
//     for every object selected, then (watch-list) a bookmark that ends
//     them, then what changes;
//   - from a version N the resource's ring covers: what changed after N;
//     from an older one, an ERROR event 410 Expired (the client lists
//     again).
//
// With a selector, an object that comes to match is ADDED and one that
// no longer does is DELETED. Bookmarks, if allowed, every
// kubeBookmarkEvery. The watch ends at timeoutSeconds (30 minutes at
// most), when the server stops, and when the watcher falls behind the
// ring or the resource's history breaks (a re-list): its client watches
// again from the last version it had.
func (s *server) kubeWatch(w http.ResponseWriter, req *http.Request, rt kubeRoute, q map[string][]string) {
	one := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	sel, err := kubeSelect(q, rt.namespace, rt.onlyName)
	if err != nil {
		kubeStatus(w, err.(apierrors.APIStatus), "")
		return
	}
	bookmarks := queryBool(q, "allowWatchBookmarks")
	want, match := one("resourceVersion"), one("resourceVersionMatch")
	var initial, initialEnd bool
	sendInitial := ""
	if _, set := q["sendInitialEvents"]; set {
		sendInitial = strconv.FormatBool(queryBool(q, "sendInitialEvents"))
	}
	switch sendInitial {
	case "true":
		var errs field.ErrorList
		if match != string(metav1.ResourceVersionMatchNotOlderThan) {
			errs = append(errs, field.Forbidden(field.NewPath("resourceVersionMatch"), "sendInitialEvents requires resourceVersionMatch=NotOlderThan"))
		}
		if !bookmarks {
			errs = append(errs, field.Forbidden(field.NewPath("allowWatchBookmarks"), "sendInitialEvents requires allowWatchBookmarks=true"))
		}
		if len(errs) > 0 {
			kubeStatus(w, apierrors.NewInvalid(schema.GroupKind{Group: "meta.k8s.io", Kind: "ListOptions"}, "", errs), "")
			return
		}
		initial, initialEnd = true, true
	case "false":
		// No initial events, whatever the version: from it, or from now.
		if match != "" && match != string(metav1.ResourceVersionMatchNotOlderThan) {
			kubeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch %q: want NotOlderThan", match)), "")
			return
		}
		if want == "" || want == "0" {
			want = rt.r.src.resourceVersion()
		}
	case "":
		if match != "" {
			kubeStatus(w, apierrors.NewBadRequest("resourceVersionMatch is forbidden for watch unless sendInitialEvents is given"), "")
			return
		}
		initial = want == "" || want == "0"
	}
	lifetime := kubeMaxWatch
	if t := one("timeoutSeconds"); t != "" {
		n, err := strconv.Atoi(t)
		if err != nil || n < 0 {
			kubeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("timeoutSeconds %q: want a number of seconds", t)), "")
			return
		}
		if n > 0 {
			lifetime = min(lifetime, time.Duration(n)*time.Second)
		}
	}
	if !s.kubeWatches.acquire() {
		w.Header().Set("Retry-After", retryAfter)
		kubeStatus(w, apierrors.NewTooManyRequests(fmt.Sprintf("too many watches at once (%d); retry later", s.kubeWatches.max), 2), "")
		return
	}
	defer s.kubeWatches.release()

	ring := rt.r.kube
	var cur kubeCursor
	var floor uint64 // events up to this version are not sent: the client has them
	var snapRV string
	if initial {
		// The cursor before the cache's version, and the version before
		// its objects: an event the objects already show may be sent
		// again (as MODIFIED, or ADDED), none is missed.
		cur = ring.now()
		if initialEnd {
			snapRV = kubeWaitRV(req.Context(), rt.r.src, want, match)
			// NotOlderThan want: a bare version, as a list reads it.
			if st := kubeCheckListRV(rt.r, want, "", snapRV, false); st != nil {
				kubeStatus(w, st, "") // 504 for a version not reached: client-go lists from "" then
				return
			}
		} else {
			snapRV = rt.r.src.resourceVersion()
		}
		floor, _ = parseRV(snapRV)
	} else {
		n, ok := parseRV(want)
		if !ok {
			kubeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: not a version this server gave", want)), "")
			return
		}
		var oldest uint64
		if cur, ok, oldest = ring.from(n); !ok {
			msg := fmt.Sprintf("too old resource version: %d (%d)", n, oldest)
			if oldest == 0 {
				msg = fmt.Sprintf("too old resource version: %d: %s keeps no history yet (not synced, or served by namespace)", n, rt.r.name)
			}
			st := apierrors.NewResourceExpired(msg).Status()
			st.Kind, st.APIVersion = "Status", "v1"
			if rt.proto {
				w.Header().Set("Content-Type", contentTypeProtobufWatch)
				w.WriteHeader(http.StatusOK)
				newProtoWatchEncoder(w, rt.r.res.gvr.GroupVersion().WithKind(rt.r.res.kind), rt.jsonOK, nil).status(&st)
				return
			}
			w.Header().Set("Content-Type", "application/json")
			w.WriteHeader(http.StatusOK)
			writeJSONLine(w, map[string]any{"type": "ERROR", "object": st})
			return
		}
		floor = n
	}

	gvk := rt.r.res.gvr.GroupVersion().WithKind(rt.r.res.kind)
	w.Header().Set("Content-Type", map[bool]string{true: contentTypeProtobufWatch, false: "application/json"}[rt.proto])
	w.WriteHeader(http.StatusOK)
	if req.Method == http.MethodHead {
		return
	}
	rc := http.NewResponseController(w)
	// The stream's last chunk is written after this returns: with a
	// fresh deadline, not the one of the last event, maybe long past.
	defer rc.SetWriteDeadline(time.Now().Add(s.writeTimeout))
	bw := bufio.NewWriterSize(deadlineWriter{w: w, rc: rc, timeout: s.writeTimeout}, 32<<10)
	var pw *protoWatchEncoder
	if rt.proto {
		pw = newProtoWatchEncoder(bw, gvk, rt.jsonOK, &rt.r.protoChecked)
	}
	flush := func() bool { return bw.Flush() == nil && rc.Flush() == nil }
	// send writes an event of o, whose JSON is js and protobuf pe (nil:
	// not made yet). False ends the watch: the client's connection
	// failed, or (protobuf) o did not convert, said in an ERROR event
	// (flushed, with the events before it), or its protobuf would lose
	// fields (an ERROR 410 Expired, flushed: the client lists again, in
	// JSON).
	send := func(typ string, o *unstructured.Unstructured, js []byte, pe *protoEncoded) bool {
		if pw != nil {
			err := pw.event(typ, o, pe)
			if pw.lossy {
				rt.r.protoLossy.Store(true)
			}
			if err != nil {
				flush()
			}
			return err == nil
		}
		if js == nil {
			var err error
			if js, err = objectJSON(o); err != nil {
				return true
			}
		}
		bw.WriteString(`{"type":"`)
		bw.WriteString(typ)
		bw.WriteString(`","object":`)
		bw.Write(js)
		_, err := bw.WriteString("}\n")
		return err == nil
	}
	bookmark := func(rv string, end bool) bool {
		if pw != nil {
			return pw.bookmark(rv, end) == nil
		}
		md := map[string]any{"resourceVersion": rv}
		if end {
			md["annotations"] = map[string]string{initialEventsEnd: "true"}
		}
		b, _ := json.Marshal(map[string]any{"kind": rt.r.res.kind, "apiVersion": rt.r.res.gvr.GroupVersion().String(), "metadata": md})
		_, err := bw.WriteString(`{"type":"BOOKMARK","object":` + string(b) + "}\n")
		return err == nil
	}
	// The initial objects are read one by one after floor: one may be
	// newer than floor (ahead: the events up to its version are not sent
	// again, lest the client go back in time), or deleted since (gone:
	// its events are not sent until its DELETED, lest it come back).
	var ahead map[string]uint64
	var aheadMax uint64
	var gone map[string]bool
	if initial {
		keys, get := rt.r.src.keyed(sel.ns)
		for _, k := range keys {
			o, ok := get(k)
			if !ok {
				if gone == nil {
					gone = map[string]bool{}
				}
				gone[k] = true
				continue
			}
			if orv, _ := parseRV(o.GetResourceVersion()); orv > floor && floor > 0 {
				if ahead == nil {
					ahead = map[string]uint64{}
				}
				ahead[k], aheadMax = orv, max(aheadMax, orv)
			}
			if !sel.matches(o) {
				continue
			}
			if !send("ADDED", o, nil, nil) {
				return
			}
		}
		if initialEnd && !bookmark(snapRV, true) {
			return
		}
	}
	if !flush() {
		return
	}

	end := time.NewTimer(lifetime)
	defer end.Stop()
	tick := time.NewTicker(kubeBookmarkEvery)
	defer tick.Stop()
	sent := floor // the newest version the client has
	caughtUp := uint64(0)
	var buf []kubeEvent
	for {
		evs, wake, last, behind := ring.read(&cur, buf[:0], kubeWatchBatch)
		if behind {
			flush()
			return
		}
		for _, e := range evs {
			if e.rv <= floor {
				continue
			}
			if ahead != nil && e.rv > aheadMax {
				ahead = nil // past every object read ahead
			}
			if ahead != nil || len(gone) > 0 {
				key := rt.r.src.key(e.obj)
				if e.rv <= ahead[key] {
					continue
				}
				if gone[key] {
					if e.typ == kinformer.Deleted {
						delete(gone, key)
					}
					continue
				}
			}
			typ, obj, js := kubeEventFor(sel, e)
			if typ == "" {
				continue
			}
			pe := e.proto
			if js == nil {
				pe = nil // another object than the event's (a DELETED of the state before)
			}
			if !send(typ, obj, js, pe) {
				return
			}
			sent = max(sent, e.rv)
		}
		clear(evs) // the ring may drop them: this watcher holds none
		buf = evs
		if len(evs) == kubeWatchBatch {
			continue
		}
		caughtUp = last
		if !flush() {
			return
		}
		select {
		case <-wake:
		case <-tick.C:
			if bookmarks && caughtUp > sent && ring.covered() {
				sent = caughtUp
				if !bookmark(strconv.FormatUint(sent, 10), false) || !flush() {
					return
				}
			}
		case <-end.C:
			return
		case <-req.Context().Done():
			return
		case <-s.closing:
			return
		}
	}
}

// kubeEventFor is how e shows to a watch with sel: its type, its object
// and the object's JSON (nil: not made), or "" if it does not show. An
// object that comes to match is ADDED; one that no longer does is
// DELETED, with its state before the change at the event's version, as
// the API server sends it.
func kubeEventFor(sel kubeSelection, e kubeEvent) (string, *unstructured.Unstructured, []byte) {
	typ := string(e.typ)
	if sel.ns == "" && sel.labels.Empty() && sel.fields.Empty() {
		return typ, e.obj, e.json
	}
	now := sel.matches(e.obj)
	if e.typ != kinformer.Modified {
		if !now {
			return "", nil, nil
		}
		return typ, e.obj, e.json
	}
	before := e.old != nil && sel.matches(e.old)
	switch {
	case now && before:
		return typ, e.obj, e.json
	case now:
		return string(kinformer.Added), e.obj, e.json
	case before:
		o := e.old.DeepCopy()
		o.SetResourceVersion(strconv.FormatUint(e.rv, 10))
		return string(kinformer.Deleted), o, nil
	}
	return "", nil, nil
}

// writeJSONLine writes v as one line of JSON.
func writeJSONLine(w http.ResponseWriter, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		return
	}
	w.Write(append(b, '\n'))
}

// ---- discovery ----

// kubeVersions answers /api.
func (s *server) kubeVersions(w http.ResponseWriter) {
	versions := []string{}
	if slices.ContainsFunc(s.resources, func(r *served) bool { return r.res.gvr.Group == "" }) {
		versions = append(versions, "v1")
	}
	writeJSON(w, http.StatusOK, &metav1.APIVersions{
		TypeMeta:                   metav1.TypeMeta{Kind: "APIVersions"},
		Versions:                   versions,
		ServerAddressByClientCIDRs: []metav1.ServerAddressByClientCIDR{{ClientCIDR: "0.0.0.0/0"}},
	})
}

// kubeGroupOf is the discovery document of group: the versions of it
// served; ok false if none is.
func (s *server) kubeGroupOf(group string) (metav1.APIGroup, bool) {
	g := metav1.APIGroup{TypeMeta: metav1.TypeMeta{Kind: "APIGroup", APIVersion: "v1"}, Name: group}
	for _, r := range s.resources {
		gv := r.res.gvr.GroupVersion()
		if gv.Group != group || slices.ContainsFunc(g.Versions, func(v metav1.GroupVersionForDiscovery) bool { return v.Version == gv.Version }) {
			continue
		}
		g.Versions = append(g.Versions, metav1.GroupVersionForDiscovery{GroupVersion: gv.String(), Version: gv.Version})
	}
	if len(g.Versions) == 0 {
		return g, false
	}
	g.PreferredVersion = g.Versions[0]
	return g, true
}

// kubeGroups answers /apis: the groups of the resources served.
func (s *server) kubeGroups(w http.ResponseWriter) {
	l := metav1.APIGroupList{TypeMeta: metav1.TypeMeta{Kind: "APIGroupList", APIVersion: "v1"}, Groups: []metav1.APIGroup{}}
	seen := map[string]bool{}
	for _, r := range s.resources {
		name := r.res.gvr.Group
		if name == "" || seen[name] {
			continue
		}
		seen[name] = true
		g, _ := s.kubeGroupOf(name)
		g.TypeMeta = metav1.TypeMeta{}
		l.Groups = append(l.Groups, g)
	}
	writeJSON(w, http.StatusOK, &l)
}

// kubeGroup answers /apis/GROUP.
func (s *server) kubeGroup(w http.ResponseWriter, group string) {
	g, ok := s.kubeGroupOf(group)
	if !ok {
		kubeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: group}, ""), fmt.Sprintf("group %q is not served here (serving %s)", group, s.choices()))
		return
	}
	writeJSON(w, http.StatusOK, &g)
}

// kubeResources answers /api/v1 and /apis/GROUP/VERSION: the resources
// of gv served, each with the verbs served (get, list, watch).
func (s *server) kubeResources(w http.ResponseWriter, gv schema.GroupVersion) {
	l := metav1.APIResourceList{TypeMeta: metav1.TypeMeta{Kind: "APIResourceList", APIVersion: "v1"}, GroupVersion: gv.String()}
	for _, r := range s.resources {
		if r.res.gvr.GroupVersion() != gv {
			continue
		}
		l.APIResources = append(l.APIResources, metav1.APIResource{
			Name: r.res.gvr.Resource, Namespaced: r.res.namespaced, Kind: r.res.kind,
			Verbs: metav1.Verbs{"get", "list", "watch"},
		})
	}
	if len(l.APIResources) == 0 {
		kubeStatus(w, apierrors.NewNotFound(schema.GroupResource{Group: gv.Group}, gv.Version), fmt.Sprintf("%s is not served here (serving %s)", gv, s.choices()))
		return
	}
	writeJSON(w, http.StatusOK, &l)
}

// kubeVersion answers /version: this program's version, where kubectl
// looks for the server's.
func (s *server) kubeVersion(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]string{"major": "", "minor": "", "gitVersion": version(), "goVersion": runtime.Version(), "platform": runtime.GOOS + "/" + runtime.GOARCH})
}
