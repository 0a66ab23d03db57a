package main

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// --kube-api watchers that never read, while events flow from the real
// API server: each is cut at the write deadline, holds no copy of the
// events meanwhile (a cursor in the ring, not a queue: the heap does not
// grow with the number of them), and a client that reads gets every
// event on time beside them; the informer goes on.
func TestServeKubeAPIStalledWatchers(t *testing.T) {
	// Not parallel: it measures the heap.
	if smallBufferDialer == nil {
		t.Skip("no small receive buffers here")
	}
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	s := mustNewServer(t, 8, 16)
	s.kubeHistory = 64 << 20 // the stalled watchers never fall behind it: the write deadline cuts them
	s.writeTimeout = 3 * time.Second
	res := resource{gvr: corev1.SchemeGroupVersion.WithResource("configmaps"), kind: "ConfigMap", namespaced: true}
	inf := kinformer.New[*unstructured.Unstructured](dynamic.NewForConfigOrDie(srv.Config()).Resource(res.gvr).Namespace(ns),
		&kinformer.Options[*unstructured.Unstructured]{Name: res.String(), Metrics: s.metrics})
	s.add("configmaps", res, ns, inf)
	go func() { _ = inf.Run(ctx) }()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	hs := httptest.NewServer(s.handler())
	defer hs.Close()
	defer s.close()
	rv := inf.ResourceVersion()

	// One client that reads, eight that never do.
	reader, err := kubernetes.NewForConfigOrDie(&rest.Config{Host: hs.URL}).CoreV1().ConfigMaps(ns).Watch(ctx, metav1.ListOptions{ResourceVersion: rv})
	if err != nil {
		t.Fatal(err)
	}
	defer reader.Stop()
	const stalled = 8
	stalledClients(t, strings.TrimPrefix(hs.URL, "http://"),
		fmt.Sprintf("GET /api/v1/namespaces/%s/configmaps?watch=1&resourceVersion=%s HTTP/1.1\r\nHost: localhost\r\n\r\n", ns, rv), stalled)
	waitFor(t, "nine watches served", 30*time.Second, func() bool { return s.kubeWatches.n.Load() == stalled+1 })
	before := heapInUse()

	// 12 ConfigMaps of 900 KiB: more than the sockets hold.
	const n, size = 12, 900 << 10
	go func() {
		for i := range n {
			cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("big-%02d", i)}, Data: map[string]string{"v": strings.Repeat("x", size)}}
			if _, err := real.CoreV1().ConfigMaps(ns).Create(ctx, cm, metav1.CreateOptions{}); err != nil {
				t.Errorf("creating %s: %v", cm.Name, err)
				return
			}
		}
	}()
	for i := range n {
		select {
		case ev, ok := <-reader.ResultChan():
			cm, isCM := ev.Object.(*corev1.ConfigMap)
			if !ok || ev.Type != watch.Added || !isCM || cm.Name != fmt.Sprintf("big-%02d", i) || len(cm.Data["v"]) != size {
				t.Fatalf("the reading watcher's event %d: %v %s %T", i, ok, ev.Type, ev.Object)
			}
		case <-time.After(60 * time.Second):
			t.Fatalf("the reading watcher got %d of %d events in 60 s, beside %d stalled ones", i, n, stalled)
		}
	}
	// The events are held once (the cache; the ring's JSON, and protobuf
	// for the reader: about 3 times their size), not once a watcher
	// (8 times more).
	grown, volume := int64(heapInUse())-int64(before), int64(n*size)
	if grown > 3*volume+32<<20 {
		t.Errorf("the heap grew by %d MiB with %d stalled watchers of %d MiB of events", grown>>20, stalled, volume>>20)
	}
	seen := time.Now()
	waitFor(t, "the stalled watchers cut at the write deadline", 60*time.Second, func() bool { return s.kubeWatches.n.Load() == 1 })
	t.Logf("heap grew by %d MiB for %d MiB of events; the stalled watchers were cut %v after the reader had them all",
		grown>>20, volume>>20, time.Since(seen).Round(time.Millisecond))

	// The informer goes on, and the reader with it.
	if _, err := real.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "after"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	select {
	case ev := <-reader.ResultChan():
		if cm, ok := ev.Object.(*corev1.ConfigMap); !ok || cm.Name != "after" {
			t.Errorf("after the stalled watchers were cut: %s %T", ev.Type, ev.Object)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("no event after the stalled watchers were cut")
	}
}
