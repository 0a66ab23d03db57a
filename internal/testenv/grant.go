package testenv

import (
	"context"
	"sync"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilrand "k8s.io/apimachinery/pkg/util/rand"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

// Grant lets the restricted user (RestrictedConfig) get, list and watch
// gvr in namespace, or in every namespace if namespace is "" (a
// ClusterRole), and returns once the server applies it; revoke takes
// that back, and returns once the user may no longer list gvr there (so
// not while another grant, or AllowedNamespace, still lets it). A test's
// cleanup revokes what it did not.
func (s *Server) Grant(t testing.TB, namespace string, gvr schema.GroupVersionResource) (revoke func()) {
	t.Helper()
	admin, err := kubernetes.NewForConfig(s.Config())
	if err != nil {
		t.Fatal(err)
	}
	dyn, err := dynamic.NewForConfig(s.RestrictedConfig())
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	name := "kinformer-test-" + gvr.Resource + "-reader-" + utilrand.String(6)
	rules := []rbacv1.PolicyRule{{APIGroups: []string{gvr.Group}, Resources: []string{gvr.Resource}, Verbs: []string{"get", "list", "watch"}}}
	subjects := []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: RestrictedUser}}
	var remove func(context.Context) error
	if namespace == "" {
		if _, err := admin.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{ObjectMeta: metav1.ObjectMeta{Name: name}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		remove = func(ctx context.Context) error {
			if err := admin.RbacV1().ClusterRoleBindings().Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			return admin.RbacV1().ClusterRoles().Delete(ctx, name, metav1.DeleteOptions{})
		}
	} else {
		if _, err := admin.RbacV1().Roles(namespace).Create(ctx, &rbacv1.Role{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace}, Rules: rules}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := admin.RbacV1().RoleBindings(namespace).Create(ctx, &rbacv1.RoleBinding{ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: namespace},
			RoleRef: rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: name}, Subjects: subjects}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		remove = func(ctx context.Context) error {
			if err := admin.RbacV1().RoleBindings(namespace).Delete(ctx, name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			return admin.RbacV1().Roles(namespace).Delete(ctx, name, metav1.DeleteOptions{})
		}
	}
	restricted := dyn.Resource(gvr).Namespace(namespace)
	allowed := func(ctx context.Context) bool {
		_, err := restricted.List(ctx, metav1.ListOptions{Limit: 1})
		return err == nil
	}
	await(t, ctx, "the grant of "+gvr.Resource+" to apply", func() bool { return allowed(ctx) })
	var once sync.Once
	revoke = func() { once.Do(func() { undo(t, remove, restricted, gvr) }) }
	t.Cleanup(revoke)
	return revoke
}

// undo is a grant's revoke.
func undo(t testing.TB, remove func(context.Context) error, restricted dynamic.ResourceInterface, gvr schema.GroupVersionResource) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := remove(ctx); err != nil && !apierrors.IsNotFound(err) {
		t.Fatal(err)
	}
	await(t, ctx, "the revocation of "+gvr.Resource+" to apply", func() bool {
		_, err := restricted.List(ctx, metav1.ListOptions{Limit: 1})
		return apierrors.IsForbidden(err)
	})
}

// await polls cond until it holds, or fails t once ctx ends.
func await(t testing.TB, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("testenv: timed out waiting for %s", what)
		case <-time.After(10 * time.Millisecond):
		}
	}
}
