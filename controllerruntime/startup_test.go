package controllerruntime_test

import (
	"context"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	toolscache "k8s.io/client-go/tools/cache"
	"sigs.k8s.io/controller-runtime/pkg/cache"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// kcr.Startup says, per kind, whether the first list is complete and
// whether the controllers' handlers have handled their initial pass: a
// handler held on its first object shows as not done, with the kind
// synced; released, it is done.
func TestStartupPerKind(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.Pod{})
	if err != nil {
		t.Fatal(err)
	}
	release := make(chan struct{})
	var once sync.Once
	free := func() { once.Do(func() { close(release) }) }
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{AddFunc: func(any) { <-release }}); err != nil {
		t.Fatal(err)
	}
	// Started, not waited for: WaitForCacheSync waits for the handlers.
	runCtx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- c.Start(runCtx) }()
	t.Cleanup(func() {
		free()
		cancel()
		if err := <-done; err != nil {
			t.Errorf("Start: %v", err)
		}
	})
	pods := func() kcr.KindStartup {
		t.Helper()
		all, ok := kcr.Startup(c)
		if !ok {
			t.Fatal("Startup: not a kcr cache")
		}
		for _, k := range all {
			if k.Kind.Kind == "Pod" {
				return k
			}
		}
		t.Fatalf("Startup: no Pod among %+v", all)
		return kcr.KindStartup{}
	}
	deadline := time.Now().Add(20 * time.Second)
	for !pods().Synced && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := pods(); !p.Synced || p.HandlersDone || p.Namespace != ns || p.Objects != 2 {
		t.Fatalf("with the handler held: %+v; want synced, handlers not done, in %s, 2 objects", p, ns)
	}
	free()
	for !pods().HandlersDone && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
	}
	if p := pods(); !p.HandlersDone || p.HandlersTook < p.ListTook {
		t.Fatalf("released: %+v; want handlers done, after the list", p)
	}
}

// A read of a kind nothing asked the cache for starts an informer, and
// says so once at Info in the manager's log, naming the kind and whether
// it is cluster-wide; an informer asked for (GetInformer) says nothing.
// kcr.Caches lists both, with their objects.
func TestImplicitInformerIsLoggedAndListed(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for _, n := range []string{"a", "b"} {
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, pod(ns, n), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	c, err := kcr.NewCache(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(ctx, &corev1.Pod{}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	for range 3 {
		var nodes corev1.NodeList // cluster-scoped: the cache lists all
		if err := c.List(ctx, &nodes); err != nil {
			t.Fatal(err)
		}
		var pods corev1.PodList
		if err := c.List(ctx, &pods); err != nil || len(pods.Items) != 2 {
			t.Fatalf("List pods: %d, %v", len(pods.Items), err)
		}
	}
	implicit := func(kind string) []logLine {
		return managerLog.where(func(l logLine) bool {
			return l.name == "kinformer" && l.kv["kind"] == kind && strings.Contains(l.msg, "a read started an informer")
		})
	}
	lines := implicit("Node")
	if len(lines) != 1 || lines[0].level != 0 || lines[0].kv["clusterWide"] != "true" || lines[0].kv["form"] != "typed" {
		t.Errorf("Node: %v; want one V(0) line, clusterWide=true, form=typed", lines)
	}
	if pods := managerLog.where(func(l logLine) bool {
		return inNamespace(ns)(l) && strings.Contains(l.msg, "a read started an informer")
	}); len(pods) != 0 {
		t.Errorf("Pod, asked for: %v; want no line", pods)
	}
	caches, ok := kcr.Caches(c)
	if !ok {
		t.Fatal("Caches: not a kcr cache")
	}
	var sawPods, sawNodes bool
	for _, ci := range caches {
		switch {
		case ci.Resource == "pods" && ci.Namespace == ns:
			sawPods = ci.Objects == 2 && !ci.ClusterWide && ci.Synced
		case ci.Resource == "nodes":
			sawNodes = ci.ClusterWide && ci.Synced
		}
	}
	if !sawPods || !sawNodes {
		t.Errorf("Caches: %+v; want pods in %s (2 objects) and nodes, cluster-wide", caches, ns)
	}
}
