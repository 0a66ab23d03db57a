package store

import (
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// cm returns a ConfigMap in ns named name, with the labels kv (key, value,
// key, value...).
func cm(ns, name string, kv ...string) *corev1.ConfigMap {
	c := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: name, Labels: map[string]string{}}, Data: map[string]string{}}
	for i := 0; i+1 < len(kv); i += 2 {
		c.Labels[kv[i]] = kv[i+1]
	}
	return c
}

// plain is obj as a cache of objects holds it.
func plain[T Object](obj T) Ref[T] { return ObjectRef(obj) }

// plainAll is items as a cache of objects holds them.
func plainAll[T Object](items map[string]T) *Items[T] {
	out := &Items[T]{}
	for k, obj := range items {
		out.Set(k, plain(obj))
	}
	return out
}
