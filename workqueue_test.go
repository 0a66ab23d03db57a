package kinformer_test

import (
	"context"
	"errors"
	"slices"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/util/workqueue"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

func configMap(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "ns", Name: name}}
}

// take returns the next n keys from q, marking each done, and fails the
// test if they do not come within 10 s (the queue is shut down then, so
// that the blocked Get returns).
func take(t *testing.T, q workqueue.TypedInterface[string], n int) []string {
	t.Helper()
	type got struct {
		key      string
		shutdown bool
	}
	ch := make(chan got, 1)
	var keys []string
	for range n {
		go func() {
			k, shutdown := q.Get()
			ch <- got{k, shutdown}
		}()
		select {
		case g := <-ch:
			if g.shutdown {
				t.Fatalf("after %q: queue shut down", keys)
			}
			q.Done(g.key)
			keys = append(keys, g.key)
		case <-time.After(10 * time.Second):
			q.ShutDown()
			<-ch
			t.Fatalf("after %q: timed out waiting for %d more keys", keys, n-len(keys))
		}
	}
	return keys
}

// Enqueue adds the keys of Added, Modified and Deleted events that pass
// the filter, in the order of the changes; Bookmark and Error events add
// nothing. Each check is fenced by a later write, so that what is absent
// is known to have been skipped, not merely late.
func TestEnqueue(t *testing.T) {
	srv := kinformertest.NewServer(configMap("a"), configMap("b"))
	inf := kinformer.New[*corev1.ConfigMap](srv, &kinformer.Options[*corev1.ConfigMap]{
		Transform: func(c *corev1.ConfigMap) (*corev1.ConfigMap, error) {
			if c.Name == "bad" {
				return nil, errors.New("refused") // an Error event, with no key
			}
			return c, nil
		},
	})
	q := workqueue.NewTyped[string]()
	defer q.ShutDown()
	var filtered []kinformer.Cause
	reg := kinformer.Enqueue(inf, q, func(e kinformer.Event[*corev1.ConfigMap]) bool {
		filtered = append(filtered, e.Cause) // one registration: calls never overlap
		return e.Key != "ns/skip"
	})
	if reg == nil {
		t.Fatal("Enqueue returned no registration")
	}
	inf.Start()
	defer inf.Stop()
	ctx, cancel := context.WithTimeout(t.Context(), 10*time.Second)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	initial := take(t, q, 2)
	slices.Sort(initial)
	if !slices.Equal(initial, []string{"ns/a", "ns/b"}) {
		t.Fatalf("after sync: %q, want ns/a and ns/b", initial)
	}

	writes := []func() error{
		func() error { _, err := srv.Update(configMap("a")); return err },
		func() error { _, err := srv.Add(configMap("skip")); return err },
		func() error { _, err := srv.Add(configMap("bad")); return err },
		func() error { srv.Bookmark(); return nil },
		func() error { return srv.Delete(configMap("b")) },
		func() error { _, err := srv.Add(configMap("fence")); return err },
	}
	for _, w := range writes {
		if err := w(); err != nil {
			t.Fatal(err)
		}
	}
	if got, want := take(t, q, 3), []string{"ns/a", "ns/b", "ns/fence"}; !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q (skip filtered, no key for the bookmark or the error)", got, want)
	}
	if q.Len() != 0 {
		t.Errorf("%d more keys queued", q.Len())
	}

	// The queue de-duplicates: two changes of a waiting key, one key. Wait
	// until the fence is queued, so that no Get takes a in between.
	for range 2 {
		if _, err := srv.Update(configMap("a")); err != nil {
			t.Fatal(err)
		}
	}
	if _, err := srv.Add(configMap("fence2")); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(10 * time.Second); q.Len() < 2 && time.Now().Before(deadline); {
		time.Sleep(time.Millisecond) // polling, bounded
	}
	if got, want := take(t, q, 2), []string{"ns/a", "ns/fence2"}; !slices.Equal(got, want) {
		t.Fatalf("keys %q, want %q", got, want)
	}

	// Removed, it adds nothing more; the filter saw every change once.
	inf.RemoveEventHandler(reg)
	if _, err := srv.Add(configMap("late")); err != nil {
		t.Fatal(err)
	}
	inf.Stop() // joins the handlers: filtered is ours to read
	if q.Len() != 0 {
		t.Errorf("%d keys queued after RemoveEventHandler", q.Len())
	}
	// a and b listed; then a, skip, b, fence, a, a and fence2 watched (bad's
	// Error is not offered, nor is the bookmark).
	want := []kinformer.Cause{kinformer.CauseList, kinformer.CauseList}
	for range 7 {
		want = append(want, kinformer.CauseWatch)
	}
	if !slices.Equal(filtered, want) {
		t.Errorf("the filter saw causes %v, want %v", filtered, want)
	}
}

// A nil filter passes every change.
func TestEnqueueNilFilter(t *testing.T) {
	inf, srv := kinformertest.New(configMap("a"))
	q := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[string]())
	defer q.ShutDown()
	kinformer.Enqueue(inf, q, nil)
	inf.Start()
	defer inf.Stop()
	if got := take(t, q, 1); got[0] != "ns/a" {
		t.Fatalf("keys %q, want ns/a", got)
	}
	if err := srv.Delete(configMap("a")); err != nil {
		t.Fatal(err)
	}
	if got := take(t, q, 1); got[0] != "ns/a" {
		t.Fatalf("keys %q, want ns/a for the deletion", got)
	}
	if _, ok := inf.Cache().GetByKey("ns/a"); ok {
		t.Error("a deleted key's object is still cached: a reconcile would not see the deletion")
	}
}
