package kinformer

import (
	"errors"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/describe"
)

// typedClient returns a clientset's ConfigMaps client for ns on host; no
// request is made.
func typedClient(t *testing.T, host, ns string) any {
	t.Helper()
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: host})
	if err != nil {
		t.Fatal(err)
	}
	return cs.CoreV1().ConfigMaps(ns)
}

func keyA(c *corev1.ConfigMap) string { return "a/" + c.Name }
func keyB(c *corev1.ConfigMap) string { return "b/" + c.Name }

func dropLabels(c *corev1.ConfigMap) (*corev1.ConfigMap, error) { c.Labels = nil; return c, nil }

func TestStateIdentity(t *testing.T) {
	const host = "https://cluster-1.example:6443"
	identity := func(lw any, change func(*Options[*corev1.ConfigMap])) string {
		o := &Options[*corev1.ConfigMap]{}
		if change != nil {
			change(o)
		}
		id, ok := stateIdentity(describe.Of(lw), compile(o, nil))
		if !ok {
			return ""
		}
		return id.String()
	}
	base := identity(typedClient(t, host, "ns1"), nil)
	if base == "" {
		t.Fatal("no identity for a typed client")
	}
	if again := identity(typedClient(t, host, "ns1"), nil); again != base {
		t.Fatalf("equal options, other identities:\n%s\n%s", base, again)
	}
	if again := identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = MetaNamespaceKey[*corev1.ConfigMap] }); again != base {
		t.Errorf("KeyFunc MetaNamespaceKey given or defaulted, other identities:\n%s\n%s", base, again)
	}
	if again := identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }); again != identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }) {
		t.Errorf("the same KeyFunc, other identities")
	}

	differ := map[string]string{
		"namespace":         identity(typedClient(t, host, "ns2"), nil),
		"all namespaces":    identity(typedClient(t, host, ""), nil),
		"server":            identity(typedClient(t, "https://cluster-2.example:6443", "ns1"), nil),
		"labelSelector":     identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.LabelSelector = "app=web" }),
		"fieldSelector":     identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.FieldSelector = "metadata.name=x" }),
		"KeyFunc":           identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeyFunc = keyA }),
		"Transform":         identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.Transform = dropLabels }),
		"KeepManagedFields": identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.KeepManagedFields = true }),
		"Name":              identity(typedClient(t, host, "ns1"), func(o *Options[*corev1.ConfigMap]) { o.Name = "other" }),
	}
	seen := map[string]string{base: "base"}
	for what, id := range differ {
		if id == "" {
			t.Errorf("%s: no identity", what)
			continue
		}
		if other, dup := seen[id]; dup {
			t.Errorf("%s changed, same identity as %s:\n%s", what, other, id)
		}
		seen[id] = what
	}
	// Two KeyFuncs are told apart by name.
	if a, b := identity(nil, func(o *Options[*corev1.ConfigMap]) { o.StateKey = "k"; o.KeyFunc = keyA }),
		identity(nil, func(o *Options[*corev1.ConfigMap]) { o.StateKey = "k"; o.KeyFunc = keyB }); a == b {
		t.Errorf("keyA and keyB, same identity:\n%s", a)
	}

	// A source that does not say what it watches needs a StateKey.
	if id := identity(newFakeServer(), nil); id != "" {
		t.Errorf("a ListerWatcher of our own and no StateKey: identity %q, want none", id)
	}
	if id := identity(nil, nil); id != "" {
		t.Errorf("no source and no StateKey: identity %q, want none", id)
	}
	withKey := identity(newFakeServer(), func(o *Options[*corev1.ConfigMap]) { o.StateKey = "https://h configmaps ns1" })
	if withKey == "" || !strings.Contains(withKey, "https://h configmaps ns1") {
		t.Errorf("with a StateKey: identity %q", withKey)
	}
	if other := identity(newFakeServer(), func(o *Options[*corev1.ConfigMap]) { o.StateKey = "https://h configmaps ns2" }); other == withKey {
		t.Errorf("another StateKey, same identity")
	}
}

// Without a StateKey, a source that does not say what it watches runs
// without a file, and says so at each run.
func TestStateNoIdentity(t *testing.T) {
	dir := t.TempDir()
	s := newFakeServer()
	s.apply("ADDED", cm("a", "one"))
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{StateDir: dir})
	eventually(t, "an Error event", func() bool {
		for _, e := range rec.all() {
			if e.Type == Error && errors.Is(e.Err, ErrSnapshot) && strings.Contains(e.Err.Error(), "StateKey") {
				return true
			}
		}
		return false
	})
	if _, ok := inf.Cache().GetByKey("a/one"); !ok {
		t.Fatal("the informer did not go on without the file")
	}
	inf.Stop()
	if files, _ := filepath.Glob(filepath.Join(dir, "*")); len(files) != 0 {
		t.Fatalf("files written without an identity: %v", files)
	}
}
