package integration

import (
	"context"
	"sort"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/labels"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// A view over one informer per namespace (a controller allowed only some
// namespaces) lists, selects and gets across them, and its handlers see
// every namespace's objects; a handler can stop its own informer.
func TestViewOverNamespacesAndStopFromAHandler(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(nsA, "web", map[string]string{"app": "web"}, "1"))
	mustCreate(t, c, configMap(nsA, "db", map[string]string{"app": "db"}, "1"))
	mustCreate(t, c, configMap(nsB, "web", map[string]string{"app": "web"}, "1"))
	a, _, _ := start(t, srv.Config(), nsA, nil)
	b, _, _ := start(t, srv.Config(), nsB, nil)
	v := kinformer.NewView(a, b)

	keys := func(objs []*corev1.ConfigMap) []string {
		var out []string
		for _, o := range objs {
			out = append(out, o.Namespace+"/"+o.Name)
		}
		sort.Strings(out)
		return out
	}
	web := labels.SelectorFromSet(labels.Set{"app": "web"})
	want := []string{nsA + "/web", nsB + "/web"}
	sort.Strings(want)
	if got := keys(v.Select("", web)); len(got) != 2 || got[0] != want[0] || got[1] != want[1] {
		t.Fatalf("Select(app=web) = %v, want %v", got, want)
	}
	if got := keys(v.Select(nsA, nil)); len(got) != 2 {
		t.Fatalf("Select(%s) = %v", nsA, got)
	}
	if o, ok := v.GetNamespaced(nsB, "web"); !ok || o.Namespace != nsB {
		t.Fatalf("GetNamespaced(%s, web) = %v, %v", nsB, o, ok)
	}

	stopped := make(chan struct{})
	v.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: func(e kinformer.Event[*corev1.ConfigMap]) {
		if e.Object.Name == "stop" {
			b.Stop() // from b's own handler: does not wait for itself
			close(stopped)
		}
	}})
	mustCreate(t, c, configMap(nsB, "stop", nil, "1"))
	select {
	case <-stopped:
	case <-time.After(callTimeout):
		t.Fatal("Stop from a handler did not return")
	}
	ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
	defer cancel()
	select {
	case <-b.RequestStop():
	case <-ctx.Done():
		t.Fatal("the informer stopped from its handler never finished stopping")
	}
	mustCreate(t, c, configMap(nsA, "later", nil, "1"))
	eventually(t, 10*time.Second, "the other informer still running", func() bool {
		_, ok := v.GetNamespaced(nsA, "later")
		return ok
	})
}
