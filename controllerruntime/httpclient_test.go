package controllerruntime_test

import (
	"net/http"
	"strings"
	"sync"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// countingTransport counts the requests for pods that go through it.
type countingTransport struct {
	next http.RoundTripper
	mu   sync.Mutex
	seen map[string]int // "list" and "watch"
}

func (c *countingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if strings.HasSuffix(r.URL.Path, "/pods") {
		verb := "list"
		if r.URL.Query().Get("watch") == "true" {
			verb = "watch"
		}
		c.mu.Lock()
		c.seen[verb]++
		c.mu.Unlock()
	}
	return c.next.RoundTrip(r)
}

// cache.Options.HTTPClient carries the informers' lists and watches, as
// in controller-runtime's cache (a manager gives its cluster's client).
func TestHTTPClientCarriesTheInformers(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, "a"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	hc, err := rest.HTTPClientFor(cfg)
	if err != nil {
		t.Fatal(err)
	}
	counted := &countingTransport{next: hc.Transport, seen: map[string]int{}}
	hc.Transport = counted
	defer hc.CloseIdleConnections()
	c, err := kcr.NewCache(cfg, cache.Options{HTTPClient: hc, DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	stop := runCache(t, c)
	var got corev1.Pod
	if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "a"}, &got); err != nil {
		t.Fatal(err)
	}
	stop()
	counted.mu.Lock()
	defer counted.mu.Unlock()
	// kinformer's streaming list is a watch; on a server without it, a
	// list then a watch.
	if counted.seen["watch"] == 0 {
		t.Fatalf("no watch of pods went through cache.Options.HTTPClient (requests for pods: %v)", counted.seen)
	}
}
