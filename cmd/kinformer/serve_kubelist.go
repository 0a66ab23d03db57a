package main

// --kube-api's lists: pages, continue tokens and the resourceVersion
// rules of the API server's watch cache (serve_kubeapi.go routes them).

import (
	"bufio"
	"bytes"
	"context"
	"encoding/base64"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"strconv"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// kubeContinue is a list's continue token: the version of the list's
// first page and the last key given.
type kubeContinue struct {
	RV    string `json:"rv"`
	Start string `json:"start"`
}

// kubeList answers a list: the cache's objects, sorted by key, a page at
// a time with limit. The list's version is read before its objects: an
// object may show a change after it, which the watch from it brings
// again; none is missed.
func (s *server) kubeList(w http.ResponseWriter, req *http.Request, rt kubeRoute, q map[string][]string) {
	one := func(k string) string {
		if v := q[k]; len(v) > 0 {
			return v[0]
		}
		return ""
	}
	// A version not seen yet is waited for before taking a slot.
	rv := kubeWaitRV(req.Context(), rt.r.src, one("resourceVersion"), one("resourceVersionMatch"))
	if !s.objectRequests.acquire() {
		w.Header().Set("Retry-After", retryAfter)
		kubeStatus(w, apierrors.NewTooManyRequests(fmt.Sprintf("too many lists at once (%d); retry later", s.objectRequests.max), 2), "")
		return
	}
	defer s.objectRequests.release()
	sel, err := kubeSelect(q, rt.namespace, "")
	if err != nil {
		kubeStatus(w, err.(apierrors.APIStatus), "")
		return
	}
	limit := 0
	if l := one("limit"); l != "" {
		n, err := strconv.Atoi(l)
		if err != nil || n < 0 {
			kubeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("limit %q: want a number, 0 or more", l)), "")
			return
		}
		limit = n
	}
	if st := kubeCheckListRV(rt.r, one("resourceVersion"), one("resourceVersionMatch"), rv, one("continue") != ""); st != nil {
		kubeStatus(w, st, "")
		return
	}
	start := ""
	if c := one("continue"); c != "" {
		var tok kubeContinue
		b, err := base64.RawURLEncoding.DecodeString(c)
		if err == nil {
			err = json.Unmarshal(b, &tok)
		}
		if err != nil {
			kubeStatus(w, apierrors.NewBadRequest(fmt.Sprintf("continue token %q: not one this server gave", c)), "")
			return
		}
		// The next page is of the cache as it is now: an object changed
		// since the first page shows as it is, one deleted is missing;
		// the watch from the list's version (the first page's) brings
		// each such change, so a list and its watch still add up. (The
		// API server serves every page at the first one's version, and
		// 410 once it is compacted: kubectl fails on that.)
		start, rv = tok.Start, tok.RV
	}

	keys, get := rt.r.src.keyed(sel.ns)
	slices.Sort(keys)
	if start != "" {
		i, _ := slices.BinarySearch(keys, start)
		for i < len(keys) && keys[i] <= start {
			i++
		}
		keys = keys[i:]
	}
	// page yields the page's objects, then says what follows: the
	// continue token ("" if nothing), which the API server gives once a
	// page is full even if the rest do not match.
	page := func(yield func(*unstructured.Unstructured) bool) (cont string) {
		n, last := 0, ""
		for i, k := range keys {
			if limit > 0 && n == limit {
				if i < len(keys) {
					tok, _ := json.Marshal(kubeContinue{RV: rv, Start: last})
					cont = base64.RawURLEncoding.EncodeToString(tok)
				}
				return cont
			}
			o, ok := get(k)
			if !ok || !sel.matches(o) {
				continue
			}
			if !yield(o) {
				return ""
			}
			n, last = n+1, k
		}
		return ""
	}
	if rt.proto {
		// A protobuf list is one message: the page is made whole first
		// (as the API server does).
		var objs []*unstructured.Unstructured
		cont := page(func(o *unstructured.Unstructured) bool { objs = append(objs, o); return true })
		var b bytes.Buffer
		lossy, err := writeProtoList(&b, rt.r.res.gvr.GroupVersion().WithKind(rt.r.res.kind), objs, rv, cont, &rt.r.protoChecked, !rt.jsonOK)
		if lossy != nil {
			rt.lossy(w, lossy)
		}
		if !rt.proto {
			// In JSON after all: the same page.
			page = func(yield func(*unstructured.Unstructured) bool) string {
				for _, o := range objs {
					if !yield(o) {
						return ""
					}
				}
				return cont
			}
			goto json
		}
		if err != nil {
			kubeStatus(w, apierrors.NewInternalError(err), "")
			return
		}
		w.Header().Set("Content-Type", contentTypeProtobuf)
		w.WriteHeader(http.StatusOK)
		// 32 KiB a write, each with its own deadline: a large list to a
		// slow client is not one write under one deadline.
		dw := deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}
		for rest := b.Bytes(); len(rest) > 0; {
			n := min(len(rest), 32<<10)
			if _, err := dw.Write(rest[:n]); err != nil {
				panic(http.ErrAbortHandler)
			}
			rest = rest[n:]
		}
		return
	}
json:
	// The items first, streamed; the metadata after them, when it is
	// known whether more follow (JSON's members have no order).
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(http.StatusOK)
	bw := bufio.NewWriterSize(deadlineWriter{w: w, rc: http.NewResponseController(w), timeout: s.writeTimeout}, 32<<10)
	fmt.Fprintf(bw, `{"kind":%q,"apiVersion":%q,"items":[`, rt.r.res.kind+"List", rt.r.res.gvr.GroupVersion().String())
	first := true
	cont := page(func(o *unstructured.Unstructured) bool {
		b, err := objectJSON(o)
		if err != nil {
			return true
		}
		if !first {
			bw.WriteByte(',')
		}
		first = false
		if _, err := bw.Write(b); err != nil {
			panic(http.ErrAbortHandler) // cut short: the client cannot take it for a whole list
		}
		return true
	})
	fmt.Fprintf(bw, `],"metadata":{"resourceVersion":%q`, rv)
	if cont != "" {
		fmt.Fprintf(bw, `,"continue":%q`, cont)
	}
	bw.WriteString("}}\n")
	if err := bw.Flush(); err != nil {
		panic(http.ErrAbortHandler)
	}
}

// kubeWaitRV returns src's resourceVersion, once it is want or later if
// want is a version to wait for (NotOlderThan, or none said): the API
// server's watch cache waits up to 3 s for a version it has not seen yet.
func kubeWaitRV(ctx context.Context, src watchSource, want, match string) string {
	if _, ok := parseRV(want); ok && match != string(metav1.ResourceVersionMatchExact) {
		ctx, cancel := context.WithTimeout(ctx, 3*time.Second)
		defer cancel()
		_ = src.waitForRV(ctx, want) // not reached in time: kubeCheckListRV says so
	}
	return src.resourceVersion()
}

// kubeCheckListRV applies the API server's resourceVersion rules for a
// list to a cache at rv: "" and "0" are served from the cache; N with
// NotOlderThan (or no match, as the API server reads a bare N) needs the
// cache at N or later; N with Exact needs the cache at N exactly (an
// older version is gone, 410; a later one not yet there, 504, as the
// server says).
func kubeCheckListRV(r *served, want, match, rv string, continued bool) apierrors.APIStatus {
	switch match {
	case "", string(metav1.ResourceVersionMatchNotOlderThan), string(metav1.ResourceVersionMatchExact):
	default:
		return apierrors.NewBadRequest(fmt.Sprintf("resourceVersionMatch %q: want NotOlderThan or Exact", match))
	}
	if match != "" && (want == "" || continued) {
		return apierrors.NewBadRequest("resourceVersionMatch is forbidden unless resourceVersion is given, and with continue")
	}
	if want == "" || want == "0" {
		if match == string(metav1.ResourceVersionMatchExact) && want == "0" {
			return apierrors.NewBadRequest("resourceVersionMatch Exact is forbidden for resourceVersion 0")
		}
		return nil
	}
	n, ok := parseRV(want)
	if !ok {
		return apierrors.NewBadRequest(fmt.Sprintf("resourceVersion %q: not a version this server gave", want))
	}
	have, ok := parseRV(rv)
	if !ok {
		return nil // a view: its namespaces have no common version, its state is what it has
	}
	switch {
	case match == string(metav1.ResourceVersionMatchExact) && n < have:
		return apierrors.NewResourceExpired(fmt.Sprintf("too old resource version: %d (%d): this server keeps the latest version of its cache only", n, have))
	case n > have:
		return apierrors.NewTimeoutError(fmt.Sprintf("Too large resource version: %d, current: %d", n, have), 1)
	}
	return nil
}
