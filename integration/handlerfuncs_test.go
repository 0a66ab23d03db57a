package integration

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// A consumer that folds state from per-type callbacks (Added, Modified,
// Deleted as separate functions, as a port of the reference design would)
// registers them as one ordered registration: under churn that creates,
// updates and deletes the same names over and over, its fold never sees a
// Deleted before its Added, and ends equal to the server. Events carry the
// cache key and say they came from the watch.
func TestHandlerFuncsFoldEqualsServerUnderChurn(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 10 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("pre-%d", i), nil, "0"))
	}
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), nil)

	var mu sync.Mutex // guards folded and problems: read by the test
	folded := map[string]string{}
	var problems []string
	bad := func(format string, args ...any) { problems = append(problems, fmt.Sprintf(format, args...)) }
	put := func(e kinformer.Event[*corev1.ConfigMap], mustExist bool) {
		mu.Lock()
		defer mu.Unlock()
		if e.Key != ns+"/"+e.Object.Name {
			bad("%s with key %q for %s", e.Type, e.Key, e.Object.Name)
		}
		want := kinformer.CauseWatch
		if strings.HasPrefix(e.Object.Name, "pre-") {
			want = kinformer.CauseList // there before the informer started
		}
		if e.Cause != want {
			bad("%s %s with cause %v, want %v", e.Type, e.Key, e.Cause, want)
		}
		if _, had := folded[e.Object.Name]; had != mustExist {
			bad("%s %s: object known before: %v", e.Type, e.Key, had)
		}
		folded[e.Object.Name] = e.Object.ResourceVersion
	}
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{
		Added:    func(e kinformer.Event[*corev1.ConfigMap]) { put(e, false) },
		Modified: func(e kinformer.Event[*corev1.ConfigMap]) { put(e, true) },
		Deleted: func(e kinformer.Event[*corev1.ConfigMap]) {
			mu.Lock()
			defer mu.Unlock()
			if _, had := folded[e.Object.Name]; !had {
				bad("DELETED %s before its ADDED", e.Key)
			}
			delete(folded, e.Object.Name)
		},
	})
	inf.Start()
	t.Cleanup(inf.Stop)
	ctx, cancel := context.WithTimeout(t.Context(), 30*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}

	// 6 writers churn 12 names: create, update, delete, over and over.
	const writers, rounds, names = 6, 25, 12
	var wg sync.WaitGroup
	for w := range writers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			cms := c.CoreV1().ConfigMaps(ns)
			for i := range rounds {
				name := fmt.Sprintf("churn-%d", (w*rounds+i)%names)
				_, err := cms.Create(ctx, configMap(ns, name, nil, "0"), metav1.CreateOptions{})
				if err != nil && !apierrors.IsAlreadyExists(err) {
					t.Error(err)
					return
				}
				if cm, err := cms.Get(ctx, name, metav1.GetOptions{}); err == nil {
					cm.Data["v"] = fmt.Sprint(i)
					if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil && !apierrors.IsConflict(err) && !apierrors.IsNotFound(err) {
						t.Error(err)
						return
					}
				}
				if i%2 == 1 {
					if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
						t.Error(err)
						return
					}
				}
			}
		}()
	}
	wg.Wait()
	if t.Failed() {
		return
	}
	want := serverState(t, c, ns, metav1.ListOptions{})
	eventually(t, 30*time.Second, "the fold equal to the server", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return sameState(folded, want)
	})
	mu.Lock()
	defer mu.Unlock()
	if len(problems) > 0 {
		t.Fatalf("%d problems, first: %s", len(problems), problems[0])
	}
}
