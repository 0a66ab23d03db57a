package controllerruntime

import (
	"context"
	"errors"
	"fmt"

	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/client"
)

// ProjectedAnnotation marks every copy that Get and List return from a
// projected cache (Options.ByObject); its value is the fields the cache
// keeps. Its key is not a valid annotation key on purpose: the API server
// refuses to store it, so that an Update or Create of a projected object,
// which would clear every field left out, fails validation whatever
// client sends it. (A status update is not validated so: NewClient's
// client refuses it.)
const ProjectedAnnotation = "kinformer projected (never write back)"

// ErrProjected is returned by NewClient's client for a write of a
// projected object that would clear, on the server, the fields its cache
// left out.
var ErrProjected = errors.New("the object was read from a projected cache")

// NewClient is a client.NewClientFunc (manager.Options.NewClient):
// controller-runtime's client, which refuses with ErrProjected, before
// any request, the writes of an object read from a projected cache
// (ProjectedAnnotation) that would clear what it lacks: Create, Update,
// a subresource's Update and Create (Status() and SubResource), and the
// whole-object patches client.Merge and client.Apply, of the object or of
// a subresource. Patches made from the object as read (client.MergeFrom)
// change only what was changed, and pass; so does every write of an
// object not read from a projected cache.
//
//	mgr, err := ctrl.NewManager(cfg, ctrl.Options{NewCache: kcr.With(o), NewClient: kcr.NewClient})
func NewClient(cfg *rest.Config, o client.Options) (client.Client, error) {
	c, err := client.New(cfg, o)
	if err != nil {
		return nil, err
	}
	return Guard(c), nil
}

// Guard wraps c so that it refuses writes of projected objects, as
// NewClient's client does.
func Guard(c client.Client) client.Client { return guarded{c} }

type guarded struct{ client.Client }

// refuse returns ErrProjected, saying what, if obj is a projected read.
func refuse(verb string, obj client.Object) error {
	fields, ok := obj.GetAnnotations()[ProjectedAnnotation]
	if !ok {
		return nil
	}
	name := obj.GetName()
	if ns := obj.GetNamespace(); ns != "" {
		name = ns + "/" + name
	}
	return fmt.Errorf("kcr: %s of %T %s refused: %w, which keeps only %s; it would clear every other field on the server. "+
		"Patch what you changed (client.MergeFrom of the object as read), or read it whole with the manager's APIReader",
		verb, obj, name, ErrProjected, fields)
}

// wholePatch tells the patches that send the whole object.
func wholePatch(p client.Patch) bool { return p == client.Merge || p == client.Apply } //nolint:staticcheck // Apply is what we refuse

func (g guarded) Create(ctx context.Context, obj client.Object, opts ...client.CreateOption) error {
	if err := refuse("Create", obj); err != nil {
		return err
	}
	return g.Client.Create(ctx, obj, opts...)
}

func (g guarded) Update(ctx context.Context, obj client.Object, opts ...client.UpdateOption) error {
	if err := refuse("Update", obj); err != nil {
		return err
	}
	return g.Client.Update(ctx, obj, opts...)
}

func (g guarded) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.PatchOption) error {
	if wholePatch(patch) {
		if err := refuse("a whole-object Patch", obj); err != nil {
			return err
		}
	}
	return g.Client.Patch(ctx, obj, patch, opts...)
}

func (g guarded) Status() client.SubResourceWriter {
	return guardedSub{g.Client.Status(), "status"}
}

func (g guarded) SubResource(name string) client.SubResourceClient {
	sc := g.Client.SubResource(name)
	return guardedSubClient{sc, guardedSub{sc, name}}
}

type guardedSub struct {
	client.SubResourceWriter
	name string
}

func (g guardedSub) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	if err := refuse("Update of "+g.name, obj); err != nil {
		return err
	}
	return g.SubResourceWriter.Update(ctx, obj, opts...)
}

func (g guardedSub) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	if err := refuse("Create of "+g.name, sub); err != nil {
		return err
	}
	return g.SubResourceWriter.Create(ctx, obj, sub, opts...)
}

func (g guardedSub) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	if wholePatch(patch) {
		if err := refuse("a whole-object Patch of "+g.name, obj); err != nil {
			return err
		}
	}
	return g.SubResourceWriter.Patch(ctx, obj, patch, opts...)
}

// guardedSubClient is a subresource client whose writes are guarded.
type guardedSubClient struct {
	client.SubResourceClient
	w guardedSub
}

func (g guardedSubClient) Update(ctx context.Context, obj client.Object, opts ...client.SubResourceUpdateOption) error {
	return g.w.Update(ctx, obj, opts...)
}

func (g guardedSubClient) Create(ctx context.Context, obj client.Object, sub client.Object, opts ...client.SubResourceCreateOption) error {
	return g.w.Create(ctx, obj, sub, opts...)
}

func (g guardedSubClient) Patch(ctx context.Context, obj client.Object, patch client.Patch, opts ...client.SubResourcePatchOption) error {
	return g.w.Patch(ctx, obj, patch, opts...)
}
