package kinformer

import (
	"context"
	"errors"
	"fmt"
	"reflect"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// Direct decoding: for a built-in type watched through a clientset's typed
// client, kinformer opens the watch itself on the client's REST client and
// decodes the protobuf stream straight into T (internal/protowatch), on the
// loop's goroutine (directSource in source.go).

// errNoDirect says the server or the resource does not allow direct
// decoding; the informer goes back to the client's Watch for good.
var errNoDirect = errors.New("direct decoding not possible")

// restScoped is what client-go's typed resource clients (gentype.Client)
// offer besides List and Watch.
type restScoped interface {
	GetClient() rest.Interface
	GetNamespace() string
}

// directWatcher opens the watches that kinformer decodes itself. It
// belongs to the loop's goroutine.
type directWatcher struct {
	client    rest.Interface
	namespace string
	resource  string // the resource's plural name, found on first use
	format    protowatch.Format
}

// newDirectWatcher returns a directWatcher for lw if it is a typed client
// of a real server and T a protobuf type; else nil, and the informer uses
// lw's own Watch. With share set, the decoder strips and shares objects
// itself, and they need no preparing after (see writer.prepare).
func newDirectWatcher[T Object](lw any, keepManagedFields bool, share *intern.Sharer) *directWatcher {
	rs, ok := lw.(restScoped)
	if !ok || !mayStream(lw) {
		return nil
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	if _, ok := any(*new(T)).(protowatch.Object); !ok {
		return nil
	}
	client := rs.GetClient()
	if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil
	}
	elem := t.Elem()
	layout := protowatch.LayoutOf(elem)
	d := &directWatcher{
		client:    client,
		namespace: rs.GetNamespace(),
		resource:  resourceOf(lw),
		format: protowatch.Format{
			Kind:               elem.Name(),
			New:                func() protowatch.Object { return reflect.New(elem).Interface().(protowatch.Object) },
			Layout:             layout,
			StripManagedFields: !keepManagedFields,
		},
	}
	if layout != (protowatch.Layout{}) {
		d.format.Share = share
	}
	return d
}

// resourceOf returns the resource name a source already knows (a
// Factory's), or "" for discovery to find.
func resourceOf(lw any) string {
	if n, ok := lw.(interface{ resourceName() string }); ok {
		return n.resourceName()
	}
	return ""
}

// sharesObjects says whether the decoder strips and shares its objects.
func (d *directWatcher) sharesObjects() bool { return d.format.Share != nil }

// open opens a watch for the loop's goroutine to read and decode itself.
// An error wrapping errNoDirect means it never will.
func (d *directWatcher) open(ctx context.Context, opts metav1.ListOptions) (*protowatch.Reader, error) {
	if d.resource == "" {
		res, err := protowatch.Resolve(ctx, d.client, d.format.Kind)
		if _, isStatus := err.(apierrors.APIStatus); (isStatus && IsPersistent(err)) || errors.Is(err, protowatch.ErrAmbiguous) {
			// Discovery refused (403, 404, …) or no single resource: the
			// client's Watch may still work. Anything else (503 while the
			// server starts, a timeout) is retried with the watch.
			return nil, fmt.Errorf("%w: discovery: %w", errNoDirect, err)
		}
		if err != nil {
			return nil, err
		}
		d.resource = res
	}
	body, err := protowatch.Open(ctx, d.client, d.namespace, d.resource, opts)
	if err != nil {
		if apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err) {
			return nil, fmt.Errorf("%w: %w", errNoDirect, err)
		}
		return nil, err
	}
	return protowatch.NewReader(body, &d.format), nil
}
