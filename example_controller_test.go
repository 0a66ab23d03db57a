package kinformer_test

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"
	"k8s.io/client-go/util/workqueue"

	"github.com/kinformer/kinformer"
)

func settings(name string) *corev1.ConfigMap {
	return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name}}
}

// A controller: Enqueue turns the informer's changes into keys on a
// rate-limited workqueue; workers reconcile each key from the cache, and a
// failed reconcile is retried after a backoff; shutdown stops the informer,
// then the queue, then waits for the workers. The fake clientset stands in
// for a cluster.
func ExampleEnqueue() {
	clientset := fake.NewClientset(settings("a"), settings("b"), settings("c"))
	configMaps := clientset.CoreV1().ConfigMaps("default")
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	inf := kinformer.New[*corev1.ConfigMap](configMaps, nil)
	queue := workqueue.NewTypedRateLimitingQueueWithConfig(
		// Retries after 5 ms, 10 ms, 20 ms, … up to 1 s, to keep the
		// example quick; workqueue.DefaultTypedControllerRateLimiter is
		// the usual choice.
		workqueue.NewTypedItemExponentialFailureRateLimiter[string](5*time.Millisecond, time.Second),
		workqueue.TypedRateLimitingQueueConfig[string]{Name: "settings"})
	kinformer.Enqueue(inf, queue, nil)

	// reconcile brings the world in line with the object stored under key:
	// here it only reports what it would do. It fails its first attempt at
	// default/b, to show the retry.
	results := make(chan string, 10)
	var failedOnce atomic.Bool
	reconcile := func(key string) error {
		if _, ok := inf.Cache().GetByKey(key); !ok {
			results <- key + " deleted: clean up what it owned"
			return nil
		}
		if key == "default/b" && failedOnce.CompareAndSwap(false, true) {
			return errors.New("a transient failure")
		}
		results <- fmt.Sprintf("%s reconciled (attempt %d)", key, queue.NumRequeues(key)+1)
		return nil
	}
	// processNext handles one key; false means the queue is shut down.
	processNext := func() bool {
		key, shutdown := queue.Get()
		if shutdown {
			return false
		}
		defer queue.Done(key) // lets other workers take the key again
		if err := reconcile(key); err != nil {
			queue.AddRateLimited(key) // again, after this key's backoff
			return true
		}
		queue.Forget(key) // reset this key's backoff
		return true
	}

	inf.Start()
	var workers sync.WaitGroup
	for range 2 {
		workers.Go(func() {
			for processNext() {
			}
		})
	}

	// show prints the next n results, sorted: workers run in parallel.
	show := func(n int) bool {
		var lines []string
		for range n {
			select {
			case r := <-results:
				lines = append(lines, r)
			case <-ctx.Done():
				fmt.Println("timed out after", lines)
				return false
			}
		}
		slices.Sort(lines)
		for _, l := range lines {
			fmt.Println(l)
		}
		return true
	}
	if err := inf.WaitForSync(ctx); err != nil {
		fmt.Println(err)
	} else if show(3) {
		// d comes through the watch: once it is reconciled, the watch is
		// surely open, and the deletion of c cannot be missed by the fake
		// (a real server would replay it).
		if _, err := configMaps.Create(ctx, settings("d"), metav1.CreateOptions{}); err != nil {
			panic(err)
		}
		if show(1) {
			if err := configMaps.Delete(ctx, "c", metav1.DeleteOptions{}); err != nil {
				panic(err)
			}
			show(1)
		}
	}

	// Shutdown: no more keys, then no more work, then wait for the workers
	// to finish the keys they hold.
	inf.Stop()
	queue.ShutDown()
	workers.Wait()
	// Output:
	// default/a reconciled (attempt 1)
	// default/b reconciled (attempt 2)
	// default/c reconciled (attempt 1)
	// default/d reconciled (attempt 1)
	// default/c deleted: clean up what it owned
}
