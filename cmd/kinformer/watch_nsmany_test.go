//go:build unix

package main

import (
	"context"
	"fmt"
	"os/exec"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// --namespace-selector over 101 namespaces: watch and serve say once on
// stderr that so many namespaces cost a list and a watch each, naming
// -A -l. With --state-dir, in a process allowed 64 open files, the state
// files that cannot be opened are said on stderr with the cause and what
// to do.
func TestNamespaceSelectorManyNamespaces(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	key := "kinformer.test/many"
	value := fmt.Sprintf("m%d", time.Now().UnixNano())
	var first string
	for i := range 101 {
		ns, err := c.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{
			GenerateName: "many-", Labels: map[string]string{key: value, "kinformer.test/testenv": "true"},
		}}, metav1.CreateOptions{})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { _ = c.CoreV1().Namespaces().Delete(context.Background(), ns.Name, metav1.DeleteOptions{}) })
		if i == 0 {
			first = ns.Name
		}
	}
	newConfigMap(t, c, first, "one", nil)

	sel := key + "=" + value
	warnedOnce := func(cmd, stderr string) {
		t.Helper()
		if n := strings.Count(stderr, "--namespace-selector holds "); n != 1 || !strings.Contains(stderr, "configmaps: --namespace-selector holds 100 namespaces") || !strings.Contains(stderr, "-A -l SELECTOR") {
			t.Errorf("%s: said %d times that it holds many namespaces, want once naming configmaps and -A -l; stderr:\n%s", cmd, n, stderr)
		}
	}
	w := start(t, nil, "watch", "configmaps", "--namespace-selector", sel, "-o", "json", kubeconfigArg(srv))
	if l := nextEvent(t, w); l.Type != "ADDED" || l.Key != first+"/one" {
		t.Fatalf("watch: first line %+v, want ADDED %s/one", l, first)
	}
	// The line is printed as the informer of its namespace lists; the
	// others join meanwhile.
	for deadline := time.Now().Add(lineTimeout); !strings.Contains(w.stderr.String(), "--namespace-selector holds ") && time.Now().Before(deadline); {
		time.Sleep(50 * time.Millisecond)
	}
	if code := w.interrupt(); code != 0 {
		t.Fatalf("watch: exit %d after SIGINT; stderr:\n%s", code, w.stderr)
	}
	warnedOnce("watch", w.stderr.String())
	s, base := startServe(t, "configmaps", "--namespace-selector", sel, kubeconfigArg(srv))
	waitReady(t, base)
	if code := s.interrupt(); code != 0 {
		t.Fatalf("serve: exit %d after SIGINT; stderr:\n%s", code, s.stderr)
	}
	warnedOnce("serve", s.stderr.String())

	// With --state-dir, allowed 64 open files: the state files that
	// cannot be opened are said on stderr, with the cause and what to do.
	// Out of descriptors, connections fail too: the test waits for the
	// words, not for the sync.
	for _, cmd := range [][]string{{"watch", "-o", "json"}, {"serve", "--listen", "127.0.0.1:0"}} {
		args := append(cmd, "configmaps", "--namespace-selector", sel, "--state-dir", t.TempDir(), kubeconfigArg(srv))
		p := startCmd(t, exec.Command("sh", append([]string{"-c", `ulimit -n 64 && exec "$0" "$@"`, binary(t)}, args...)...), nil)
		deadline := time.Now().Add(lineTimeout)
		for !strings.Contains(p.stderr.String(), "ulimit -n") && time.Now().Before(deadline) {
			time.Sleep(50 * time.Millisecond)
		}
		if code := p.interrupt(); code != 0 {
			t.Errorf("%s under ulimit -n 64: exit %d after SIGINT; stderr:\n%s", cmd[0], code, p.stderr)
		}
		if stderr := p.stderr.String(); !strings.Contains(stderr, "warning: state snapshot unusable: ") || !strings.Contains(stderr, ": too many open files; running without it") || !strings.Contains(stderr, "ulimit -n") {
			t.Errorf("%s under ulimit -n 64: no state file said to fail for lack of descriptors, with ulimit -n; stderr:\n%s", cmd[0], stderr)
		}
	}
}
