package integration

import (
	"context"
	"errors"
	"fmt"
	"strconv"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// A state file is bound to the cluster it was written from. Cluster A's
// informer keeps its state file; then the same identity (StateKey pinned:
// what the same URL and credentials give a Factory or the CLI) reaches
// cluster B, another API server with its own certificate authority, whose
// resourceVersion is beyond the file's (so only the cluster can tell). A's
// objects must not be restored, not for a moment: no event, an ERROR
// wrapping ErrSnapshot that says why, and the cache is B's. The next run on
// B restores B's own objects.
func TestDurableFileOfAnotherClusterIsNotRestored(t *testing.T) {
	testFileOfAnotherCluster(t, testenv.Shared(t), testenv.New(t), "cluster-bound", "another cluster")
}

// testFileOfAnotherCluster writes a state file on a, then runs an
// informer of the same identity on b, whose resourceVersion is beyond
// the file's: nothing of a's reaches b's handlers or cache, one ERROR
// wrapping ErrSnapshot says why (naming why), and the next run on b
// restores b's own objects.
func testFileOfAnotherCluster(t *testing.T, a, b *testenv.Server, ns, why string) {
	const key = "pinned identity"
	ns = uniqueName(ns)
	dir := t.TempDir()
	for _, srv := range []*testenv.Server{a, b} {
		createNamespace(t, srv, ns)
	}
	mustCreate(t, clientset(t, a.Config()), configMap(ns, "from-a", nil, "a's secret"))
	run := func(srv *testenv.Server) (*kinformer.Informer[*corev1.ConfigMap], *recorder[*corev1.ConfigMap]) {
		log := &recorder[*corev1.ConfigMap]{}
		inf := kinformer.New[*corev1.ConfigMap](clientset(t, srv.Config()).CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateKey: key})
		reg := inf.AddHandler(log.handle)
		inf.Start()
		t.Cleanup(inf.Stop)
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		// Handlers are told after the cache syncs: CI's loaded machine
		// checked the events before they came.
		eventually(t, callTimeout, "the handler has the events up to the sync", reg.HasSynced)
		return inf, log
	}
	inf, _ := run(a)
	fileRV := inf.ResourceVersion()
	inf.Stop()

	// B: its own object, and a resourceVersion beyond the file's.
	bc := clientset(t, b.Config())
	mustCreate(t, bc, configMap(ns, "from-b", nil, "b"))
	bumpPast(t, bc, ns, fileRV)

	inf, log := run(b)
	events, errs := log.causes(), log.errs()
	if strings.Contains(fmt.Sprint(events), "from-a") {
		t.Fatalf("cluster A's object reached the handlers on cluster B: %v", events)
	}
	if _, ok := inf.Cache().GetByKey(ns + "/from-a"); ok || inf.Cache().Len() != 2 {
		t.Fatalf("cache on cluster B: %v, want from-b and the bump object only", inf.Cache().ListKeys())
	}
	if len(errs) != 1 || !errors.Is(errs[0], kinformer.ErrSnapshot) || !strings.Contains(errs[0].Error(), why) {
		t.Fatalf("errors %v, want one ErrSnapshot saying %q", errs, why)
	}
	t.Logf("on cluster B: %s", errs[0])
	inf.Stop()

	_, log = run(b)
	if events, errs := log.causes(), log.errs(); !strings.Contains(fmt.Sprint(events), "ADDED "+ns+"/from-b restore") || len(errs) != 0 {
		t.Fatalf("the next run on B: events %v, errors %v; want B's objects restored", events, errs)
	}
}

// bumpPast updates a ConfigMap in ns until the server's resourceVersion
// is beyond rv.
func bumpPast(t *testing.T, c kubernetes.Interface, ns, rv string) {
	t.Helper()
	want, err := strconv.ParseUint(rv, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	cm := mustCreate(t, c, configMap(ns, "bump", nil, "0"))
	for i := 0; ; i++ {
		got, err := strconv.ParseUint(cm.ResourceVersion, 10, 64)
		if err != nil {
			t.Fatal(err)
		}
		if got > want {
			return
		}
		cm.Data = map[string]string{"v": fmt.Sprint(i)}
		ctx, cancel := context.WithTimeout(t.Context(), callTimeout)
		cm, err = c.CoreV1().ConfigMaps(ns).Update(ctx, cm, metav1.UpdateOptions{})
		cancel()
		if err != nil {
			t.Fatal(err)
		}
	}
}
