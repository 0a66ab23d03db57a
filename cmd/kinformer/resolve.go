package main

import (
	"fmt"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/rest"
)

// resource is a resolved RESOURCE argument.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
	watchable  bool // supports list and watch
}

// String names the resource the way kubectl api-resources does:
// "configmaps", "deployments.apps".
func (r resource) String() string {
	if r.gvr.Group == "" {
		return r.gvr.Resource
	}
	return r.gvr.Resource + "." + r.gvr.Group
}

// discover resolves arg through the server's discovery: the preferred
// version of every group, core first, like kubectl.
func discover(cfg *rest.Config, arg string) (resource, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return resource{}, err
	}
	lists, err := dc.ServerPreferredResources()
	var partial string
	if err != nil {
		// Some aggregated API being down must not hide the others.
		if !discovery.IsGroupDiscoveryFailedError(err) || len(lists) == 0 {
			return resource{}, fmt.Errorf("discovery: %w", err)
		}
		partial = err.Error()
	}
	r, err := resolve(arg, lists)
	if err != nil && partial != "" {
		err = &codedError{code: exitUnknown, msg: err.Error() + " (" + partial + ")", err: err}
	}
	return r, err
}

// resolve finds arg among the discovered resources. arg may be a plural,
// singular or short name or a kind, case-insensitively, optionally followed
// by ".group" or ".version.group" ("deployments.apps", "configmaps." for
// the core group). Exact plural names win over singular names, which win
// over short names, which win over kinds; among equals, the first group in
// discovery order (core first) wins.
func resolve(arg string, lists []*metav1.APIResourceList) (resource, error) {
	unknown := &codedError{code: exitUnknown, msg: fmt.Sprintf("unknown resource %q: the server has no resource type, short name or kind of that name", arg)}
	want := strings.ToLower(strings.TrimSpace(arg))
	if want == "" || strings.ContainsAny(want, "/ ") {
		return resource{}, unknown
	}
	name, qualifier, qualified := strings.Cut(want, ".")

	const (
		byPlural = iota
		bySingular
		byShort
		byKind
		nMatch
	)
	var best [nMatch]*resource
	for _, list := range lists {
		gv, err := schema.ParseGroupVersion(list.GroupVersion)
		if err != nil {
			continue
		}
		if qualified && qualifier != gv.Group && qualifier != gv.Version+"."+gv.Group &&
			!(gv.Group == "" && qualifier == gv.Version) {
			continue
		}
		for i := range list.APIResources {
			ar := &list.APIResources[i]
			if strings.Contains(ar.Name, "/") { // subresource
				continue
			}
			how := -1
			switch {
			case strings.ToLower(ar.Name) == name:
				how = byPlural
			case ar.SingularName != "" && strings.ToLower(ar.SingularName) == name:
				how = bySingular
			case slices.ContainsFunc(ar.ShortNames, func(s string) bool { return strings.ToLower(s) == name }):
				how = byShort
			case strings.ToLower(ar.Kind) == name:
				how = byKind
			}
			if how < 0 || best[how] != nil {
				continue
			}
			g, v := gv.Group, gv.Version
			if ar.Group != "" {
				g = ar.Group
			}
			if ar.Version != "" {
				v = ar.Version
			}
			best[how] = &resource{
				gvr:        schema.GroupVersionResource{Group: g, Version: v, Resource: ar.Name},
				kind:       ar.Kind,
				namespaced: ar.Namespaced,
				watchable:  slices.Contains(ar.Verbs, "list") && slices.Contains(ar.Verbs, "watch"),
			}
		}
	}
	for _, r := range best {
		if r == nil {
			continue
		}
		if !r.watchable {
			return resource{}, &codedError{code: exitUnknown, msg: fmt.Sprintf("resource %q (%s) cannot be listed and watched", arg, r)}
		}
		return *r, nil
	}
	return resource{}, unknown
}
