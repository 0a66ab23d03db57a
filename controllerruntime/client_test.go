package controllerruntime_test

import (
	"context"
	"errors"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// sentClient records the writes that reach it; anything else it is asked
// panics (its embedded Client is nil).
type sentClient struct {
	client.Client
	sent *[]string
}

func (c sentClient) Create(context.Context, client.Object, ...client.CreateOption) error {
	*c.sent = append(*c.sent, "Create")
	return nil
}

func (c sentClient) Update(context.Context, client.Object, ...client.UpdateOption) error {
	*c.sent = append(*c.sent, "Update")
	return nil
}

func (c sentClient) Patch(context.Context, client.Object, client.Patch, ...client.PatchOption) error {
	*c.sent = append(*c.sent, "Patch")
	return nil
}

func (c sentClient) Status() client.SubResourceWriter { return c.SubResource("status") }

func (c sentClient) SubResource(name string) client.SubResourceClient {
	return sentSub{sent: c.sent, name: name}
}

type sentSub struct {
	client.SubResourceClient
	sent *[]string
	name string
}

func (s sentSub) Create(context.Context, client.Object, client.Object, ...client.SubResourceCreateOption) error {
	*s.sent = append(*s.sent, s.name+".Create")
	return nil
}

func (s sentSub) Update(context.Context, client.Object, ...client.SubResourceUpdateOption) error {
	*s.sent = append(*s.sent, s.name+".Update")
	return nil
}

func (s sentSub) Patch(context.Context, client.Object, client.Patch, ...client.SubResourcePatchOption) error {
	*s.sent = append(*s.sent, s.name+".Patch")
	return nil
}

// Every write Guard refuses, of the object and of its subresources
// (Status() and SubResource(name), each of Update, Create and the
// whole-object patches), is refused before it reaches the client; the
// same writes of an object not read from a projected cache, and a
// MergeFrom patch of a projected one, pass.
func TestGuardRefusesEveryWholeWrite(t *testing.T) {
	ctx := context.Background()
	var sent []string
	g := kcr.Guard(sentClient{sent: &sent})
	projected := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p",
		Annotations: map[string]string{kcr.ProjectedAnnotation: "spec.nodeName"}}}
	plain := &corev1.Pod{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: "p"}}
	writes := func(obj client.Object) map[string]func() error {
		// A subresource Create's object is sub (an Eviction, a binding…):
		// the guard looks at it.
		return map[string]func() error{
			"Create":                    func() error { return g.Create(ctx, obj) },
			"Update":                    func() error { return g.Update(ctx, obj) },
			"Patch Merge":               func() error { return g.Patch(ctx, obj, client.Merge) },
			"Status().Update":           func() error { return g.Status().Update(ctx, obj) },
			"Status().Create":           func() error { return g.Status().Create(ctx, plain, obj) },
			"Status().Patch Merge":      func() error { return g.Status().Patch(ctx, obj, client.Merge) },
			"SubResource().Update":      func() error { return g.SubResource("scale").Update(ctx, obj) },
			"SubResource().Create":      func() error { return g.SubResource("eviction").Create(ctx, plain, obj) },
			"SubResource().Patch Merge": func() error { return g.SubResource("scale").Patch(ctx, obj, client.Merge) },
			"SubResource().Patch Apply": func() error { return g.SubResource("scale").Patch(ctx, obj, client.Apply) }, //nolint:staticcheck // what the guard refuses
		}
	}
	for name, write := range writes(projected) {
		sent = nil
		if err := write(); !errors.Is(err, kcr.ErrProjected) || len(sent) != 0 {
			t.Errorf("%s of a projected Pod: %v, sent %v; want ErrProjected and nothing sent", name, err, sent)
		}
	}
	for name, write := range writes(plain) {
		sent = nil
		if err := write(); err != nil || len(sent) != 1 {
			t.Errorf("%s of a Pod not projected: %v, sent %v; want it sent", name, err, sent)
		}
	}
	// Patches made from the object as read change only what changed.
	for name, write := range map[string]func() error{
		"Patch MergeFrom":               func() error { return g.Patch(ctx, projected, client.MergeFrom(projected)) },
		"Status().Patch MergeFrom":      func() error { return g.Status().Patch(ctx, projected, client.MergeFrom(projected)) },
		"SubResource().Patch MergeFrom": func() error { return g.SubResource("scale").Patch(ctx, projected, client.MergeFrom(projected)) },
	} {
		sent = nil
		if err := write(); err != nil || len(sent) != 1 {
			t.Errorf("%s of a projected Pod: %v, sent %v; want it sent", name, err, sent)
		}
	}
}
