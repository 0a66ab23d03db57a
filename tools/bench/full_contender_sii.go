package main

// The contenders that are client-go SharedIndexInformers: client-go's own
// (a SharedInformerFactory's) and kinformer's through its clientgo package,
// registered and measured alike.

import (
	"context"
	"fmt"
	"sync/atomic"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	corelisters "k8s.io/client-go/listers/core/v1"
	"k8s.io/client-go/tools/cache"
)

const (
	// clientgo.NewSharedIndexInformer (client-go's signature) over
	// cache.NewListWatchFromClient: the ListWatch hides the client, so
	// client-go decodes.
	kKClientGo = "kclientgo"
	// clientgo.Wrap(kinformer.New over the clientset's typed client):
	// kinformer's own decoders.
	kKClientGoWrap = "kclientgo-wrap"
)

// readMisses counts the reads back (-lister) that did not find the object
// just handled.
var readMisses atomic.Int64

// newSharedIndexInformer returns the contender's informer of resource in
// ns, with client-go's namespace index, and what starts it.
func newSharedIndexInformer(ctx context.Context, kind string, cs kubernetes.Interface, resource, ns string) (cache.SharedIndexInformer, func(), error) {
	example, restResource := exampleOf(resource)
	indexers := cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc}
	switch kind {
	case kClientGo, kClientGoStrip:
		opts := []informers.SharedInformerOption{informers.WithNamespace(ns)}
		if kind == kClientGoStrip {
			opts = append(opts, informers.WithTransform(func(obj any) (any, error) {
				if a, err := meta.Accessor(obj); err == nil {
					a.SetManagedFields(nil)
				}
				return obj, nil
			}))
		}
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, opts...)
		var inf cache.SharedIndexInformer
		if resource == "pods" {
			inf = factory.Core().V1().Pods().Informer()
		} else {
			inf = factory.Core().V1().ConfigMaps().Informer()
		}
		return inf, func() { factory.Start(ctx.Done()) }, nil
	case kKClientGo:
		lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), restResource, ns, fields.Everything())
		inf := clientgo.NewSharedIndexInformer(lw, example, 0, indexers)
		return inf, func() { go inf.Run(ctx.Done()) }, nil
	case kKClientGoWrap:
		var inf cache.SharedIndexInformer
		if resource == "pods" {
			inf = clientgo.Wrap(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), nil))
		} else {
			inf = clientgo.Wrap(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), nil))
		}
		return inf, func() { go inf.Run(ctx.Done()) }, nil
	}
	return nil, nil, fmt.Errorf("unknown contender %q", kind)
}

// exampleOf is resource's example object and REST resource name.
func exampleOf(resource string) (example runtime.Object, restResource string) {
	if resource == "pods" {
		return &corev1.Pod{}, "pods"
	}
	return &corev1.ConfigMap{}, "configmaps"
}

// sharedInformerUnderTest registers the contender's one handler on inf:
// counting Added, recording Modified; with read, each reads its object
// back through a client-go lister on inf's indexer first.
func sharedInformerUnderTest(inf cache.SharedIndexInformer, start func(), resource string, rec *recorder, read bool) (informerUnderTest, error) {
	var get func(ns, name string) error
	if resource == "pods" {
		l := corelisters.NewPodLister(inf.GetIndexer())
		get = func(ns, name string) error { _, err := l.Pods(ns).Get(name); return err }
	} else {
		l := corelisters.NewConfigMapLister(inf.GetIndexer())
		get = func(ns, name string) error { _, err := l.ConfigMaps(ns).Get(name); return err }
	}
	readBack := func(obj any) {
		if !read {
			return
		}
		o := obj.(metav1.Object)
		if get(o.GetNamespace(), o.GetName()) != nil {
			readMisses.Add(1)
		}
	}
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) {
			readBack(obj)
			work()
			rec.added()
		},
		UpdateFunc: func(_, obj any) {
			readBack(obj)
			work()
			rec.updated(obj.(metav1.Object))
		},
		DeleteFunc: func(any) {},
	})
	if err != nil {
		return informerUnderTest{}, err
	}
	return informerUnderTest{
		start:     start,
		hasSynced: inf.HasSynced,
		length:    func() int { return len(inf.GetStore().ListKeys()) },
	}, nil
}
