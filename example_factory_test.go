package kinformer_test

import (
	"context"
	"log"
	"log/slog"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kinformer/kinformer"
)

// Two controllers of one program share the pods of a namespace: one list
// and one watch on the wire, one cache, each controller its own handler and
// index. A dynamic informer watches a custom resource without Go types.
// (It needs a cluster, so it is compiled, not run.)
func ExampleNewFactory() {
	cfg, err := clientcmd.BuildConfigFromFlags("", clientcmd.RecommendedHomeFile)
	if err != nil {
		log.Fatal(err)
	}
	f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{
		Registerer: prometheus.DefaultRegisterer,
		Logger:     slog.Default(),
	})
	defer f.Stop() // stops every informer, and waits for them

	// Controller A indexes pods by node.
	byNode := func(p *corev1.Pod) []string { return []string{p.Spec.NodeName} }
	podsA, err := kinformer.Shared(f, "default", &kinformer.Options[*corev1.Pod]{
		Indexers: map[string]kinformer.IndexFunc[*corev1.Pod]{"node": byNode},
	})
	if err != nil {
		log.Fatal(err)
	}
	podsA.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.Pod]{
		Deleted: func(e kinformer.Event[*corev1.Pod]) { log.Println("A: pod gone:", e.Object.Name) },
	})

	// Controller B gets the same informer, and resyncs more often: the
	// informer resyncs at the shortest period asked before it starts.
	podsB, err := kinformer.Shared(f, "default", &kinformer.Options[*corev1.Pod]{ResyncPeriod: 10 * time.Minute})
	if err != nil {
		log.Fatal(err)
	}
	podsB.AddHandler(func(e kinformer.Event[*corev1.Pod]) { log.Println("B:", e.Type, e.Object.Name) })

	widgets, err := f.Dynamic(schema.GroupVersionResource{Group: "example.com", Version: "v1", Resource: "widgets"}, "", nil)
	if err != nil {
		log.Fatal(err) // not installed
	}
	widgets.AddHandler(func(e kinformer.Event[*unstructured.Unstructured]) {
		log.Println("widget:", e.Type, e.Object.GetName())
	})

	f.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := f.WaitForSync(ctx); err != nil {
		log.Fatal(err) // "pods: …" for a 403 on pods, say
	}
	log.Println("same informer:", podsA == podsB)
	onNode, _ := podsA.Cache().ByIndex("node", "node-1")
	log.Println(len(onNode), "pods on node-1")
}
