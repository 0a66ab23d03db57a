package controllerruntime_test

import (
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// List by a field that has no index fails as controller-runtime's own
// cache does, with the same text: whether the field is the selector's
// first (client-go's indexer's "Index with name ... does not exist") or a
// later one (controller-runtime's own, lower-case), in every namespace or
// in DefaultNamespaces.
func TestListFieldWithoutIndexErrorsAsControllerRuntime(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	byNode := func(o client.Object) []string { return []string{o.(*corev1.Pod).Spec.NodeName} }
	for _, opts := range []cache.Options{{}, {DefaultNamespaces: map[string]cache.Config{ns: {}}}} {
		caches := map[string]cache.Cache{}
		for name, newCache := range map[string]cache.NewCacheFunc{"controller-runtime": cache.New, "kcr": kcr.NewCache} {
			c, err := newCache(cfg, opts)
			if err != nil {
				t.Fatal(err)
			}
			if err := c.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNode); err != nil {
				t.Fatal(err)
			}
			stop := runCache(t, c)
			defer stop()
			caches[name] = c
		}
		for _, tc := range []struct {
			fields client.ListOption
			want   string
		}{
			{client.MatchingFields{"spec.schedulerName": "default-scheduler"}, "Index with name field:spec.schedulerName does not exist"},
			// The first requirement is indexed and finds the pod, the
			// second is not. (A MatchingFields of two has them in map
			// order: either first.)
			{client.MatchingFieldsSelector{Selector: fields.AndSelectors(
				fields.OneTermEqualSelector("spec.nodeName", ""),
				fields.OneTermEqualSelector("spec.schedulerName", "default-scheduler"))},
				"index with name field:spec.schedulerName does not exist"},
		} {
			errs := map[string]string{}
			for name, c := range caches {
				var list corev1.PodList
				err := c.List(ctx, &list, client.InNamespace(ns), tc.fields)
				if err == nil {
					t.Fatalf("%s (namespaces %v): List(%v) = %d pods, no error", name, opts.DefaultNamespaces, tc.fields, len(list.Items))
				}
				errs[name] = err.Error()
			}
			if errs["controller-runtime"] != tc.want {
				t.Errorf("controller-runtime's own cache says %q, the test expects %q", errs["controller-runtime"], tc.want)
			}
			if errs["kcr"] != errs["controller-runtime"] {
				t.Errorf("namespaces %v, List(%v): kcr says %q, controller-runtime %q", opts.DefaultNamespaces, tc.fields, errs["kcr"], errs["controller-runtime"])
			}
		}
	}
}
