package apiclient

import (
	"context"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// ListerWatcher lists and watches one resource of a Go type on a REST
// client, as a clientset's typed client does. It also offers GetClient and
// GetNamespace, like those clients, so that the informer decodes its
// watches itself; and Resource, Kind and Protobuf, so that it need not look
// them up again.
type ListerWatcher struct {
	client    rest.Interface
	namespace string // "": all namespaces, or cluster-scoped
	resource  string
	kind      string
	protobuf  bool // ask for protobuf, unless the config says otherwise
	newList   func() (runtime.Object, error)
}

// ListerWatcher returns the lister-watcher of t's resource in namespace
// ("" for all namespaces, and for a cluster-scoped resource), on the
// REST client of its group version.
func (c *Clients) ListerWatcher(t Typed, namespace string) (*ListerWatcher, error) {
	client, err := c.restClient(t.Kind.GroupVersion())
	if err != nil {
		return nil, err
	}
	return &ListerWatcher{client: client, namespace: namespace, resource: t.Mapping.Resource.Resource, kind: t.Kind.Kind, protobuf: t.Protobuf,
		newList: func() (runtime.Object, error) { return c.scheme.New(t.ListKind) }}, nil
}

func (lw *ListerWatcher) List(ctx context.Context, opts metav1.ListOptions) (runtime.Object, error) {
	list, err := lw.newList()
	if err != nil {
		return nil, err
	}
	err = lw.client.Get().
		UseProtobufAsDefaultIfPreferred(lw.protobuf).
		NamespaceIfScoped(lw.namespace, lw.namespace != "").
		Resource(lw.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Do(ctx).
		Into(list)
	if err != nil {
		return nil, err
	}
	return list, nil
}

func (lw *ListerWatcher) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	opts.Watch = true
	return lw.client.Get().
		UseProtobufAsDefaultIfPreferred(lw.protobuf).
		NamespaceIfScoped(lw.namespace, lw.namespace != "").
		Resource(lw.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		Timeout(timeoutOf(opts)).
		Watch(ctx)
}

func (lw *ListerWatcher) GetClient() rest.Interface { return lw.client }
func (lw *ListerWatcher) GetNamespace() string      { return lw.namespace }

// Resource is the resource's name, as discovery found it ("pods").
func (lw *ListerWatcher) Resource() string { return lw.resource }

// Kind is the kind the scheme gives the objects.
func (lw *ListerWatcher) Kind() string { return lw.kind }

// Protobuf reports whether the type has protobuf; without it, it is
// listed and watched in JSON.
func (lw *ListerWatcher) Protobuf() bool { return lw.protobuf }

// timeoutOf is the client-side timeout client-go's clients give a request
// with TimeoutSeconds.
func timeoutOf(opts metav1.ListOptions) time.Duration {
	if opts.TimeoutSeconds == nil {
		return 0
	}
	return time.Duration(*opts.TimeoutSeconds) * time.Second
}
