package kinformer

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strconv"
	"strings"
	"time"

	"k8s.io/client-go/rest"
)

// Waiting for a custom resource to come back. When the server stops serving
// a resource (a 404 on its collection: its CustomResourceDefinition was
// deleted), listing it every backoff only draws 404s. Instead the loop
// watches the CustomResourceDefinition by name and lists again as soon as
// it is established and serves the informer's version: no request for the
// resource meanwhile, and no wait once it is back. Where the CRD cannot be
// watched (the client may not list customresourcedefinitions, the core group
// or a built-in group without a dot, a client kinformer cannot reach the API
// through), the loop lists again after each backoff, as before; an
// aggregated API, which has no CRD, is found back by the list that follows
// each wait.

// crdWatchTimeout bounds one wait: a resource served by something other
// than a CRD (an aggregated API) returns unseen by the CRD's watch, and is
// found by the list that follows each wait.
const crdWatchTimeout = time.Minute

// crdPath is the collection of CustomResourceDefinitions.
const crdPath = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions"

// crdWait is what one wait for a CRD found.
type crdWait int

const (
	// crdUnknown: the wait told nothing (the CRD was already established,
	// the request failed, a share changed): wait out a backoff, then list.
	crdUnknown crdWait = iota
	// crdRefused: the CRD cannot be watched with this client (403, 401,
	// or no such API): wait out backoffs from now on.
	crdRefused
	// crdBack: the CRD became established during the wait: list at once.
	crdBack
	// crdQuiet: the watch ran its course without news: list now (it has
	// waited long enough).
	crdQuiet
)

// crdTarget is the CustomResourceDefinition of the resource a directWatcher
// reads: its name (plural.group) and the version the informer reads; false
// for a resource no CRD can serve (the core group) or one not yet known.
func (d *directWatcher) crdTarget() (name, version string, ok bool) {
	gvr := d.gvr
	if d.path == nil {
		gv := d.client.APIVersion()
		gvr = gv.WithResource(d.resource)
	}
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

// awaitCRD waits until the CustomResourceDefinition name serves version,
// until the watch ends (crdWatchTimeout), or until stop or ctx. It lists
// the CRD first: one already established is crdUnknown (the 404 came from
// a server not yet serving it; the backoff paces the lists).
func awaitCRD(ctx context.Context, client rest.Interface, name, version string, stop <-chan struct{}) (crdWait, error) {
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
	raw, err := client.Get().AbsPath(crdPath).Param("fieldSelector", selector).
		SetHeader("Accept", "application/json").Do(ctx).Raw()
	if err != nil {
		return crdFailed(err)
	}
	var list struct {
		Metadata struct {
			ResourceVersion string `json:"resourceVersion"`
		} `json:"metadata"`
		Items []crdObject `json:"items"`
	}
	if err := json.Unmarshal(raw, &list); err != nil {
		return crdUnknown, fmt.Errorf("list of customresourcedefinitions: %w", err)
	}
	for i := range list.Items {
		if list.Items[i].serves(version) {
			return crdUnknown, nil
		}
	}
	body, err := client.Get().AbsPath(crdPath).Param("fieldSelector", selector).Param("watch", "true").
		Param("resourceVersion", list.Metadata.ResourceVersion).
		Param("timeoutSeconds", strconv.Itoa(int(crdWatchTimeout/time.Second))).
		SetHeader("Accept", "application/json").Throttle(nil).Stream(ctx)
	if err != nil {
		return crdFailed(err)
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
			return crdUnknown, ctx.Err()
		case errors.Is(err, io.EOF) && time.Since(opened) >= crdWatchTimeout/2:
			return crdQuiet, nil
		case errors.Is(err, io.EOF):
			// Ended early (a proxy that does not stream): a backoff
			// paces the next attempt.
			return crdUnknown, errors.New("watch of customresourcedefinitions ended early")
		case err != nil:
			return crdUnknown, fmt.Errorf("watch of customresourcedefinitions: %w", err)
		}
		switch ev.Type {
		case "ADDED", "MODIFIED":
			var crd crdObject
			if err := json.Unmarshal(ev.Object, &crd); err != nil {
				return crdUnknown, fmt.Errorf("watch of customresourcedefinitions: %w", err)
			}
			if crd.serves(version) {
				return crdBack, nil
			}
		case "ERROR":
			// 410 Gone and the like: the next wait lists again.
			return crdUnknown, errors.New("watch of customresourcedefinitions: an ERROR event")
		}
	}
}

// crdFailed sorts a failed request for CRDs: one this client will never be
// allowed, or a server without the API, is crdRefused.
func crdFailed(err error) (crdWait, error) {
	if IsPersistent(err) {
		return crdRefused, err
	}
	return crdUnknown, err
}
