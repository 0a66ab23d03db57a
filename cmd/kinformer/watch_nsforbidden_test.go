package main

import (
	"context"
	"strings"
	"testing"
	"time"

	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/testenv"
)

// --namespace-selector as a user who may read configmaps in one of the two
// namespaces it selects: watch and serve stop at start, forbidden, naming
// --skip-forbidden-namespaces; with it, they hold the allowed namespace
// only, and say on stderr which one was left out.
func TestNamespaceSelectorSkipForbidden(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	key := "kinformer.test/skip-forbidden"
	sel := key + "=" + nsA
	testenv.LabelNamespace(t, srv.Config(), nsA, key, nsA)
	testenv.LabelNamespace(t, srv.Config(), nsB, key, nsA)
	newConfigMap(t, c, nsA, "a1", nil)
	newConfigMap(t, c, nsB, "b1", nil)

	user := "skip-forbidden-" + nsA
	subjects := []rbacv1.Subject{{Kind: rbacv1.UserKind, APIGroup: rbacv1.GroupName, Name: user}}
	if _, err := c.RbacV1().ClusterRoles().Create(ctx, &rbacv1.ClusterRole{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"namespaces"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { _ = c.RbacV1().ClusterRoles().Delete(context.Background(), user, metav1.DeleteOptions{}) })
	if _, err := c.RbacV1().ClusterRoleBindings().Create(ctx, &rbacv1.ClusterRoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: user},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "ClusterRole", Name: user},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		_ = c.RbacV1().ClusterRoleBindings().Delete(context.Background(), user, metav1.DeleteOptions{})
	})
	if _, err := c.RbacV1().Roles(nsA).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(nsA).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "reader"},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: "reader"},
		Subjects:   subjects,
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	// The authorizer's cache lags the bindings: wait until both grant.
	as := rest.CopyConfig(srv.Config())
	as.Impersonate.UserName = user
	ca := kubernetes.NewForConfigOrDie(as)
	for deadline := time.Now().Add(30 * time.Second); ; time.Sleep(50 * time.Millisecond) {
		_, err := ca.CoreV1().ConfigMaps(nsA).List(ctx, metav1.ListOptions{})
		if err == nil {
			_, err = ca.CoreV1().Namespaces().List(ctx, metav1.ListOptions{LabelSelector: sel})
		}
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("the bindings still not effective after 30s: %v", err)
		}
	}
	args := []string{"configmaps", "--namespace-selector", sel, "--as", user, kubeconfigArg(srv)}

	// Without the flag: forbidden at start, naming nsB and the flag.
	for _, cmd := range [][]string{
		append([]string{"watch", "-o", "json"}, args...),
		append([]string{"serve", "--listen", "127.0.0.1:0"}, args...),
	} {
		p := start(t, nil, cmd...)
		code := p.wait(lineTimeout)
		stderr := p.stderr.String()
		if code != exitForbidden || !strings.Contains(stderr, "--skip-forbidden-namespaces") || !strings.Contains(stderr, `"`+nsB+`"`) {
			t.Errorf("%s without --skip-forbidden-namespaces: exit %d, stderr:\n%s\nwant exit %d, forbidden in %s, naming the flag", cmd[0], code, stderr, exitForbidden, nsB)
		}
	}

	// With it: nsA's objects only, and a word on stderr of nsB left out.
	args = append(args, "--skip-forbidden-namespaces")
	w := start(t, nil, append([]string{"watch", "-o", "json"}, args...)...)
	if l := nextEvent(t, w); l.Type != "ADDED" || l.Key != nsA+"/a1" {
		t.Fatalf("watch --skip-forbidden-namespaces: first line %+v, want ADDED %s/a1", l, nsA)
	}
	if code := w.interrupt(); code != 0 {
		t.Fatalf("watch: exit %d after SIGINT; stderr:\n%s", code, w.stderr)
	}
	for _, l := range w.rest() {
		if e := decode(t, l); e.Type != "BOOKMARK" {
			t.Errorf("watch --skip-forbidden-namespaces: unexpected line %s", l)
		}
	}
	if stderr := w.stderr.String(); !strings.Contains(stderr, "may not list and watch configmaps") || !strings.Contains(stderr, "namespace "+nsB) {
		t.Errorf("watch --skip-forbidden-namespaces: stderr does not say %s was left out:\n%s", nsB, stderr)
	}

	s, base := startServe(t, args...)
	waitReady(t, base)
	var l listResponse
	getJSON(t, base+"objects?resource=configmaps", 200, &l)
	if l.Count != 1 || names(l)[0] != "a1" {
		t.Errorf("serve --skip-forbidden-namespaces: /objects %v, want only %s/a1", names(l), nsA)
	}
	if code := s.interrupt(); code != 0 {
		t.Fatalf("serve: exit %d after SIGINT; stderr:\n%s", code, s.stderr)
	}
}
