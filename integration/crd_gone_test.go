package integration

import (
	"log/slog"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/dynamic"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// An informer of a custom resource whose CRD is deleted while it cannot
// see the objects go (its connection cut): once its list answers 404 it
// drops what it still holds (Deleted, CauseGone) rather than serving them
// for ever, says so once in its log, keeps the 404 in LastError, and fills
// up again when the CRD is created again. A client that may watch
// CustomResourceDefinitions sends no request for the resource while it is
// gone, and lists as soon as the CRD is established again; one that may
// not lists again after each backoff.
func TestCRDDeletedAndCreatedAgain(t *testing.T) {
	t.Run("watching the CRD", func(t *testing.T) {
		testCRDDeletedAndCreatedAgain(t, "gone.kinformer.test", false)
	})
	t.Run("may not watch CRDs", func(t *testing.T) {
		testCRDDeletedAndCreatedAgain(t, "gone-restricted.kinformer.test", true)
	})
}

func testCRDDeletedAndCreatedAgain(t *testing.T, group string, restricted bool) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	gvr := schema.GroupVersionResource{Group: group, Version: "v1", Resource: "sprockets"}
	crs := createCRD(t, srv.Config(), gvr, "Sprocket")
	sprocket := func(name string) *unstructured.Unstructured {
		return &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": gvr.GroupVersion().String(), "kind": "Sprocket",
			"metadata": map[string]any{"name": name, "namespace": ns}}}
	}
	for _, name := range []string{"a", "b", "c"} {
		if _, err := crs.Namespace(ns).Create(bounded(t, callTimeout), sprocket(name), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}

	cfg := srv.Config()
	if restricted {
		cfg = srv.RestrictedConfig()
		grantResource(t, srv, ns, gvr)
	}
	proxy, pcfg := testenv.NewCutProxy(t, cfg)
	dyn, err := dynamic.NewForConfig(pcfg)
	if err != nil {
		t.Fatal(err)
	}
	log := &levelLog{}
	reg := prometheus.NewRegistry()
	m, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf := kinformer.New[*unstructured.Unstructured](dyn.Resource(gvr).Namespace(ns), &kinformer.Options[*unstructured.Unstructured]{
		Logger: slog.New(log), Metrics: m, Name: "sprockets",
		Backoff: kinformer.Backoff{Initial: 100 * time.Millisecond, Max: 300 * time.Millisecond}})
	rec := &recorder[*unstructured.Unstructured]{}
	inf.AddHandler(rec.handle)
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, "three Added", func() bool { return rec.count(kinformer.Added) == 3 })

	// The CRD deleted while the informer is cut off: it never sees the
	// objects deleted.
	proxy.Down()
	admin, err := dynamic.NewForConfig(srv.Config())
	if err != nil {
		t.Fatal(err)
	}
	crdGVR := schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}
	name := gvr.Resource + "." + gvr.Group
	if err := admin.Resource(crdGVR).Delete(bounded(t, callTimeout), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 60*time.Second, "the CRD gone", func() bool {
		_, err := admin.Resource(crdGVR).Get(bounded(t, callTimeout), name, metav1.GetOptions{})
		return apierrors.IsNotFound(err)
	})
	eventually(t, 30*time.Second, "the resource no longer served", func() bool {
		_, err := admin.Resource(gvr).Namespace(ns).List(bounded(t, callTimeout), metav1.ListOptions{})
		return apierrors.IsNotFound(err)
	})
	proxy.Up()

	eventually(t, callTimeout, "the cache emptied", func() bool { return inf.Cache().Len() == 0 })
	eventually(t, callTimeout, "three Deleted", func() bool { return rec.count(kinformer.Deleted) == 3 })
	for _, e := range rec.all() {
		if e.Type == kinformer.Deleted && e.Cause != kinformer.CauseGone {
			t.Fatalf("Deleted %s with cause %s, want gone", e.Key, e.Cause)
		}
	}
	if err, _ := inf.LastError(); !apierrors.IsNotFound(err) {
		t.Fatalf("LastError = %v, want the 404", err)
	}
	// While it is gone: lists after each backoff (about 5 in 1.5 s), or
	// none at all while the CRD is watched.
	if restricted {
		eventually(t, callTimeout, "the CRD watch refused", func() bool {
			return log.count(slog.LevelDebug, "cannot watch the CustomResourceDefinition") == 1
		})
	} else {
		eventually(t, callTimeout, "the wait for the CRD", func() bool {
			return log.count(slog.LevelDebug, "waiting for the CustomResourceDefinition") >= 1
		})
	}
	requests := counterSum(t, reg, "kinformer_requests_total")
	time.Sleep(1500 * time.Millisecond)
	more := counterSum(t, reg, "kinformer_requests_total") - requests
	if restricted && more < 2 {
		t.Fatalf("%v requests in 1.5 s with backoffs of 100-300 ms, want several", more)
	}
	if !restricted && more != 0 {
		t.Fatalf("%v requests for the resource while its CRD is watched, want none", more)
	}
	if n := log.count(slog.LevelWarn, "no longer serves"); n != 1 {
		t.Fatalf("%d log lines say the resource is gone, want 1:\n%s", n, strings.Join(log.lines, "\n"))
	}
	if n := log.count(slog.LevelWarn, "not found"); n > 1 {
		t.Fatalf("the 404 logged at Warn %d times, want once:\n%s", n, strings.Join(log.lines, "\n"))
	}

	// Created again: the informer fills up again.
	crs = createCRD(t, srv.Config(), gvr, "Sprocket")
	if _, err := crs.Namespace(ns).Create(bounded(t, callTimeout), sprocket("d"), metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, "d after the CRD returned", func() bool {
		_, ok := inf.Cache().GetNamespaced(ns, "d")
		return ok
	})
	if err, _ := inf.LastError(); err != nil {
		t.Fatalf("LastError after the CRD returned = %v", err)
	}
	if n := log.count(slog.LevelInfo, "serves the resource again"); restricted != (n == 0) || n > 1 {
		t.Fatalf("%d log lines say the CRD serves the resource again (restricted %v):\n%s", n, restricted, strings.Join(log.lines, "\n"))
	}
}
