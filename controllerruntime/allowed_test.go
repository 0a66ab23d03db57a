package controllerruntime_test

import (
	"log/slog"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"

	kcr "github.com/kinformer/kinformer/controllerruntime"
	"github.com/kinformer/kinformer/internal/testenv"
)

// A cache with IfAllowed holds each kind in the namespaces (of its
// NamespaceSelector here) where the client may list and watch it: a
// namespace refused is left out of the kind (Get and List of it fail as
// for a namespace the cache does not hold, a List of every namespace
// lists the others), one granted while the cache runs joins it (the
// handlers get OnAdd for its objects, the indexes cover it), one revoked
// leaves it (OnDelete for each). A kind refused everywhere holds nothing,
// and the cache still syncs.
func TestIfAllowedFollowsPermissions(t *testing.T) {
	cfg, cs, nsA := setup(t)
	srv := testenv.Shared(t)
	nsB := testenv.NewNamespace(t, cfg)
	label := "kinformer.test/kcr-allowed"
	ctx := t.Context()
	for _, ns := range []string{nsA, nsB} {
		testenv.LabelNamespace(t, cfg, ns, label, nsA)
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"owner": ns}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		if _, err := cs.CoreV1().Secrets(ns).Create(ctx, &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "s"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	configMaps := schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
	srv.Grant(t, "", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}) // to follow the selector
	revokeA := srv.Grant(t, nsA, configMaps)

	logs := newLogs()
	c, err := kcr.With(kcr.Options{NamespaceSelector: label + "=" + nsA, IfAllowed: true, Recheck: 200 * time.Millisecond,
		Logger: slog.New(logs)})(srv.RestrictedConfig(), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var log handlerLog
	if _, err := inf.AddEventHandler(log.handler()); err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(ctx, &corev1.ConfigMap{}, "owner", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["owner"]}
	}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)

	listed := func(opts ...client.ListOption) []string {
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, opts...); err != nil {
			t.Fatal(err)
		}
		var out []string
		for _, cm := range l.Items {
			out = append(out, cm.Namespace)
		}
		slices.Sort(out)
		return out
	}
	refused := func(ns string) {
		t.Helper()
		err := c.Get(ctx, client.ObjectKey{Namespace: ns, Name: "cm"}, &corev1.ConfigMap{})
		if err == nil || !strings.Contains(err.Error(), "unknown namespace") {
			t.Errorf("Get of %s/cm = %v, want an unknown namespace", ns, err)
		}
		var l corev1.ConfigMapList
		if err := c.List(ctx, &l, client.InNamespace(ns)); err == nil {
			t.Errorf("List in %s: no error, want an unknown namespace", ns)
		}
	}
	if got := listed(); !slices.Equal(got, []string{nsA}) {
		t.Fatalf("ConfigMaps listed in %v, want [%s] (the namespace the client may read)", got, nsA)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "cm"}, &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	refused(nsB)
	if !log.has("add " + nsA + "/cm") {
		t.Fatalf("handler: %s; want add %s/cm", log.String(), nsA)
	}
	if !logs.has("may not list and watch configmaps") {
		t.Errorf("the namespace refused was not logged:\n%s", strings.Join(logs.all(), "\n"))
	}

	// Secrets: refused in both, so held in neither.
	var secrets corev1.SecretList
	if err := c.List(ctx, &secrets); err != nil || len(secrets.Items) != 0 {
		t.Errorf("List of Secrets: %d, %v; want none, no error", len(secrets.Items), err)
	}
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "s"}, &corev1.Secret{}); err == nil || !strings.Contains(err.Error(), "unknown namespace") {
		t.Errorf("Get of a Secret = %v, want an unknown namespace", err)
	}

	// Granted while it runs: joins.
	srv.Grant(t, nsB, configMaps)
	waitFor(t, "the namespace granted to join", func() bool { return log.has("add " + nsB + "/cm") })
	if got := listed(); !slices.Equal(got, []string{nsA, nsB}) {
		t.Fatalf("ConfigMaps listed in %v after the grant, want both", got)
	}
	if got := listed(client.MatchingFields{"owner": nsB}); !slices.Equal(got, []string{nsB}) {
		t.Errorf("the index of the namespace that joined: %v, want [%s]", got, nsB)
	}

	// Revoked while it runs: leaves.
	revokeA()
	waitFor(t, "the namespace revoked to leave", func() bool { return log.has("delete? " + nsA + "/cm") })
	if got := listed(); !slices.Equal(got, []string{nsB}) {
		t.Fatalf("ConfigMaps listed in %v after the revocation, want [%s]", got, nsB)
	}
	refused(nsA)
	if got := kcr.Namespaces(c); !slices.Equal(got, sorted([]string{nsA, nsB})) {
		t.Errorf("Namespaces = %v: both still selected (the gate is per kind)", got)
	}
}

// IfAllowed alone (no DefaultNamespaces, no NamespaceSelector) holds every
// namespace where the client may read the kind: a client granted one
// namespace caches that one, where a cache of every namespace would fail.
func TestIfAllowedAloneHoldsEveryNamespaceAllowed(t *testing.T) {
	_, cs, ns := setup(t)
	srv := testenv.Shared(t)
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	srv.Grant(t, "", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	srv.Grant(t, ns, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
	c, err := kcr.With(kcr.Options{IfAllowed: true})(srv.RestrictedConfig(), cache.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := c.GetInformer(t.Context(), &corev1.ConfigMap{}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	var l corev1.ConfigMapList
	if err := c.List(t.Context(), &l); err != nil {
		t.Fatal(err)
	}
	if len(l.Items) != 1 || l.Items[0].Namespace != ns || l.Items[0].Name != "cm" {
		var got []string
		for _, cm := range l.Items {
			got = append(got, cm.Namespace+"/"+cm.Name)
		}
		t.Fatalf("listed %v, want [%s/cm] alone", got, ns)
	}
}

// IfAllowed is refused with DefaultNamespaces[""] (every other namespace
// cannot be reviewed one by one).
func TestIfAllowedNotWithEveryOtherNamespace(t *testing.T) {
	cfg, _, ns := setup(t)
	_, err := kcr.With(kcr.Options{IfAllowed: true})(cfg, cache.Options{
		DefaultNamespaces: map[string]cache.Config{ns: {}, metav1.NamespaceAll: {}}})
	if err == nil || !strings.Contains(err.Error(), "IfAllowed") {
		t.Fatalf("err = %v, want one naming IfAllowed", err)
	}
}
