package describe

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	dynfake "k8s.io/client-go/dynamic/fake"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/metadata"
	"k8s.io/client-go/rest"
)

// Of on each kind of client-go client: what it finds, and that a fake
// client never streams. What the informer makes of it is shown by
// internal/direct's TestDynamicClientRecognised and the root's
// TestMayStream and probe tests.
func TestOf(t *testing.T) {
	cfg := &rest.Config{Host: "http://127.0.0.1:1"}
	cs := kubernetes.NewForConfigOrDie(cfg)
	dyn := dynamic.NewForConfigOrDie(cfg)
	meta := metadata.NewForConfigOrDie(cfg)
	widgets := schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}

	typed := Of(cs.CoreV1().ConfigMaps("ns"))
	if !typed.Streams || typed.Scoped == nil || typed.Scoped.GetNamespace() != "ns" || typed.REST == nil || typed.HTTP == nil {
		t.Errorf("typed client: %+v", typed)
	}
	if typed.Dynamic.Client != nil || typed.MetaOK || typed.Hints != nil || typed.Prober() == nil {
		t.Errorf("typed client taken for another: %+v", typed)
	}

	d := Of(dyn.Resource(widgets).Namespace("a"))
	if !d.Streams || d.Dynamic.Client == nil || d.Dynamic.Namespace != "a" || d.Dynamic.GVR != widgets || d.REST == nil || d.Scoped != nil {
		t.Errorf("dynamic client: %+v", d)
	}

	m := Of(meta.Resource(widgets).Namespace("a"))
	if !m.MetaOK || m.Meta != widgets || m.Dynamic.Client != nil || m.Scoped != nil {
		t.Errorf("metadata client: %+v", m)
	}

	for name, lw := range map[string]any{
		"typed fake":   fake.NewClientset().CoreV1().ConfigMaps("ns"),
		"dynamic fake": dynfake.NewSimpleDynamicClient(runtime.NewScheme()).Resource(widgets),
	} {
		if Of(lw).Streams {
			t.Errorf("%s: streams, want not (a fake never ends a watch-list's initial events)", name)
		}
	}

	var nothing struct{}
	if o := Of(&nothing); !o.Streams || o.REST != nil || o.Prober() != nil || o.Kind("Default") != "Default" || o.Resource() != "" || o.JSONOnly() {
		t.Errorf("an unknown source: %+v", o)
	}
	if o := Of(hinted{}); o.Kind("Default") != "Widget" || o.Resource() != "widgets" || !o.JSONOnly() || !o.DetectMutations {
		t.Errorf("a source with hints: %+v", o)
	}
}

// hinted is a source that knows its kind and resource, speaks JSON only
// and asks for the mutation detector.
type hinted struct{}

func (hinted) Kind() string          { return "Widget" }
func (hinted) Resource() string      { return "widgets" }
func (hinted) Protobuf() bool        { return false }
func (hinted) DetectMutations() bool { return true }
