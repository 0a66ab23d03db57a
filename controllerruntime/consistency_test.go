package controllerruntime_test

import (
	"fmt"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// controller-runtime's read-your-writes (client.CacheOptions'
// EnableReadYourWritesConsistency) on a kcr cache, compact and projected:
// a Get right after each write returns what was written, at its
// resourceVersion, every time. In the projected cache the write changes a
// field left out too: resourceVersion, which read-your-writes waits on, is
// always kept. Without read-your-writes the same reads are stale.
func TestReadYourWrites(t *testing.T) {
	cfg, _, ns := setup(t)
	ctx := t.Context()
	for _, tc := range []struct {
		name string
		o    kcr.Options
	}{
		{"compact", kcr.Options{}},
		{"projected", kcr.Options{ByObject: map[client.Object]kcr.ByObject{&corev1.ConfigMap{}: {Fields: []string{"metadata.annotations"}}}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, err := kcr.With(tc.o)(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
			if err != nil {
				t.Fatal(err)
			}
			if _, err := c.GetInformer(ctx, &corev1.ConfigMap{}); err != nil {
				t.Fatal(err)
			}
			runCache(t, c)
			// stale writes n times, and counts the Gets right after that
			// did not return the write.
			stale := func(ryw bool, n int) int {
				cl, err := kcr.NewClient(cfg, client.Options{Cache: &client.CacheOptions{Reader: c, EnableReadYourWritesConsistency: ptr.To(ryw)}})
				if err != nil {
					t.Fatal(err)
				}
				cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("%s-%v", tc.name, ryw),
					Annotations: map[string]string{"n": "0"}}, Data: map[string]string{"n": "0"}}
				if err := cl.Create(ctx, cm); err != nil {
					t.Fatal(err)
				}
				var count int
				for i := range n {
					patch := client.MergeFrom(cm.DeepCopy())
					cm.Annotations["n"], cm.Data["n"] = fmt.Sprint(i+1), fmt.Sprint(i+1)
					if err := cl.Patch(ctx, cm, patch); err != nil {
						t.Fatal(err)
					}
					got := &corev1.ConfigMap{}
					if err := cl.Get(ctx, client.ObjectKeyFromObject(cm), got); err != nil {
						t.Fatal(err)
					}
					if got.ResourceVersion != cm.ResourceVersion || got.Annotations["n"] != cm.Annotations["n"] {
						count++
					}
				}
				return count
			}
			if n := stale(true, 20); n != 0 {
				t.Errorf("with read-your-writes, %d of 20 Gets right after a write were stale", n)
			}
			n := stale(false, 50)
			if n == 0 {
				t.Errorf("without read-your-writes, no Get of 50 right after a write was stale: the test cannot tell")
			}
			t.Logf("without read-your-writes, %d of 50 Gets right after a write were stale", n)
		})
	}
}
