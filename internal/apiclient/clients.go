// Package apiclient is a Factory's side of the API server: the clients
// every informer of one factory shares (one HTTP client and one client-side
// rate limiter, as a clientset), and where each resource is served (a Go
// type's kind from the scheme, its resource and scope from the server's
// discovery).
//
// The package knows REST and discovery, not informers or sharing: the
// root asks Connect for the Clients, ForType or ForResource for a
// resource, and ListerWatcher or Dynamic for what lists and watches it.
package apiclient

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"sync"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/discovery/cached/memory"
	"k8s.io/client-go/dynamic"
	clientgoscheme "k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/util/flowcontrol"
)

// Clients are what every informer of one factory shares. They are safe for
// concurrent use.
type Clients struct {
	scheme *runtime.Scheme
	codecs runtime.NegotiatedSerializer
	base   *rest.Config // the caller's, with the shared rate limiter and user agent
	http   *http.Client // shared by every client below
	mapper *restmapper.DeferredDiscoveryRESTMapper
	dyn    *dynamic.DynamicClient
	meta   metadata.Interface

	mu   sync.Mutex // guards rest
	rest map[schema.GroupVersion]*rest.RESTClient
}

// Connect makes the clients of the server cfg describes, as
// kubernetes.NewForConfig does for a clientset's; nothing is sent yet.
// scheme maps Go types to kinds and decodes them; nil means client-go's
// kubernetes/scheme.Scheme. hc, if not nil, carries every request (as
// kubernetes.NewForConfigAndClient's); nil means one made from cfg.
func Connect(cfg *rest.Config, scheme *runtime.Scheme, hc *http.Client) (*Clients, error) {
	if cfg == nil {
		return nil, errors.New("nil *rest.Config")
	}
	c := &Clients{scheme: scheme, rest: map[schema.GroupVersion]*rest.RESTClient{}}
	if c.scheme == nil {
		c.scheme = clientgoscheme.Scheme
		c.codecs = rest.CodecFactoryForGeneratedClient(clientgoscheme.Scheme, clientgoscheme.Codecs).WithoutConversion()
	} else {
		c.codecs = rest.CodecFactoryForGeneratedClient(c.scheme, serializer.NewCodecFactory(c.scheme)).WithoutConversion()
	}
	cfg = rest.CopyConfig(cfg)
	if cfg.UserAgent == "" {
		cfg.UserAgent = rest.DefaultKubernetesUserAgent()
	}
	if cfg.RateLimiter == nil && cfg.QPS > 0 {
		if cfg.Burst <= 0 {
			return nil, errors.New("Burst must be positive when QPS is set and RateLimiter is not")
		}
		cfg.RateLimiter = flowcontrol.NewTokenBucketRateLimiter(cfg.QPS, cfg.Burst)
	}
	if hc == nil {
		var err error
		if hc, err = rest.HTTPClientFor(cfg); err != nil {
			return nil, err
		}
	}
	dc, err := discovery.NewDiscoveryClientForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	dyn, err := dynamic.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	md, err := metadata.NewForConfigAndClient(cfg, hc)
	if err != nil {
		return nil, err
	}
	c.base, c.http, c.dyn, c.meta = cfg, hc, dyn, md
	c.mapper = restmapper.NewDeferredDiscoveryRESTMapper(memory.NewMemCacheClient(dc))
	return c, nil
}

// Dynamic returns the dynamic client of resource gvr in namespace (""
// for all namespaces, or a cluster-scoped resource). It is client-go's
// own, which internal/describe recognises (for the direct decoders of
// internal/direct).
func (c *Clients) Dynamic(gvr schema.GroupVersionResource, namespace string) dynamic.ResourceInterface {
	return c.dyn.Resource(gvr).Namespace(namespace)
}

// Metadata returns the metadata client of resource gvr in namespace:
// objects as PartialObjectMetadata (metadata only), in JSON.
func (c *Clients) Metadata(gvr schema.GroupVersionResource, namespace string) metadata.ResourceInterface {
	mr := c.meta.Resource(gvr).Namespace(namespace)
	rc, err := c.restClient(schema.GroupVersion{Version: "v1"})
	if err != nil {
		return mr
	}
	return metadataResource{mr, rc}
}

// metadataResource is a metadata client that says which REST client (and
// so which HTTP client) its requests go through, for the root's probe of
// a silent connection: the metadata client keeps its own unexported.
type metadataResource struct {
	metadata.ResourceInterface
	rc *rest.RESTClient
}

// ProbeClient returns a REST client on the same HTTP client.
func (m metadataResource) ProbeClient() rest.Interface { return m.rc }

// restClient returns the REST client of a group version, made once and
// configured as client-go's generated clients are.
func (c *Clients) restClient(gv schema.GroupVersion) (*rest.RESTClient, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if rc := c.rest[gv]; rc != nil {
		return rc, nil
	}
	cfg := rest.CopyConfig(c.base)
	cfg.GroupVersion = &gv
	cfg.APIPath = "/apis"
	if gv.Group == "" {
		cfg.APIPath = "/api"
	}
	cfg.NegotiatedSerializer = c.codecs
	rc, err := rest.RESTClientForConfigAndClient(cfg, c.http)
	if err != nil {
		return nil, fmt.Errorf("client for %s: %w", gv, err)
	}
	c.rest[gv] = rc
	return rc, nil
}

// selfSubjectAccessReviews is the resource of SelfSubjectAccessReview.
var selfSubjectAccessReviews = schema.GroupVersionResource{Group: "authorization.k8s.io", Version: "v1", Resource: "selfsubjectaccessreviews"}

// MayListAndWatch asks the server, with SelfSubjectAccessReviews (through
// the dynamic client: the caller's scheme need not know them), whether the
// client may list and watch gvr in namespace. A denial says why, as the
// server gave it.
func (c *Clients) MayListAndWatch(ctx context.Context, gvr schema.GroupVersionResource, namespace string) (bool, string, error) {
	return MayListAndWatch(ctx, c.dyn, gvr, namespace)
}

// MayListAndWatch is Clients.MayListAndWatch through dyn (the
// controller-runtime adapter's, which has no Clients).
func MayListAndWatch(ctx context.Context, dyn dynamic.Interface, gvr schema.GroupVersionResource, namespace string) (bool, string, error) {
	for _, verb := range []string{"list", "watch"} {
		review := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "authorization.k8s.io/v1",
			"kind":       "SelfSubjectAccessReview",
			"spec": map[string]any{"resourceAttributes": map[string]any{
				"namespace": namespace, "verb": verb, "group": gvr.Group, "version": gvr.Version, "resource": gvr.Resource,
			}},
		}}
		out, err := dyn.Resource(selfSubjectAccessReviews).Create(ctx, review, metav1.CreateOptions{})
		if err != nil {
			return false, "", err
		}
		allowed, _, _ := unstructured.NestedBool(out.Object, "status", "allowed")
		if !allowed {
			reason, _, _ := unstructured.NestedString(out.Object, "status", "reason")
			return false, verb + " denied: " + reason, nil
		}
	}
	return true, "", nil
}
