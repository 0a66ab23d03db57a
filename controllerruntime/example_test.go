package controllerruntime_test

import (
	"context"
	"flag"
	"fmt"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/controller/controllerutil"
	crlog "sigs.k8s.io/controller-runtime/pkg/log"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kinformer/kinformer"
	kcr "github.com/kinformer/kinformer/controllerruntime"
	"github.com/kinformer/kinformer/internal/testenv"
)

// The package's tests and examples run against a real kube-apiserver
// (tools/localapi). Without one (KINFORMER_SKIP_APISERVER), the examples,
// which cannot skip, are not run.
// The cache mutation detector is on, in panic mode, unless the environment
// says otherwise: a test, a reconciler or the adapter that changes a cached
// object kills the run.
func TestMain(m *testing.M) {
	if _, ok := os.LookupEnv(kinformer.EnvMutationDetector); !ok {
		os.Setenv(kinformer.EnvMutationDetector, "panic")
	}
	// The manager's logger, and klog's, as a program sets them.
	crlog.SetLogger(logr.New(managerLog.sink()))
	klog.SetLogger(logr.New(klogLog.sink()))
	flag.Parse()
	if testenv.Skipping() {
		fmt.Fprintln(os.Stderr, "controllerruntime: "+testenv.EnvSkip+" is set: tests and examples that need the API server do not run")
		_ = flag.Set("test.run", "^Test")
	}
	code := m.Run()
	if exampleSrv != nil {
		_ = exampleSrv.Stop()
	}
	testenv.StopShared()
	os.Exit(code)
}

var (
	exampleOnce sync.Once
	exampleSrv  *testenv.Server
)

// exampleConfig returns an admin config of a local API server started for
// the examples, and a namespace of its own.
func exampleConfig(ns string) *rest.Config {
	exampleOnce.Do(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		defer cancel()
		srv, err := testenv.Start(ctx)
		if err != nil {
			panic(err)
		}
		exampleSrv = srv
	})
	cfg := exampleSrv.Config()
	c, err := client.New(cfg, client.Options{})
	if err != nil {
		panic(err)
	}
	if err := c.Create(context.Background(), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}); err != nil {
		panic(err)
	}
	return cfg
}

// copier keeps, for every ConfigMap labelled copy=yes, a Secret with its
// data, owned by it. It finds the copies it made through a field index on
// their owner, read from the cache.
type copier struct{ client.Client }

const ownerIndex = "metadata.ownerName"

func (r copier) Reconcile(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
	var cm corev1.ConfigMap
	if err := r.Get(ctx, req.NamespacedName, &cm); err != nil {
		return reconcile.Result{}, client.IgnoreNotFound(err)
	}
	var owned corev1.SecretList
	if err := r.List(ctx, &owned, client.InNamespace(req.Namespace), client.MatchingFields{ownerIndex: cm.Name}); err != nil {
		return reconcile.Result{}, err
	}
	if cm.Labels["copy"] != "yes" || len(owned.Items) > 0 {
		return reconcile.Result{}, nil
	}
	s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: cm.Namespace, Name: cm.Name + "-copy"}, StringData: cm.Data}
	if err := controllerutil.SetControllerReference(&cm, s, r.Scheme()); err != nil {
		return reconcile.Result{}, err
	}
	return reconcile.Result{}, client.IgnoreAlreadyExists(r.Create(ctx, s))
}

// A controller-runtime manager on kinformer's cache: one line,
// NewCache: kcr.NewCache. The reconciler owns Secrets, indexes them by
// owner, and reads both kinds from the cache.
func ExampleNewCache() {
	const ns = "example-newcache"
	cfg := exampleConfig(ns)
	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache:               kcr.NewCache,
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
	})
	if err != nil {
		panic(err)
	}
	// Before the start, as usual; kinformer also takes it after.
	if err := mgr.GetFieldIndexer().IndexField(context.Background(), &corev1.Secret{}, ownerIndex, func(o client.Object) []string {
		if ref := metav1.GetControllerOf(o); ref != nil && ref.Kind == "ConfigMap" {
			return []string{ref.Name}
		}
		return nil
	}); err != nil {
		panic(err)
	}
	err = ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Owns(&corev1.Secret{}).
		Complete(copier{mgr.GetClient()})
	if err != nil {
		panic(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error)
	go func() { done <- mgr.Start(ctx) }()
	// Reads from the cache wait for the manager to start it, as with
	// controller-runtime's own cache (before, a read is ErrCacheNotStarted).
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		panic("the cache did not sync")
	}

	c := mgr.GetClient() // reads from the cache, writes to the server
	for _, name := range []string{"a", "b", "c"} {
		labels := map[string]string{"copy": "yes"}
		if name == "b" {
			labels = nil
		}
		cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: labels}, Data: map[string]string{"k": name}}
		if err := c.Create(ctx, cm); err != nil {
			panic(err)
		}
	}
	var copies corev1.SecretList
	for deadline := time.Now().Add(time.Minute); time.Now().Before(deadline); time.Sleep(50 * time.Millisecond) {
		if err := c.List(ctx, &copies, client.InNamespace(ns)); err != nil {
			panic(err)
		}
		if len(copies.Items) == 2 {
			break
		}
	}
	var names []string
	for _, s := range copies.Items {
		var owners corev1.SecretList
		owner := metav1.GetControllerOf(&s).Name
		if err := c.List(ctx, &owners, client.InNamespace(ns), client.MatchingFields{ownerIndex: owner}); err != nil {
			panic(err)
		}
		names = append(names, fmt.Sprintf("%s (owner %s; %d by index)", s.Name, owner, len(owners.Items)))
	}
	slices.Sort(names)
	for _, n := range names {
		fmt.Println(n)
	}
	cancel()
	if err := <-done; err != nil {
		panic(err)
	}
	// Output:
	// a-copy (owner a; 1 by index)
	// c-copy (owner c; 1 by index)
}
