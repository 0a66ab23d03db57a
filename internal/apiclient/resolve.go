package apiclient

import (
	"fmt"
	"slices"

	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// Typed is where the objects of a Go type are served.
type Typed struct {
	Kind     schema.GroupVersionKind // the one kind the scheme registers the type as
	ListKind schema.GroupVersionKind // Kind + "List", which the scheme also knows
	Mapping  *meta.RESTMapping       // the resource and its scope, from discovery
	Protobuf bool                    // the type and its list decode from protobuf
}

// ForType finds the kind of obj's type in the scheme, and its resource by
// discovery, which is cached and refreshed once when the server does not
// know the kind (a CRD installed since).
func (c *Clients) ForType(obj runtime.Object) (Typed, error) {
	gvk, err := c.kindOf(obj)
	if err != nil {
		return Typed{}, err
	}
	r := Typed{Kind: gvk, ListKind: gvk.GroupVersion().WithKind(gvk.Kind + "List")}
	if !c.scheme.Recognizes(r.ListKind) {
		return Typed{}, fmt.Errorf("the scheme has no list kind %s", r.ListKind)
	}
	r.Mapping, err = c.remap(func() (*meta.RESTMapping, error) { return c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version) })
	if err != nil {
		return Typed{}, err
	}
	r.Protobuf = supportsProtobuf(obj) && func() bool { l, err := c.scheme.New(r.ListKind); return err == nil && supportsProtobuf(l) }()
	return r, nil
}

// ForResource finds the kind and scope of resource gvr by discovery, as
// ForType does.
func (c *Clients) ForResource(gvr schema.GroupVersionResource) (*meta.RESTMapping, error) {
	return c.remap(func() (*meta.RESTMapping, error) {
		gvk, err := c.mapper.KindFor(gvr)
		if err != nil {
			return nil, err
		}
		return c.mapper.RESTMapping(gvk.GroupKind(), gvk.Version)
	})
}

// remap runs a RESTMapper lookup, and once more after refreshing discovery
// if the server did not know the kind or resource: its CRD may have been
// installed since discovery was cached.
func (c *Clients) remap(lookup func() (*meta.RESTMapping, error)) (*meta.RESTMapping, error) {
	r, err := lookup()
	if meta.IsNoMatchError(err) {
		c.mapper.Reset()
		r, err = lookup()
	}
	return r, err
}

// kindOf returns the one kind obj's type is registered as.
func (c *Clients) kindOf(obj runtime.Object) (schema.GroupVersionKind, error) {
	gvks, unversioned, err := c.scheme.ObjectKinds(obj)
	if err != nil {
		return schema.GroupVersionKind{}, err
	}
	if unversioned {
		return schema.GroupVersionKind{}, fmt.Errorf("%T is an unversioned type, not a resource", obj)
	}
	gvks = slices.DeleteFunc(gvks, func(k schema.GroupVersionKind) bool { return k.Version == runtime.APIVersionInternal })
	if len(gvks) != 1 {
		return schema.GroupVersionKind{}, fmt.Errorf("%T is registered as %d kinds %v, want one", obj, len(gvks), gvks)
	}
	return gvks[0], nil
}

// supportsProtobuf reports whether the protobuf serializer can decode
// into obj (the generated types of k8s.io/api can).
func supportsProtobuf(obj runtime.Object) bool {
	_, ok := obj.(interface {
		Reset()
		Unmarshal([]byte) error
	})
	return ok
}
