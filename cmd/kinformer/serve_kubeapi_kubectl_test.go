package main

import (
	"bufio"
	"context"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// needKubectl builds kubectl from its Kubernetes module at the local API
// server's version (tools/kubectl) into the user's cache, and returns it:
// go build's cache makes a warm build take a second or two.
func needKubectl(t *testing.T) string {
	t.Helper()
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(cache, "kinformer-kubectl", "kubectl")
	tmp := bin + ".tmp-" + strings.ReplaceAll(t.Name(), "/", "_")
	if err := os.MkdirAll(filepath.Dir(bin), 0o755); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	cmd := exec.CommandContext(ctx, "go", "build", "-o", tmp, ".")
	cmd.Dir = filepath.Join("..", "..", "tools", "kubectl")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("building kubectl (tools/kubectl): %v\n%s", err, out)
	}
	if err := os.Rename(tmp, bin); err != nil {
		t.Fatal(err)
	}
	return bin
}

// kubectl get and kubectl get -w, pointed at serve --kube-api: the list,
// and a watch that shows a ConfigMap created on the API server.
func TestServeKubeAPIKubectl(t *testing.T) {
	t.Parallel()
	kubectl := needKubectl(t)
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	for _, n := range []string{"a", "b"} {
		newConfigMap(t, real, ns, n, nil)
	}
	_, base := startServe(t, "configmaps", "-n", ns, "--kube-api", kubeconfigArg(srv))
	waitReady(t, base)
	home := t.TempDir()
	empty := filepath.Join(home, "kubeconfig")
	if err := os.WriteFile(empty, []byte("apiVersion: v1\nkind: Config\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	kubectlCmd := func(ctx context.Context, args ...string) *exec.Cmd {
		cmd := exec.CommandContext(ctx, kubectl, append([]string{"--server", strings.TrimSuffix(base, "/"), "-n", ns}, args...)...)
		cmd.Env = append(cleanEnv(), "HOME="+home, "KUBECONFIG="+empty)
		return cmd
	}

	out, err := kubectlCmd(context.Background(), "get", "configmaps", "-o", "name").CombinedOutput()
	if got := strings.Fields(string(out)); err != nil || !slices.Equal(got, []string{"configmap/a", "configmap/b"}) {
		t.Fatalf("kubectl get configmaps: %v\n%s", err, out)
	}
	out, err = kubectlCmd(context.Background(), "get", "configmaps").CombinedOutput()
	if err != nil || !strings.Contains(string(out), "NAME") || !strings.Contains(string(out), "a ") {
		t.Errorf("kubectl get configmaps (a table): %v\n%s", err, out)
	}
	out, err = kubectlCmd(context.Background(), "get", "configmap", "nope").CombinedOutput()
	if err == nil || !strings.Contains(string(out), `configmaps "nope" not found`) {
		t.Errorf("kubectl get configmap nope: %v\n%s", err, out)
	}

	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	w := kubectlCmd(ctx, "get", "configmaps", "-w", "-o", "name")
	stdout, err := w.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr strings.Builder
	w.Stderr = &stderr
	if err := w.Start(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		cancel()
		_ = w.Wait()
	}()
	lines := make(chan string, 100)
	go func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- sc.Text()
		}
	}()
	seen := map[string]bool{}
	created := false
	for deadline := time.After(60 * time.Second); !seen["configmap/c"]; {
		select {
		case l, ok := <-lines:
			if !ok {
				t.Fatalf("kubectl get -w ended; seen %v; stderr:\n%s", seen, stderr.String())
			}
			seen[l] = true
			if seen["configmap/a"] && seen["configmap/b"] && !created {
				created = true
				newConfigMap(t, real, ns, "c", nil)
			}
		case <-deadline:
			t.Fatalf("kubectl get -w: seen %v after 60 s; stderr:\n%s", seen, stderr.String())
		}
	}
}
