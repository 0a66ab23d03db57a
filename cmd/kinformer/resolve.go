package main

import (
	"cmp"
	"context"
	"fmt"
	"slices"
	"strings"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
)

// resource is a resolved RESOURCE argument.
type resource struct {
	gvr        schema.GroupVersionResource
	kind       string
	namespaced bool
}

// String names the resource the way kubectl api-resources does:
// "configmaps", "deployments.apps".
func (r resource) String() string {
	if r.gvr.Group == "" {
		return r.gvr.Resource
	}
	return r.gvr.Resource + "." + r.gvr.Group
}

// resolver resolves RESOURCE arguments like kubectl: client-go's RESTMapper
// over the server's discovery, with short names expanded. Discovery is read
// once and kept in memory for the life of the process, however many
// arguments there are. Every request it makes takes the caller's context,
// so that SIGINT stops a discovery that hangs (client-go's own timeout for
// discovery is 32 s).
type resolver struct {
	discovery discovery.CachedDiscoveryInterfaceWithContext
	mapper    meta.RESTMapperWithContext
	partial   error // the groups discovery could not read, if any
}

// newResolver makes a resolver for the server of cfg; warn receives the
// mapper's warnings (an ambiguous short name).
func newResolver(ctx context.Context, cfg *rest.Config, warn func(string)) (*resolver, error) {
	dc, err := discovery.NewDiscoveryClientForConfig(cfg)
	if err != nil {
		return nil, err
	}
	cached := memory.NewMemCacheClientWithContext(dc)
	// Read discovery now, to fail early (and once) on an unreachable or
	// unauthorised server. Some aggregated API being down must not hide the
	// others: the mapper works with what was found.
	_, _, err = cached.ServerGroupsAndResourcesWithContext(ctx)
	if err != nil && !discovery.IsGroupDiscoveryFailedError(err) {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	mapper := restmapper.NewShortcutExpanderWithContext(restmapper.NewDeferredDiscoveryRESTMapperWithContext(cached), ordered{cached}, warn)
	return &resolver{discovery: cached, mapper: mapper, partial: err}, nil
}

// resolve finds arg: a plural, singular or short name or a kind, optionally
// qualified as NAME.GROUP or NAME.VERSION.GROUP ("deployments.apps",
// "configmaps." for the core group), as kubectl does. Two forms kubectl
// lacks are kept from kinformer's own rules: NAME.VERSION for the core group
// ("configmaps.v1"), and names in any case ("CM").
func (r *resolver) resolve(ctx context.Context, arg string) (resource, error) {
	var m *meta.RESTMapping
	err := error(&meta.NoResourceMatchError{PartialResource: schema.GroupVersionResource{Resource: arg}})
	for _, a := range candidates(arg) {
		if m, err = r.mapping(ctx, a); !meta.IsNoMatchError(err) {
			break
		}
	}
	switch {
	case meta.IsNoMatchError(err):
		msg := fmt.Sprintf("unknown resource %q: the server has no resource type, short name or kind of that name", arg)
		if r.partial != nil {
			msg += " (" + r.partial.Error() + ")"
		}
		return resource{}, &codedError{code: exitUnknown, msg: msg, err: err}
	case err != nil:
		return resource{}, fmt.Errorf("resolving %q: %w", arg, err)
	}
	res := resource{gvr: m.Resource, kind: m.GroupVersionKind.Kind, namespaced: m.Scope.Name() == meta.RESTScopeNameNamespace}
	if !r.watchable(ctx, res.gvr) {
		return resource{}, &codedError{code: exitUnknown, msg: fmt.Sprintf("resource %q (%s) cannot be listed and watched", arg, res)}
	}
	return res, nil
}

// candidates are the spellings of arg to try, in order.
func candidates(arg string) []string {
	arg = strings.TrimSpace(arg)
	if arg == "" || strings.ContainsAny(arg, "/ ") {
		return nil // not a resource name; subresources are not watched
	}
	out := []string{arg}
	if strings.Count(arg, ".") == 1 {
		out = append(out, arg+".") // NAME.VERSION of the core group
	}
	if lower := strings.ToLower(arg); lower != arg {
		out = append(out, candidates(lower)...)
	}
	return out
}

// mapping is kubectl's lookup of a RESOURCE argument (cli-runtime's
// resource.Builder, whose mappingFor is unexported): as a resource, then as
// a kind.
func (r *resolver) mapping(ctx context.Context, arg string) (*meta.RESTMapping, error) {
	var gvk schema.GroupVersionKind
	gvr, gr := schema.ParseResourceArg(arg)
	if gvr != nil {
		gvk, _ = r.mapper.KindForWithContext(ctx, *gvr)
	}
	if gvk.Empty() {
		gvk, _ = r.mapper.KindForWithContext(ctx, gr.WithVersion(""))
	}
	if !gvk.Empty() {
		return r.mapper.RESTMappingWithContext(ctx, gvk.GroupKind(), gvk.Version)
	}
	full, gk := schema.ParseKindArg(arg)
	if full != nil {
		if m, err := r.mapper.RESTMappingWithContext(ctx, full.GroupKind(), full.Version); err == nil {
			return m, nil
		}
	}
	return r.mapper.RESTMappingWithContext(ctx, gk)
}

// watchable reports whether discovery (already cached) lists the verbs an
// informer needs for gvr.
func (r *resolver) watchable(ctx context.Context, gvr schema.GroupVersionResource) bool {
	list, err := r.discovery.ServerResourcesForGroupVersionWithContext(ctx, gvr.GroupVersion().String())
	if err != nil {
		return true // let the list say what is wrong
	}
	for _, ar := range list.APIResources {
		if ar.Name == gvr.Resource {
			return slices.Contains(ar.Verbs, "list") && slices.Contains(ar.Verbs, "watch")
		}
	}
	return true
}

// ordered lists resources in discovery's group order, core first. The
// short name expander takes the first resource with a short name ("ev":
// core events, not events.k8s.io's), but with aggregated discovery client-go
// lists them in map order, so the choice would change from run to run.
type ordered struct {
	discovery.CachedDiscoveryInterfaceWithContext
}

func (o ordered) ServerGroupsAndResourcesWithContext(ctx context.Context) ([]*metav1.APIGroup, []*metav1.APIResourceList, error) {
	groups, lists, err := o.CachedDiscoveryInterfaceWithContext.ServerGroupsAndResourcesWithContext(ctx)
	rank := map[string]int{}
	for _, g := range groups {
		for _, v := range g.Versions {
			rank[v.GroupVersion] = len(rank)
		}
	}
	key := func(l *metav1.APIResourceList) int {
		if r, ok := rank[l.GroupVersion]; ok {
			return r
		}
		return len(rank)
	}
	lists = slices.Clone(lists)
	slices.SortStableFunc(lists, func(a, b *metav1.APIResourceList) int { return cmp.Compare(key(a), key(b)) })
	return groups, lists, err
}
