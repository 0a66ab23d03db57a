package main

import (
	"context"
	"fmt"
	"os"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

const (
	allowedNamespace = "allowed"
	restrictedRole   = "kinformer-restricted"
	adminContext     = "admin"
	restrictedCtx    = "restricted"
)

// writeKubeconfig writes a self-contained kubeconfig (certificates embedded)
// with two contexts: "admin" (current; group system:masters) and
// "restricted" (user restricted-user, read-only on configmaps and pods in
// namespace "allowed").
func writeKubeconfig(path, server string, p pki) error {
	read := func(name string) ([]byte, error) { return os.ReadFile(name) }
	ca, err := read(p.CACert())
	if err != nil {
		return err
	}
	adminCert, err := read(p.AdminCert())
	if err != nil {
		return err
	}
	adminKey, err := read(p.AdminKey())
	if err != nil {
		return err
	}
	rCert, err := read(p.RestrictedCert())
	if err != nil {
		return err
	}
	rKey, err := read(p.RestrictedKey())
	if err != nil {
		return err
	}
	cfg := clientcmdapi.NewConfig()
	cfg.Clusters["localapi"] = &clientcmdapi.Cluster{Server: server, CertificateAuthorityData: ca}
	cfg.AuthInfos[adminUser] = &clientcmdapi.AuthInfo{ClientCertificateData: adminCert, ClientKeyData: adminKey}
	cfg.AuthInfos[restrictedUser] = &clientcmdapi.AuthInfo{ClientCertificateData: rCert, ClientKeyData: rKey}
	cfg.Contexts[adminContext] = &clientcmdapi.Context{Cluster: "localapi", AuthInfo: adminUser, Namespace: "default"}
	cfg.Contexts[restrictedCtx] = &clientcmdapi.Context{Cluster: "localapi", AuthInfo: restrictedUser, Namespace: allowedNamespace}
	cfg.CurrentContext = adminContext
	data, err := clientcmd.Write(*cfg)
	if err != nil {
		return err
	}
	return writeFileAtomic(path, data, 0o600)
}

func restConfigs(server string, p pki) (admin, restricted *rest.Config) {
	tls := rest.TLSClientConfig{CAFile: p.CACert()}
	admin = &rest.Config{Host: server, TLSClientConfig: tls, QPS: 50, Burst: 100, Timeout: 10 * time.Second}
	admin.CertFile, admin.KeyFile = p.AdminCert(), p.AdminKey()
	restricted = &rest.Config{Host: server, TLSClientConfig: tls, QPS: 50, Burst: 100, Timeout: 10 * time.Second}
	restricted.CertFile, restricted.KeyFile = p.RestrictedCert(), p.RestrictedKey()
	return admin, restricted
}

// waitReady blocks until the apiserver reports /readyz ok, the RBAC bootstrap
// policy is in place, the "allowed" namespace with the restricted user's Role
// and RoleBinding exists, and the RBAC authorizer actually grants the
// restricted user access (its informer-based cache lags the writes).
func waitReady(ctx context.Context, adminCfg, restrictedCfg *rest.Config, logf func(string, ...any)) error {
	admin, err := kubernetes.NewForConfig(adminCfg)
	if err != nil {
		return err
	}
	restricted, err := kubernetes.NewForConfig(restrictedCfg)
	if err != nil {
		return err
	}

	lastErr := ""
	poll := func(what string, f func(context.Context) error) error {
		for {
			cctx, cancel := context.WithTimeout(ctx, 5*time.Second)
			err := f(cctx)
			cancel()
			if err == nil {
				return nil
			}
			if err.Error() != lastErr {
				logf("waiting for %s: %v", what, err)
			}
			lastErr = err.Error()
			select {
			case <-ctx.Done():
				return fmt.Errorf("waiting for %s: %w (last error: %v)", what, ctx.Err(), err)
			case <-time.After(100 * time.Millisecond):
			}
		}
	}

	if err := poll("/readyz", func(ctx context.Context) error {
		body, err := admin.Discovery().RESTClient().Get().AbsPath("/readyz").DoRaw(ctx)
		if err != nil {
			return err
		}
		if strings.TrimSpace(string(body)) != "ok" {
			return fmt.Errorf("readyz: %s", body)
		}
		return nil
	}); err != nil {
		return err
	}
	if err := poll("RBAC bootstrap policy", func(ctx context.Context) error {
		_, err := admin.RbacV1().ClusterRoles().Get(ctx, "cluster-admin", metav1.GetOptions{})
		return err
	}); err != nil {
		return err
	}
	// The system namespaces are created by a post-start controller; tests
	// (and the apiserver's own controllers) expect them.
	for _, ns := range []string{metav1.NamespaceDefault, metav1.NamespaceSystem, metav1.NamespacePublic} {
		if err := poll("namespace "+ns, func(ctx context.Context) error {
			_, err := admin.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{})
			return err
		}); err != nil {
			return err
		}
	}
	if err := poll("restricted user's RBAC objects", func(ctx context.Context) error {
		return ensureRestricted(ctx, admin)
	}); err != nil {
		return err
	}
	return poll("restricted user's access to be effective", func(ctx context.Context) error {
		if _, err := restricted.CoreV1().ConfigMaps(allowedNamespace).List(ctx, metav1.ListOptions{Limit: 1}); err != nil {
			return err
		}
		_, err := restricted.CoreV1().Pods(allowedNamespace).List(ctx, metav1.ListOptions{Limit: 1})
		return err
	})
}

// ensureRestricted creates (or resets) namespace "allowed", a Role granting
// get/list/watch on configmaps and pods there, and a RoleBinding of that Role
// to restricted-user.
func ensureRestricted(ctx context.Context, c kubernetes.Interface) error {
	ns := &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: allowedNamespace}}
	if _, err := c.CoreV1().Namespaces().Create(ctx, ns, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
		return err
	}
	role := &rbacv1.Role{
		ObjectMeta: metav1.ObjectMeta{Name: restrictedRole, Namespace: allowedNamespace},
		Rules: []rbacv1.PolicyRule{{
			APIGroups: []string{""},
			Resources: []string{"configmaps", "pods"},
			Verbs:     []string{"get", "list", "watch"},
		}},
	}
	roles := c.RbacV1().Roles(allowedNamespace)
	if existing, err := roles.Get(ctx, role.Name, metav1.GetOptions{}); err == nil {
		existing.Rules = role.Rules
		if _, err := roles.Update(ctx, existing, metav1.UpdateOptions{}); err != nil {
			return err
		}
	} else if apierrors.IsNotFound(err) {
		if _, err := roles.Create(ctx, role, metav1.CreateOptions{}); err != nil {
			return err
		}
	} else {
		return err
	}
	binding := &rbacv1.RoleBinding{
		ObjectMeta: metav1.ObjectMeta{Name: restrictedRole, Namespace: allowedNamespace},
		RoleRef:    rbacv1.RoleRef{APIGroup: rbacv1.GroupName, Kind: "Role", Name: restrictedRole},
		Subjects:   []rbacv1.Subject{{APIGroup: rbacv1.GroupName, Kind: rbacv1.UserKind, Name: restrictedUser}},
	}
	bindings := c.RbacV1().RoleBindings(allowedNamespace)
	if existing, err := bindings.Get(ctx, binding.Name, metav1.GetOptions{}); err == nil {
		if existing.RoleRef != binding.RoleRef {
			// roleRef is immutable: recreate.
			if err := bindings.Delete(ctx, binding.Name, metav1.DeleteOptions{}); err != nil {
				return err
			}
			_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
			return err
		}
		existing.Subjects = binding.Subjects
		_, err := bindings.Update(ctx, existing, metav1.UpdateOptions{})
		return err
	} else if !apierrors.IsNotFound(err) {
		return err
	}
	_, err := bindings.Create(ctx, binding, metav1.CreateOptions{})
	return err
}
