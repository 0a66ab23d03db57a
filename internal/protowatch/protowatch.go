// Package protowatch opens Kubernetes watches in protobuf and decodes them
// without client-go's copies.
//
// client-go decodes a protobuf watch stream in three copies: the frame,
// then WatchEvent.Object.Raw, then runtime.Unknown.Raw, before the object
// itself; and it decodes managedFields only for an informer to drop them.
// Here each frame is read into one reused buffer, the WatchEvent and
// runtime.Unknown envelopes are walked in place, fields of the object's
// metadata are cut out of the wire bytes before decoding (managedFields, and
// labels and annotations maps already decoded for an earlier object), and
// the type's generated Unmarshal copies out only what the object keeps.
//
// The package knows bytes and HTTP, not informers: Resolve finds a
// resource's name, Open opens a watch, NewReader reads one.
package protowatch

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
)

// MediaType is the media type of a protobuf watch stream: frames of a
// 4-byte big-endian length, then a metav1.WatchEvent.
const MediaType = "application/vnd.kubernetes.protobuf;stream=watch"

// ErrAmbiguous means discovery did not name exactly one watchable resource
// of the kind.
var ErrAmbiguous = errors.New("no single watchable resource of the kind")

// Resolve finds the plural name of the resource of a kind by discovery on
// client's group version: the one resource with that kind that is not a
// subresource and can be watched. Errors from the request are returned as
// they are, for the caller to tell a refusal from a passing failure.
func Resolve(ctx context.Context, client rest.Interface, kind string) (string, error) {
	body, err := client.Get().SetHeader("Accept", "application/json").DoRaw(ctx)
	if err != nil {
		return "", err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return "", fmt.Errorf("%w: discovery answer: %v", ErrAmbiguous, err)
	}
	var found []string
	for _, r := range list.APIResources {
		if r.Kind == kind && !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "watch") {
			found = append(found, r.Name)
		}
	}
	if len(found) != 1 {
		return "", fmt.Errorf("%w: %d resources of kind %s in %s", ErrAmbiguous, len(found), kind, list.GroupVersion)
	}
	return found[0], nil
}

// Open opens a protobuf watch of resource on client's REST client (its
// configuration, credentials and TLS), with opts as query parameters. Like
// client-go's Watch it is not rate-limited: a watch is one long request.
func Open(ctx context.Context, client rest.Interface, namespace, resource string, opts metav1.ListOptions) (io.ReadCloser, error) {
	opts.Watch = true
	return client.Get().
		NamespaceIfScoped(namespace, namespace != "").
		Resource(resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		SetHeader("Accept", MediaType).
		Throttle(nil).
		Stream(ctx)
}
