package integration

import (
	"context"
	"fmt"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/resourceversion"

	"github.com/kinformer/kinformer/internal/testenv"
)

// Read-your-writes: after each of 100 writes, made while other writers keep
// the server busy, waiting for the write's resourceVersion returns, and the
// cache then holds that version of the object or a newer one.
func TestWaitForResourceVersionUnderWriteLoad(t *testing.T) {
	bothWays(t, testWaitForResourceVersionUnderWriteLoad)
}

func testWaitForResourceVersionUnderWriteLoad(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	inf, _, _ := start(t, srv.Config(), ns, nil)

	ctx, cancel := context.WithCancel(t.Context())
	var wg sync.WaitGroup
	for w := range 4 { // the load: other objects, written as fast as the server takes them
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("load-%d-%d", w, i%20)
				cms := c.CoreV1().ConfigMaps(ns)
				if _, err := cms.Create(ctx, configMap(ns, name, nil, "0"), metav1.CreateOptions{}); err != nil {
					cms.Delete(ctx, name, metav1.DeleteOptions{})
				}
			}
		}()
	}
	defer func() { cancel(); wg.Wait() }()

	cms := c.CoreV1().ConfigMaps(ns)
	var slowest time.Duration
	for i := range 100 {
		wctx, wcancel := context.WithTimeout(t.Context(), 30*time.Second)
		var o *corev1.ConfigMap
		var err error
		if i == 0 {
			o, err = cms.Create(wctx, configMap(ns, "mine", nil, "0"), metav1.CreateOptions{})
		} else {
			o, err = cms.Get(wctx, "mine", metav1.GetOptions{})
			if err == nil {
				o.Data["v"] = fmt.Sprint(i)
				o, err = cms.Update(wctx, o, metav1.UpdateOptions{})
			}
		}
		if err != nil {
			wcancel()
			t.Fatalf("write %d: %v", i, err)
		}
		began := time.Now()
		if err := inf.WaitForResourceVersion(wctx, o.ResourceVersion); err != nil {
			wcancel()
			t.Fatalf("write %d: WaitForResourceVersion(%s): %v (informer at %s)", i, o.ResourceVersion, err, inf.ResourceVersion())
		}
		wcancel()
		slowest = max(slowest, time.Since(began))
		got, ok := inf.Cache().GetNamespaced(ns, "mine")
		if !ok {
			t.Fatalf("write %d: not in the cache after the wait", i)
		}
		if cmp, err := resourceversion.CompareResourceVersion(got.ResourceVersion, o.ResourceVersion); err != nil || cmp < 0 {
			t.Fatalf("write %d: cache holds %s, older than the write's %s", i, got.ResourceVersion, o.ResourceVersion)
		}
		if got.Data["v"] != o.Data["v"] {
			t.Fatalf("write %d: cache holds data %q, the write %q", i, got.Data["v"], o.Data["v"])
		}
	}
	t.Logf("slowest wait for a write: %s", slowest)
}
