package kinformertest_test

import (
	"context"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

// A test drives the server and watches what the code under test, here one
// handler, makes of it: a real informer, so the events, their order and
// their causes are those a cluster would produce.
func ExampleNew() {
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	settings := func(v string) *corev1.ConfigMap {
		return &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: "settings"},
			Data:       map[string]string{"mode": v},
		}
	}
	inf, srv := kinformertest.New(settings("fast"))

	seen := make(chan string, 10)
	show := func(e kinformer.Event[*corev1.ConfigMap]) {
		seen <- fmt.Sprintf("%s %s mode=%s (%s)", e.Type, e.Key, e.Object.Data["mode"], e.Cause)
	}
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: show, Modified: show, Deleted: show})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}

	if _, err := srv.Update(settings("safe")); err != nil {
		panic(err)
	}
	if err := srv.Delete(settings("")); err != nil {
		panic(err)
	}
	for range 3 {
		select {
		case s := <-seen:
			fmt.Println(s)
		case <-ctx.Done():
			fmt.Println("no event:", ctx.Err())
			return
		}
	}
	// Output:
	// ADDED default/settings mode=fast (list)
	// MODIFIED default/settings mode=safe (watch)
	// DELETED default/settings mode=safe (watch)
}
