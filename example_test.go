package kinformer_test

import (
	"context"
	"fmt"
	"maps"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/kinformertest"
)

func pod(name, node string) *corev1.Pod {
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Namespace: "default", Name: name, Labels: map[string]string{"app": "web"}},
		Spec:       corev1.PodSpec{NodeName: node},
	}
}

// The quick start: an informer over a typed client, an index, a handler,
// WaitForSync, and cache reads. The fake clientset stands in for a real
// cluster's kubernetes.NewForConfig(cfg).
func Example() {
	clientset := fake.NewClientset(pod("web-0", "node-1"), pod("web-1", "node-2"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()

	byNode := func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }
	inf := kinformer.New[*corev1.Pod](clientset.CoreV1().Pods("default"), &kinformer.Options[*corev1.Pod]{
		LabelSelector: "app=web",
		ResyncPeriod:  10 * time.Minute,
		Indexers:      map[string]kinformer.IndexFunc[*corev1.Pod]{"node": byNode},
	})
	added := make(chan string)
	reg, err := inf.AddEventHandler(kinformer.Added, func(e kinformer.Event[*corev1.Pod]) {
		added <- e.Object.Name
	})
	if err != nil {
		panic(err)
	}
	go inf.Run(ctx)
	defer inf.Stop()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}
	fmt.Println("added", <-added)
	fmt.Println("added", <-added)
	inf.RemoveEventHandler(reg)

	p, ok := inf.Cache().GetByKey("default/web-0")
	fmt.Println("web-0 cached:", ok, "on", p.Spec.NodeName)
	onNode, _ := inf.Cache().ByIndex("node", "node-2")
	fmt.Println("on node-2:", onNode[0].Name)
	// Unordered output:
	// added web-0
	// added web-1
	// web-0 cached: true on node-1
	// on node-2: web-1
}

// AddHandler delivers every event type to one handler, in one ordered
// stream; a handler added late first receives Added for every cached object.
func ExampleInformer_AddHandler() {
	clientset := fake.NewClientset(pod("web-0", "node-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	inf := kinformer.New[*corev1.Pod](clientset.CoreV1().Pods("default"), nil)
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}
	events := make(chan kinformer.Event[*corev1.Pod], 10)
	inf.AddHandler(func(e kinformer.Event[*corev1.Pod]) { events <- e })
	select {
	case e := <-events:
		fmt.Println(e.Type, e.Object.Name, e.Cause)
	case <-ctx.Done():
		fmt.Println("no event:", ctx.Err())
	}
	// Output:
	// ADDED web-0 replay
}

// AddHandlerFuncs registers a callback per event type as one ordered
// registration: the way to fold state from Added, Modified and Deleted, which
// separate AddEventHandler registrations would deliver independently.
func ExampleInformer_AddHandlerFuncs() {
	// kinformertest's in-memory server: unlike client-go's fake clientset,
	// it watches from the list's resourceVersion, so no write made after the
	// sync can fall between the list and the watch.
	inf, srv := kinformertest.New(pod("web-0", "node-1"))
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	nodes := map[string]string{} // key -> node; used only by the callbacks
	deleted := make(chan map[string]string)
	inf.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{
		Added:    func(e kinformer.Event[*corev1.Pod]) { nodes[e.Key] = e.Object.Spec.NodeName },
		Modified: func(e kinformer.Event[*corev1.Pod]) { nodes[e.Key] = e.Object.Spec.NodeName },
		Deleted: func(e kinformer.Event[*corev1.Pod]) {
			delete(nodes, e.Key)
			deleted <- maps.Clone(nodes)
		},
	})
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(ctx); err != nil {
		panic(err)
	}
	if _, err := srv.Add(pod("web-1", "node-2")); err != nil {
		panic(err)
	}
	if err := srv.Delete(pod("web-0", "node-1")); err != nil {
		panic(err)
	}
	select {
	case state := <-deleted:
		fmt.Println(state)
	case <-ctx.Done():
		fmt.Println("no event:", ctx.Err())
	}
	// Output:
	// map[default/web-1:node-2]
}
