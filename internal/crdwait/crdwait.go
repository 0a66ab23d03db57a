// Package crdwait waits for a custom resource to come back.
package crdwait

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
)

// When the server stops serving
// a resource (a 404 on its collection: its CustomResourceDefinition was
// deleted), listing it every backoff only draws 404s. Instead an informer's loop
// watches the CustomResourceDefinition by name and lists again as soon as
// it is established and serves the informer's version: no request for the
// resource meanwhile, and no wait once it is back. Where the CRD cannot be
// watched (the client may not list customresourcedefinitions, the core group
// or a built-in group without a dot, a client kinformer cannot reach the API
// through), the loop lists again after each backoff, as before; an
// aggregated API, which has no CRD, is found back by the list that follows
// each wait.

// watchTimeout bounds one wait: a resource served by something other
// than a CRD (an aggregated API) returns unseen by the CRD's watch, and is
// found by the list that follows each wait.
const watchTimeout = time.Minute

// listPath is the collection of CustomResourceDefinitions.
const listPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// Result is what one wait for a CRD found.
type Result int

const (
	// Unknown: the wait told nothing (the CRD was already established,
	// the request failed, a share changed): wait out a backoff, then list.
	Unknown Result = iota
	// Refused: the CRD cannot be watched with this client (403, 401,
	// or no such API): wait out backoffs from now on.
	Refused
	// Back: the CRD became established during the wait: list at once.
	Back
	// Quiet: the watch ran its course without news: list now (it has
	// waited long enough).
	Quiet
)

// Target is the CustomResourceDefinition that can serve gvr: its name
// (plural.group) and the version read; false for a resource no CRD can
// serve (the core group, a built-in group) or one not yet known.
func Target(gvr schema.GroupVersionResource) (name, version string, ok bool) {
	// A CRD's group has a dot; the built-in groups without one (apps,
	// batch, policy, …) never come from a CRD.
	if !strings.Contains(gvr.Group, ".") || gvr.Resource == "" {
		return "", "", false
	}
	return gvr.Resource + "." + gvr.Group, gvr.Version, true
}

// crdObject is the part of a CustomResourceDefinition the wait reads.
type crdObject struct {
	Metadata struct {
		ResourceVersion string `json:"resourceVersion"`
	} `json:"metadata"`
	Spec struct {
		Versions []struct {
			Name   string `json:"name"`
			Served bool   `json:"served"`
		} `json:"versions"`
	} `json:"spec"`
	Status struct {
		Conditions []struct {
			Type   string `json:"type"`
			Status string `json:"status"`
		} `json:"conditions"`
	} `json:"status"`
}

// serves reports whether the CRD is established and serves version.
func (c *crdObject) serves(version string) bool {
	established := false
	for _, cond := range c.Status.Conditions {
		if cond.Type == "Established" {
			established = cond.Status == "True"
		}
	}
	if !established {
		return false
	}
	for _, v := range c.Spec.Versions {
		if v.Name == version {
			return v.Served
		}
	}
	return false
}

// Await waits until the CustomResourceDefinition name serves version,
// until the watch ends (watchTimeout), or until stop or ctx. It lists
// the CRD first: one already established is Unknown (the 404 came from
// a server not yet serving it; the backoff paces the lists). persistent
// says which failed requests will fail again (Refused).
func Await(ctx context.Context, client rest.Interface, name, version string, stop <-chan struct{}, persistent func(error) bool) (Result, error) {
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	go func() {
		select {
		case <-stop:
			cancel()
		case <-ctx.Done():
		}
	}()
	selector := "metadata.name=" + name
	raw, err := client.Get().AbsPath(listPath).Param("fieldSelector", selector).
		SetHeader("Accept", "application/json").Do(ctx).Raw()
	if err != nil {
		return failed(err, persistent)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []crdObject `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return Unknown, fmt.Errorf("list of customresourcedefinitions: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].serves(version) {
			return Unknown, nil
		}
	}
	body, err := client.Get().AbsPath(listPath).Param("fieldSelector", selector).Param("watch", "true").
		Param("resourceVersion", list.Metadata.ResourceVersion).
		Param("timeoutSeconds", strconv.Itoa(int(watchTimeout/time.Second))).
		SetHeader("Accept", "application/json").Throttle(nil).Stream(ctx)
	if err != nil {
		return failed(err, persistent)
	}
	defer body.Close()
	opened := time.Now()
	dec := json.NewDecoder(body)
	for {
		var ev struct {
			Type   string          `json:"type"`
			Object json.RawMessage `json:"object"`
		}
		switch err := dec.Decode(&ev); {
		case ctx.Err() != nil:
			return Unknown, ctx.Err()
		case errors.Is(err, io.EOF) && time.Since(opened) >= watchTimeout/2:
			return Quiet, nil
		case errors.Is(err, io.EOF):
			// Ended early (a proxy that does not stream): a backoff
			// paces the next attempt.
			return Unknown, errors.New("watch of customresourcedefinitions ended early")
		case err != nil:
			return Unknown, fmt.Errorf("watch of customresourcedefinitions: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			var crd crdObject
			if err := json.Unmarshal(ev.Object, &crd); err != nil {
				return Unknown, fmt.Errorf("watch of customresourcedefinitions: %w", err)
			}
			if crd.serves(version) {
				return Back, nil
			}
		case "ERROR":
			// 410 Gone and the like: the next wait lists again.
			return Unknown, errors.New("watch of customresourcedefinitions: an ERROR event")
		}
	}
}

// failed sorts a failed request for CRDs: one this client will never be
// allowed, or a server without the API (persistent), is Refused.
func failed(err error, persistent func(error) bool) (Result, error) {
	if persistent(err) {
		return Refused, err
	}
	return Unknown, err
}
