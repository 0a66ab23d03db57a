package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer"
)

// packedSource stands for a compact cache (--compact): every object it
// returns is decoded for that read, and counted. get blocks at the key
// gateKey until gate is closed, so that a test can look at what the
// server did before it wrote anything. Only the methods /objects uses
// are its own.
type packedSource struct {
	watchSource // nil: any other method panics

	mu      sync.Mutex
	objs    map[string]*unstructured.Unstructured
	decoded int
	gateKey string
	gate    chan struct{}
}

func (p *packedSource) addHandler(func(kinformer.Event[*unstructured.Unstructured])) func() int {
	return func() int { return 0 }
}
func (p *packedSource) shardStatus() kinformer.ShardStatus      { return kinformer.ShardStatus{} }
func (p *packedSource) resourceVersion() string                 { return "42" }
func (p *packedSource) compact() bool                           { return true }
func (p *packedSource) startup() kinformer.Startup              { return kinformer.Startup{} }
func (p *packedSource) key(o *unstructured.Unstructured) string { return kinformer.MetaNamespaceKey(o) }

func (p *packedSource) decode(o *unstructured.Unstructured) *unstructured.Unstructured {
	p.decoded++
	return o.DeepCopy()
}

func (p *packedSource) list(namespace string) []*unstructured.Unstructured {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []*unstructured.Unstructured
	for _, o := range p.objs {
		if namespace == "" || o.GetNamespace() == namespace {
			out = append(out, p.decode(o))
		}
	}
	return out
}

func (p *packedSource) keyed(namespace string) ([]string, func(string) (*unstructured.Unstructured, bool)) {
	return p.keys(namespace), p.get
}

func (p *packedSource) keys(namespace string) []string {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out []string
	for k, o := range p.objs {
		if namespace == "" || o.GetNamespace() == namespace {
			out = append(out, k)
		}
	}
	return out
}

func (p *packedSource) get(key string) (*unstructured.Unstructured, bool) {
	if key == p.gateKey {
		<-p.gate
	}
	p.mu.Lock()
	defer p.mu.Unlock()
	o, ok := p.objs[key]
	if !ok {
		return nil, false
	}
	return p.decode(o), true
}

func (p *packedSource) decodes() int {
	p.mu.Lock()
	defer p.mu.Unlock()
	return p.decoded
}

// /objects of a compact cache decodes an object at a time as it writes
// them, never the whole selection first: 16 requests at once for a large
// compact cache held hundreds of MB, each its whole selection decoded. The
// answer is the same as a plain cache's: sorted by key, filtered by label,
// counted (the count last); an object deleted while the answer is written
// is left out, and counted out.
func TestServeCompactObjectsStream(t *testing.T) {
	const n = 2000
	src := &packedSource{objs: map[string]*unstructured.Unstructured{}, gate: make(chan struct{})}
	for i := range n {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
		o.SetNamespace("ns")
		o.SetName(fmt.Sprintf("cm-%04d", i))
		o.SetLabels(map[string]string{"even": fmt.Sprint(i%2 == 0)})
		o.Object["data"] = map[string]any{"v": strings.Repeat("x", 1000)}
		src.objs[kinformer.MetaNamespaceKey(o)] = o
	}
	src.gateKey = "ns/cm-0200" // 200 objects of 1 KiB in: 32 KiB chunks were written
	s := mustNewServer(t, 16, 16)
	s.addSource("configmaps", resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}, "", src)
	hs := httptest.NewServer(s.handler())
	defer hs.Close()

	resp, err := http.Get(hs.URL + "/objects?resource=configmaps")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	first := make([]byte, 1)
	if _, err := io.ReadFull(resp.Body, first); err != nil {
		t.Fatal(err)
	}
	if d := src.decodes(); d > 201 {
		t.Errorf("%d of %d objects decoded before the answer's first byte: the whole selection, not one at a time", d, n)
	}
	// Deleted while the answer is written: left out, and not counted.
	src.mu.Lock()
	delete(src.objs, "ns/cm-1500")
	src.mu.Unlock()
	close(src.gate)
	rest, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	var l objectList
	if err := json.Unmarshal(append(first, rest...), &l); err != nil {
		t.Fatalf("not JSON: %v", err)
	}
	var names []string
	for _, it := range l.Items {
		names = append(names, (&unstructured.Unstructured{Object: it}).GetName())
	}
	if l.Resource != "configmaps" || l.ResourceVersion != "42" || l.Count != n-1 || len(names) != n-1 ||
		!slices.IsSorted(names) || slices.Contains(names, "cm-1500") {
		t.Errorf("answer: resource %q rv %q count %d, %d items (sorted %v, has cm-1500 %v); want configmaps 42 %d sorted, without cm-1500",
			l.Resource, l.ResourceVersion, l.Count, len(names), slices.IsSorted(names), slices.Contains(names, "cm-1500"), n-1)
	}

	// A label selector: matched as each object is decoded.
	src.gateKey = ""
	before := src.decodes()
	code, body := getWithin(t, hs.URL+"/objects?resource=configmaps&namespace=ns&label=even%3Dtrue", 30*time.Second)
	if code != http.StatusOK {
		t.Fatalf("label: %d %s", code, body)
	}
	l = objectList{}
	if err := json.Unmarshal(body, &l); err != nil {
		t.Fatal(err)
	}
	if l.Count != n/2-1 || len(l.Items) != n/2-1 { // cm-1500 was even
		t.Errorf("label even=true: count %d, %d items, want %d", l.Count, len(l.Items), n/2-1)
	}
	if d := src.decodes() - before; d != n-1 {
		t.Errorf("label even=true: %d objects decoded, want each of %d once", d, n-1)
	}
}

func getWithin(t *testing.T, url string, d time.Duration) (int, []byte) {
	t.Helper()
	c := &http.Client{Timeout: d}
	resp, err := c.Get(url)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, err := io.ReadAll(resp.Body)
	if err != nil {
		t.Fatal(err)
	}
	return resp.StatusCode, b
}

// Clients of a compact cache's /objects that never read: each holds its
// answer's keys and the object being written, not its selection decoded.
// Before, 4 stalled requests of 4,000 objects of 4 KiB held each its 4,000
// objects decoded (over 60 MiB together) until the write deadline.
func TestServeCompactObjectsStalledClients(t *testing.T) {
	const n, size = 4000, 4 << 10
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	s, hs := configMapsCache(t, n, size, true)
	s.writeTimeout = 20 * time.Second // held for the measure, however busy the machine
	s.objectRequests.max = 4
	hs.Config.Handler = s.handler()
	hs.Start()
	addr := strings.TrimPrefix(hs.URL, "http://")
	// The cache's events handled first: the feed decodes each.
	added := &s.byName["cm"].counts[slices.Index(eventTypes, kinformer.Added)]
	waitFor(t, "every object's Added handled", 30*time.Second, func() bool { return added.Load() == n })
	time.Sleep(100 * time.Millisecond) // the last one's summary
	before := heapInUse()
	stalledClients(t, addr, "GET /objects HTTP/1.1\r\nHost: localhost\r\n\r\n", 4)
	waitFor(t, "4 /objects requests in flight", 10*time.Second, func() bool { return s.objectRequests.n.Load() == 4 })
	time.Sleep(500 * time.Millisecond) // writing until the sockets are full
	// The least of five looks: the requests hold what they hold all
	// along (the write deadline is far), while the informer's own work
	// comes and goes.
	grown := int64(math.MaxInt64)
	for range 5 {
		grown = min(grown, int64(heapInUse())-int64(before))
		time.Sleep(200 * time.Millisecond)
	}
	t.Logf("heap grown by %.1f MiB with 4 stalled clients", float64(grown)/(1<<20))
	if grown > 16<<20 {
		t.Errorf("the heap grew by %d MiB with 4 stalled clients of a compact cache's %d MiB of objects", grown>>20, n*size>>20)
	}
}
