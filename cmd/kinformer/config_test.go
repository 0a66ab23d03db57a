package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	authenticationv1 "k8s.io/api/authentication/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// kubectl's connection flags (cli-runtime's ConfigFlags), against the real
// server.

// --as reaches the server as impersonation: the admin acting as the
// restricted user gets exactly that user's rights.
func TestFlagImpersonation(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	kc := kubeconfigArg(srv)
	code, _, stderr := runCmd(t, nil, "watch", "cm", "-n", "default", "--as", testenv.RestrictedUser, kc)
	if code != exitForbidden || !strings.Contains(stderr, `"`+testenv.RestrictedUser+`"`) {
		t.Errorf("--as %s in default: exit %d, stderr %q; want %d, forbidden for that user", testenv.RestrictedUser, code, stderr, exitForbidden)
	}

	c := kubernetes.NewForConfigOrDie(srv.Config())
	name := "impersonated-" + strings.ToLower(t.Name())
	newConfigMap(t, c, testenv.AllowedNamespace, name, nil)
	t.Cleanup(func() {
		_ = c.CoreV1().ConfigMaps(testenv.AllowedNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	expectFirstKeyIn(t, testenv.AllowedNamespace+"/"+name, "configmaps", "-n", testenv.AllowedNamespace, "-l", "app=test",
		"--as", testenv.RestrictedUser, kc)
}

// --server, --token and --certificate-authority (or
// --insecure-skip-tls-verify) connect without any kubeconfig; --server
// overrides the kubeconfig's server.
func TestFlagServerToken(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	newConfigMap(t, c, ns, "tokened", nil)

	// A service account that may watch configmaps in ns, and a token for it.
	if _, err := c.CoreV1().ServiceAccounts(ns).Create(ctx, &corev1.ServiceAccount{ObjectMeta: metav1.ObjectMeta{Name: "watcher"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().Roles(ns).Create(ctx, &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: "watcher"},
		Rules:      []rbacv1.PolicyRule{{APIGroups: []string{""}, Resources: []string{"configmaps"}, Verbs: []string{"get", "list", "watch"}}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	if _, err := c.RbacV1().RoleBindings(ns).Create(ctx, &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: "watcher"},
		RoleRef:    rbacv1.RoleRef{APIGroup: "rbac.authorization.k8s.io", Kind: "Role", Name: "watcher"},
		Subjects:   []rbacv1.Subject{{Kind: "ServiceAccount", Name: "watcher", Namespace: ns}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	tr, err := c.CoreV1().ServiceAccounts(ns).CreateToken(ctx, "watcher", &authenticationv1.TokenRequest{}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	token := tr.Status.Token

	dir := t.TempDir()
	ca := filepath.Join(dir, "ca.crt")
	if err := os.WriteFile(ca, srv.Config().CAData, 0o600); err != nil {
		t.Fatal(err)
	}
	noKubeconfig := []string{"HOME=" + dir} // and no $KUBECONFIG (cleanEnv)
	key := ns + "/tokened"
	expectFirst(t, key, noKubeconfig, "cm", "-n", ns, "--server", srv.Host(), "--token", token, "--certificate-authority", ca)
	expectFirst(t, key, noKubeconfig, "cm", "-n", ns, "-s", srv.Host(), "--token", token, "--insecure-skip-tls-verify")

	// The token's rights, not more.
	code, _, stderr := runCmd(t, noKubeconfig, "watch", "cm", "-n", "default", "--server", srv.Host(), "--token", token, "--certificate-authority", ca)
	if code != exitForbidden || !strings.Contains(stderr, "system:serviceaccount:"+ns+":watcher") {
		t.Errorf("token in default: exit %d, stderr %q; want %d naming the service account", code, stderr, exitForbidden)
	}
	code, _, stderr = runCmd(t, noKubeconfig, "watch", "cm", "-n", ns, "--server", srv.Host(), "--token", "not-a-token", "--certificate-authority", ca)
	if code != exitForbidden || !strings.Contains(stderr, "nauthorized") {
		t.Errorf("bad token: exit %d, stderr %q; want %d, unauthorized", code, stderr, exitForbidden)
	}

	// --server wins over the kubeconfig's (here a closed port).
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	closed := ln.Addr().String()
	ln.Close()
	data, err := os.ReadFile(srv.Kubeconfig())
	if err != nil {
		t.Fatal(err)
	}
	wrong := filepath.Join(dir, "kubeconfig")
	if err := os.WriteFile(wrong, []byte(strings.ReplaceAll(string(data), strings.TrimPrefix(srv.Host(), "https://"), closed)), 0o600); err != nil {
		t.Fatal(err)
	}
	expectFirst(t, key, nil, "cm", "-n", ns, "--kubeconfig", wrong, "--server", srv.Host())
}

// --request-timeout bounds discovery and lists: a server that never
// answers fails as unreachable once it has passed.
func TestFlagRequestTimeout(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var (
		mu    sync.Mutex // guards conns
		conns []net.Conn
	)
	t.Cleanup(func() {
		ln.Close()
		mu.Lock()
		defer mu.Unlock()
		for _, conn := range conns {
			conn.Close()
		}
	})
	go func() { // accept and say nothing
		for {
			conn, err := ln.Accept()
			if err != nil {
				return
			}
			mu.Lock()
			conns = append(conns, conn)
			mu.Unlock()
		}
	}()
	home := t.TempDir()
	code, _, stderr := runCmd(t, []string{"HOME=" + home}, "watch", "cm", "--server", "https://"+ln.Addr().String(), "--insecure-skip-tls-verify", "--request-timeout", "1s")
	if code != exitUnreachable || !strings.Contains(stderr, "cannot reach the cluster") {
		t.Errorf("exit %d, stderr %q; want %d, cannot reach", code, stderr, exitUnreachable)
	}
}
