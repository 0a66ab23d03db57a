package kinformer

import (
	"testing"

	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/internal/apiclient"
)

type withProbeClient struct {
	cache.ListerWatcher
	rc rest.Interface
}

func (w withProbeClient) ProbeClient() rest.Interface { return w.rc }

// The probe reaches the HTTP client of every source that lets it.
func TestProberFor(t *testing.T) {
	cfg := &rest.Config{Host: "https://example.invalid:6443"}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	api, err := apiclient.Connect(cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	cms := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	plain := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "configmaps", "", nil)
	for _, c := range []struct {
		name string
		lw   any
		want bool
	}{
		{"typed", cs.CoreV1().ConfigMaps("ns"), true},
		{"dynamic", dyn.Resource(cms).Namespace("ns"), true},
		{"factory metadata", api.Metadata(cms, "ns"), true},
		{"ProbeClient", withProbeClient{plain, cs.CoreV1().RESTClient()}, true},
		{"ProbeClient nil", withProbeClient{plain, nil}, false},
		{"cache.ListWatch", plain, false},
	} {
		if got := proberFor(c.lw) != nil; got != c.want {
			t.Errorf("%s: a prober %v, want %v", c.name, got, c.want)
		}
	}
}
