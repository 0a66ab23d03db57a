package testenv

import (
	"context"
	"fmt"
	"os"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
)

var shared struct {
	mu   sync.Mutex
	opts []Option
	srv  *Server
	err  error
	done bool // start attempted
}

// Main is a TestMain helper: it runs the package's tests and then stops the
// shared server (if any test started it with Shared) and exits.
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
// The options apply to the shared server. The server is started lazily by
// the first Shared call, so `go test -run` selecting no such test costs
// nothing.
func Main(m *testing.M, opts ...Option) {
	shared.mu.Lock()
	shared.opts = opts
	shared.mu.Unlock()
	code := m.Run()
	StopShared()
	os.Exit(code)
}

// Shared returns the package's shared server, starting it on first use. It
// skips the test if KINFORMER_SKIP_APISERVER is set and fails it if the
// server could not be started (every later call fails the same way without
// retrying). Tests must not Kill, Restart, Stop or Compact the shared server;
// use New for that. Use NewNamespace to isolate tests from each other.
//
// Without Main, the shared server is stopped only when the test binary exits
// (the kernel kills it; its temp dir is swept by a later run).
func Shared(t testing.TB) *Server {
	t.Helper()
	if Skipping() {
		t.Skip("testenv: " + EnvSkip + " is set; skipping test that needs a real API server")
	}
	shared.mu.Lock()
	defer shared.mu.Unlock()
	if !shared.done {
		shared.done = true
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
		shared.srv, shared.err = Start(ctx, shared.opts...)
		cancel()
	}
	if shared.err != nil {
		t.Fatalf("starting shared local API server: %v", shared.err)
	}
	return shared.srv
}

// StopShared stops the shared server if it was started. Main calls it.
func StopShared() {
	shared.mu.Lock()
	srv := shared.srv
	shared.srv = nil
	shared.mu.Unlock()
	if srv != nil {
		if err := srv.Stop(); err != nil {
			fmt.Fprintf(os.Stderr, "testenv: stopping shared server: %v\n", err)
		}
	}
}

var nonDNS = regexp.MustCompile(`[^a-z0-9-]+`)

// NewNamespace creates a namespace with a unique name derived from the test
// name, using cfg (normally an admin config), and deletes it in t.Cleanup.
// There is no controller-manager, so a deleted namespace stays Terminating
// with its contents; that does not affect other namespaces.
func NewNamespace(t testing.TB, cfg *rest.Config) string {
	t.Helper()
	if Skipping() {
		t.Skip("testenv: " + EnvSkip + " is set; skipping test that needs a real API server")
	}
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatalf("testenv: %v", err)
	}
	prefix := nonDNS.ReplaceAllString(strings.ToLower(t.Name()), "-")
	prefix = strings.Trim(prefix, "-")
	if len(prefix) > 40 {
		prefix = strings.Trim(prefix[:40], "-")
	}
	if prefix == "" {
		prefix = "test"
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ns, err := client.CoreV1().Namespaces().Create(ctx, &corev1.Namespace{
		ObjectMeta: metav1.ObjectMeta{
			GenerateName: prefix + "-",
			Labels:       map[string]string{"kinformer.test/testenv": "true"},
		},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatalf("testenv: creating namespace: %v", err)
	}
	t.Cleanup(func() {
		ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
		defer cancel()
		_ = client.CoreV1().Namespaces().Delete(ctx, ns.Name, metav1.DeleteOptions{})
	})
	return ns.Name
}

// LabelNamespace sets the label key of namespace ns to value, or removes
// it if value is "", using cfg (normally an admin config).
func LabelNamespace(t testing.TB, cfg *rest.Config, ns, key, value string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := SetNamespaceLabel(ctx, cfg, ns, key, value); err != nil {
		t.Fatalf("testenv: %v", err)
	}
}

// SetNamespaceLabel is LabelNamespace under ctx, returning its error: for
// goroutines other than the test's, which must not call t.Fatal.
func SetNamespaceLabel(ctx context.Context, cfg *rest.Config, ns, key, value string) error {
	client, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	v := "null"
	if value != "" {
		v = strconv.Quote(value)
	}
	patch := fmt.Sprintf(`{"metadata":{"labels":{%s:%s}}}`, strconv.Quote(key), v)
	if _, err := client.CoreV1().Namespaces().Patch(ctx, ns, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
		return fmt.Errorf("labelling namespace %s: %w", ns, err)
	}
	return nil
}
