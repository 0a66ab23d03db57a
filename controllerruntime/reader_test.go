package controllerruntime_test

import (
	"errors"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// A List by two field indexes calls the second index's function on what
// the first found, and returns its error, as controller-runtime's cache
// does (cache_reader.go, byIndexes): for an index added through the
// informer's AddIndexers with a client-go function that fails.
func TestListReturnsAnIndexFuncsError(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	p := pod(ns, "a")
	p.Spec.NodeName = "n1"
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, decoded := range []bool{false, true} {
		c, err := kcr.With(kcr.Options{Decoded: decoded})(cfg, cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)})
		if err != nil {
			t.Fatal(err)
		}
		if err := c.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNodeName); err != nil {
			t.Fatal(err)
		}
		inf, err := c.GetInformer(ctx, &corev1.Pod{}, cache.BlockUntilSynced(false))
		if err != nil {
			t.Fatal(err)
		}
		errIndex := errors.New("the index function failed")
		var fail atomic.Bool
		if err := inf.AddIndexers(toolscache.Indexers{"field:app": func(obj any) ([]string, error) {
			if fail.Load() {
				return nil, errIndex
			}
			app := obj.(client.Object).GetLabels()["app"]
			return []string{ns + "/" + app, "__all_namespaces/" + app}, nil
		}}); err != nil {
			t.Fatal(err)
		}
		stop := runCache(t, c)
		list := &corev1.PodList{}
		// In this order (MatchingFields, a map, has none): the first term
		// is looked up in its index, the second's function filters what
		// it found.
		by := client.MatchingFieldsSelector{Selector: fields.AndSelectors(
			fields.OneTermEqualSelector("spec.nodeName", "n1"), fields.OneTermEqualSelector("app", "web"))}
		if err := c.List(ctx, list, by); err != nil || len(list.Items) != 1 {
			t.Fatalf("Decoded=%v: List by two indexes: %d, %v", decoded, len(list.Items), err)
		}
		fail.Store(true)
		if err := c.List(ctx, list, by); !errors.Is(err, errIndex) {
			t.Fatalf("Decoded=%v: List through a failing index function: %v, want its error", decoded, err)
		}
		stop()
	}
}
