package direct

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/describe"
	"github.com/kinformer/kinformer/internal/intern"
)

// client-go's dynamic client keeps its REST client, namespace and resource
// unexported; the informer reads them by reflection. This fails if a
// client-go update moves them, rather than losing direct decoding quietly.
func TestDynamicClientRecognised(t *testing.T) {
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: "http://127.0.0.1:1"})
	if err != nil {
		t.Fatal(err)
	}
	gvr := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}
	for _, c := range []struct {
		lw        any
		namespace string
		path      string
	}{
		{dyn.Resource(gvr).Namespace("ns"), "ns", "/apis/example.com/v1/namespaces/ns/widgets"},
		{dyn.Resource(gvr), "", "/apis/example.com/v1/widgets"},
		{dyn.Resource(corev1.SchemeGroupVersion.WithResource("configmaps")).Namespace("a"), "a", "/api/v1/namespaces/a/configmaps"},
	} {
		d := New[*unstructured.Unstructured](describe.Of(c.lw), reflect.TypeFor[*unstructured.Unstructured](), Decoding{Share: &intern.Sharer{}}, nil)
		if d == nil || d.json == nil || d.namespace != c.namespace || strings.Join(d.path, "/") != c.path {
			t.Fatalf("%T: got %+v, want a JSON watcher of %s", c.lw, d, c.path)
		}
		if d.client == nil || !d.SharesObjects() {
			t.Fatalf("no REST client or not sharing: %+v", d)
		}
	}
	if d := New[*unstructured.Unstructured](describe.Of(&struct{}{}), reflect.TypeFor[*unstructured.Unstructured](), Decoding{}, nil); d != nil {
		t.Fatalf("a fake source got a direct watcher: %+v", d)
	}
}

// A JSON list whose body is not JSON is a *GarbledError, which the root
// turns into kinformer.ErrUnexpectedObject; a list that is JSON gives its
// items and resourceVersion.
func TestListGarbled(t *testing.T) {
	body := `{"kind":"ConfigMapList","apiVersion":"v1","metadata":{"resourceVersion":"7"},"items":[{"kind":"ConfigMap","apiVersion":"v1","metadata":{"name":"a","namespace":"ns","resourceVersion":"5"}}]}`
	hs := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "application/json")
		w.Write([]byte(body))
	}))
	t.Cleanup(hs.Close)
	dyn, err := dynamic.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	d := New[*unstructured.Unstructured](describe.Of(dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}).Namespace("ns")),
		reflect.TypeFor[*unstructured.Unstructured](), Decoding{}, nil)
	var names []string
	lm, err := d.List(context.Background(), metav1.ListOptions{}, func(o runtime.Object, err error) {
		if err == nil {
			names = append(names, o.(*unstructured.Unstructured).GetName())
		}
	})
	if err != nil || lm.ResourceVersion != "7" || len(names) != 1 || names[0] != "a" {
		t.Fatalf("a good list: %v, %+v, %v", err, lm, names)
	}
	body = body[:len(body)-3] + "}"
	_, err = d.List(context.Background(), metav1.ListOptions{}, func(runtime.Object, error) {})
	var g *GarbledError
	if !errors.As(err, &g) || !strings.HasPrefix(err.Error(), "reading the list: jsontext:") {
		t.Fatalf("a list that is not JSON: %v", err)
	}
}
