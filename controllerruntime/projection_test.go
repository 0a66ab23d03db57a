package controllerruntime_test

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/utils/ptr"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
	"sigs.k8s.io/controller-runtime/pkg/source"

	"github.com/kinformer/kinformer"
	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// kcr.Options.ByObject's Fields against the real server: Get and List of
// the kind (typed and unstructured, plain and compact) return the
// projected object, marked; NewClient's client refuses to write it back,
// the server refuses an Update of it sent by a client without the guard,
// and the object's data survives both; a patch made from it changes only
// what it changed.
func TestProjection(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	for i, node := range []string{"n1", "n2"} {
		p := pod(ns, fmt.Sprintf("p%d", i))
		p.Spec.NodeName = node
		p.Annotations = map[string]string{"keep": "me"}
		p.Spec.Containers[0].Env = []corev1.EnvVar{{Name: "E", Value: "v"}}
		if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	fieldsKept := []string{"metadata.labels", "spec.nodeName", "spec.containers.image"}
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprint("compact=", compact), func(t *testing.T) {
			c, err := kcr.With(kcr.Options{Decoded: !compact, ByObject: map[client.Object]kcr.ByObject{&corev1.Pod{}: {Fields: fieldsKept}}})(cfg,
				cache.Options{DefaultFieldSelector: fields.OneTermEqualSelector("metadata.namespace", ns)})
			if err != nil {
				t.Fatal(err)
			}
			if err := c.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNodeName); err != nil {
				t.Fatal(err)
			}
			// An index reading a field the projection leaves out is refused.
			err = c.IndexField(ctx, &corev1.Pod{}, "status.podIP", func(o client.Object) []string { return []string{o.(*corev1.Pod).Status.PodIP} })
			if !errors.Is(err, kinformer.ErrFields) || !strings.Contains(err.Error(), "status.podIP") {
				t.Fatalf("IndexField of a field left out: %v, want ErrFields", err)
			}
			runCache(t, c)
			got := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p0"}, got); err != nil {
				t.Fatal(err)
			}
			if got.Spec.NodeName != "n1" || got.Spec.Containers[0].Image != "busybox" || got.Spec.Containers[0].Name != "" ||
				got.Spec.Containers[0].Env != nil || got.Labels["app"] != "web" || got.Annotations["keep"] != "" {
				t.Fatalf("Get = %+v, want the projection", got)
			}
			if got.Annotations[kcr.ProjectedAnnotation] == "" {
				t.Fatalf("a projected read without %q: %v", kcr.ProjectedAnnotation, got.Annotations)
			}
			list := &corev1.PodList{}
			if err := c.List(ctx, list, client.MatchingFields{"spec.nodeName": "n2"}); err != nil || len(list.Items) != 1 {
				t.Fatalf("List by field: %d, %v", len(list.Items), err)
			}
			if l := list.Items[0]; l.Name != "p1" || l.Annotations["keep"] != "" || l.Annotations[kcr.ProjectedAnnotation] == "" {
				t.Fatalf("List = %+v", l)
			}
			u := &unstructured.Unstructured{}
			u.SetGroupVersionKind(corev1.SchemeGroupVersion.WithKind("Pod"))
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p0"}, u); err != nil {
				t.Fatal(err)
			}
			if _, ok := u.Object["status"]; ok || u.GetAnnotations()[kcr.ProjectedAnnotation] == "" {
				t.Fatalf("unstructured Get = %v", u.Object)
			}

			// Writes of the projected object: refused by the guard.
			base, err := client.New(cfg, client.Options{})
			if err != nil {
				t.Fatal(err)
			}
			guarded := kcr.Guard(base)
			got.Labels["touched"] = "yes"
			for name, write := range map[string]func() error{
				"Update":        func() error { return guarded.Update(ctx, got.DeepCopy()) },
				"Status.Update": func() error { return guarded.Status().Update(ctx, got.DeepCopy()) },
				"Merge":         func() error { return guarded.Patch(ctx, got.DeepCopy(), client.Merge) },
				"Create":        func() error { return guarded.Create(ctx, got.DeepCopy()) },
			} {
				if err := write(); !errors.Is(err, kcr.ErrProjected) || !strings.Contains(err.Error(), "spec.nodeName") {
					t.Errorf("%s of a projected Pod: %v, want ErrProjected naming what is kept", name, err)
				}
			}
			// Sent by a client without the guard, the server refuses it.
			err = base.Update(ctx, got.DeepCopy())
			if !apierrors.IsInvalid(err) || !strings.Contains(err.Error(), kcr.ProjectedAnnotation) {
				t.Fatalf("unguarded Update: %v, want the server to refuse the marked object", err)
			}
			server, err := cs.CoreV1().Pods(ns).Get(ctx, "p0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if server.Annotations["keep"] != "me" || server.Spec.Containers[0].Name != "c" || len(server.Spec.Containers[0].Env) != 1 ||
				server.Labels["touched"] != "" {
				t.Fatalf("the server's Pod changed: %+v", server)
			}
			// A patch made from the projected object changes only what changed.
			read := &corev1.Pod{}
			if err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "p0"}, read); err != nil {
				t.Fatal(err)
			}
			patched := read.DeepCopy()
			patched.Labels["round"] = fmt.Sprint(compact)
			if err := guarded.Patch(ctx, patched, client.MergeFrom(read)); err != nil {
				t.Fatal(err)
			}
			server, err = cs.CoreV1().Pods(ns).Get(ctx, "p0", metav1.GetOptions{})
			if err != nil {
				t.Fatal(err)
			}
			if server.Labels["round"] != fmt.Sprint(compact) || server.Annotations["keep"] != "me" || server.Spec.Containers[0].Name != "c" {
				t.Fatalf("after the patch: %+v", server)
			}
		})
	}
	// A path the kind does not have fails NewCache.
	_, err := kcr.With(kcr.Options{ByObject: map[client.Object]kcr.ByObject{&corev1.Pod{}: {Fields: []string{"spec.node"}}}})(cfg, cache.Options{})
	if !errors.Is(err, kinformer.ErrFields) {
		t.Fatalf("NewCache with a bad path: %v, want ErrFields", err)
	}
}

// A projection that lists none of what controller-runtime itself reads
// (the docs' kind of field list: no ownerReferences, no labels) still
// keeps it: an Owns-style mapping (handler.EnqueueRequestForOwner through
// source.Kind, as the builder's Owns) finds each Pod's owner, a label
// selector matches, and an index on the field the cache's field selector
// reads is taken. An IndexField reading a field left out is an error
// naming kcr.Options.ByObject[Pod].Fields and IndexField's field, not
// kinformer's option or index names.
func TestProjectionKeepsWhatControllerRuntimeReads(t *testing.T) {
	cfg, cs, ns := setup(t)
	ctx := t.Context()
	owner, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: "owner"}}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	p := pod(ns, "owned")
	p.Spec.NodeName = "n1"
	p.OwnerReferences = []metav1.OwnerReference{{APIVersion: "v1", Kind: "ConfigMap", Name: owner.Name, UID: owner.UID, Controller: ptr.To(true)}}
	if _, err := cs.CoreV1().Pods(ns).Create(ctx, p, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, compact := range []bool{false, true} {
		t.Run(fmt.Sprint("compact=", compact), func(t *testing.T) {
			c, err := kcr.With(kcr.Options{Decoded: !compact, ByObject: map[client.Object]kcr.ByObject{&corev1.Pod{}: {Fields: []string{"status.phase"}}}})(cfg,
				cache.Options{DefaultFieldSelector: fields.AndSelectors(
					fields.OneTermEqualSelector("metadata.namespace", ns), fields.OneTermEqualSelector("spec.nodeName", "n1"))})
			if err != nil {
				t.Fatal(err)
			}
			// What the cache's field selector reads is kept: an index of it is taken.
			if err := c.IndexField(ctx, &corev1.Pod{}, "spec.nodeName", byNodeName); err != nil {
				t.Fatalf("IndexField of the field selector's field: %v", err)
			}
			err = c.IndexField(ctx, &corev1.Pod{}, "status.podIP", func(o client.Object) []string { return []string{o.(*corev1.Pod).Status.PodIP} })
			msg := fmt.Sprint(err)
			if !errors.Is(err, kinformer.ErrFields) || !strings.Contains(msg, "kcr.Options.ByObject[Pod].Fields") || !strings.Contains(msg, `IndexField "status.podIP"`) ||
				strings.Contains(msg, "field:") || strings.Contains(msg, "__all_namespaces") || strings.Contains(msg, "AddIndexers") {
				t.Fatalf("IndexField of a field left out: %q, want ErrFields naming kcr.Options.ByObject[Pod].Fields and the field, without index internals", msg)
			}
			mapper := meta.NewDefaultRESTMapper(nil)
			mapper.Add(corev1.SchemeGroupVersion.WithKind("ConfigMap"), meta.RESTScopeNamespace)
			queue := workqueue.NewTypedRateLimitingQueue(workqueue.DefaultTypedControllerRateLimiter[reconcile.Request]())
			defer queue.ShutDown()
			src := source.Kind(c, client.Object(&corev1.Pod{}),
				handler.EnqueueRequestForOwner(scheme.Scheme, mapper, &corev1.ConfigMap{}, handler.OnlyControllerOwner()))
			srcCtx, cancel := context.WithCancel(ctx)
			defer cancel()
			if err := src.Start(srcCtx, queue); err != nil {
				t.Fatal(err)
			}
			runCache(t, c)
			deadline := time.Now().Add(30 * time.Second)
			for queue.Len() == 0 {
				if time.Now().After(deadline) {
					t.Fatal("the Pod's event mapped to no owner: the projection lost its ownerReferences")
				}
				time.Sleep(20 * time.Millisecond)
			}
			if req, _ := queue.Get(); req.Namespace != ns || req.Name != "owner" {
				t.Fatalf("the owner's request: %v, want %s/owner", req, ns)
			}
			list := &corev1.PodList{}
			if err := c.List(ctx, list, client.MatchingLabels{"app": "web"}); err != nil || len(list.Items) != 1 {
				t.Fatalf("List by label: %d, %v", len(list.Items), err)
			}
			got := list.Items[0]
			if metav1.GetControllerOf(&got) == nil || got.Spec.NodeName != "n1" || got.Spec.Containers != nil {
				t.Fatalf("the projected Pod: %+v", got)
			}
			for _, f := range []string{"status.phase", "metadata.labels", "metadata.ownerReferences", "metadata.generation", "spec.nodeName"} {
				if !strings.Contains(got.Annotations[kcr.ProjectedAnnotation], f) {
					t.Errorf("%s = %q, without %s", kcr.ProjectedAnnotation, got.Annotations[kcr.ProjectedAnnotation], f)
				}
			}
		})
	}
}
