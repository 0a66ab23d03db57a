// Command clientgo is a client-go program on a kinformer informer through
// the clientgo adapter (a cache.SharedIndexInformer, read with client-go's
// generated lister): it creates a ConfigMap and exits 0 once its handler
// has seen it and the lister returns it.
package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

func main() {
	namespace := flag.String("namespace", "consumer", "namespace to create the ConfigMap in")
	flag.Parse()
	// $KUBECONFIG: controller-runtime defines the -kubeconfig flag itself.
	if err := run(os.Getenv("KUBECONFIG"), *namespace); err != nil {
		fmt.Fprintln(os.Stderr, "clientgo:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, namespace string) error {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()

	inf := kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(namespace), nil)
	sii := clientgo.Wrap(inf)
	const name = "clientgo-check"
	added := make(chan struct{})
	if _, err := sii.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			if cm, ok := obj.(*corev1.ConfigMap); ok && cm.Name == name {
				close(added)
			}
		},
	}); err != nil {
		return err
	}
	stopped := make(chan struct{})
	go func() { defer close(stopped); sii.RunWithContext(ctx) }()
	defer func() { cancel(); <-stopped }()
	if !cache.WaitForCacheSync(ctx.Done(), sii.HasSynced) {
		return fmt.Errorf("not synced: %w", ctx.Err())
	}

	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: namespace}}
	if _, err := cs.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: namespace, Name: name}, Data: map[string]string{"from": "clientgo"}}
	if _, err := cs.CoreV1().ConfigMaps(namespace).Create(ctx, cm, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	select {
	case <-added:
	case <-ctx.Done():
		return fmt.Errorf("no Add of %s/%s: %w", namespace, name, ctx.Err())
	}
	got, err := corelisters.NewConfigMapLister(sii.GetIndexer()).ConfigMaps(namespace).Get(name)
	if err != nil {
		return fmt.Errorf("lister: %w", err)
	}
	fmt.Printf("clientgo: handler and lister saw %s/%s (data from=%s)\n", namespace, name, got.Data["from"])
	return nil
}
