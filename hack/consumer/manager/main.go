// Command manager is a controller-runtime manager on kinformer's cache
// (kcr.NewCache), as a controller switching to kinformer builds it: it
// reconciles ConfigMaps, creates one, and exits 0 once its reconciler has
// read it back through the manager's cache.
package main

import (
	"context"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/clientcmd"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/client"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	kcr "github.com/kinformer/kinformer/controllerruntime"
)

func main() {
	namespace := flag.String("namespace", "consumer", "namespace to create the ConfigMap in")
	flag.Parse()
	// $KUBECONFIG: controller-runtime defines the -kubeconfig flag itself.
	if err := run(os.Getenv("KUBECONFIG"), *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "manager:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string) error {
	ctrl.SetLogger(logr.FromSlogHandler(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})))
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	mgr, err := ctrl.NewManager(cfg, ctrl.Options{
		NewCache: kcr.NewCache,
		Metrics:  metricsserver.Options{BindAddress: "0"},
	})
	if err != nil {
		return err
	}
	const name = "kcr-check"
	seen := make(chan string, 1)
	err = ctrl.NewControllerManagedBy(mgr).For(&corev1.ConfigMap{}).Complete(
		reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			if req.Namespace != namespace || req.Name != name {
				return reconcile.Result{}, nil
			}
			var cm corev1.ConfigMap
			if err := mgr.GetClient().Get(ctx, req.NamespacedName, &cm); err != nil {
				return reconcile.Result{}, err
			}
			select {
			case seen <- cm.Data["from"]:
			default:
			}
			return reconcile.Result{}, nil
		}))
	if err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- mgr.Start(ctx) }()

	c, err := client.New(cfg, client.Options{})
	if err != nil {
		return err
	}
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if err := c.Create(ctx, ns); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string]string{"from": "manager"}}
	if err := c.Create(ctx, cm); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	select {
	case from := <-seen:
		fmt.Printf("manager: reconciled %s/%s from the cache (data from=%s)\n", namespace, name, from)
	case err := <-done:
		return fmt.Errorf("manager stopped: %v", err)
	case <-ctx.Done():
		return fmt.Errorf("no reconcile of %s/%s: %w", namespace, name, ctx.Err())
	}
	cancel()
	if err := <-done; err != nil {
		return fmt.Errorf("manager stopped with %v", err)
	}
	return nil
}
