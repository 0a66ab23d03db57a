package controllerruntime_test

import (
	"context"
	"log/slog"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	toolscache "k8s.io/client-go/tools/cache"
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
	waitFor(t, "the handler to get "+nsA+"/cm", func() bool { return log.has("add " + nsA + "/cm") })
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
	if got := listed(); !slices.Equal(got, sorted([]string{nsA, nsB})) {
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
	// The restricted user may also read ConfigMaps in
	// testenv.AllowedNamespace, and nowhere else.
	var got []string
	for _, cm := range l.Items {
		if cm.Namespace != testenv.AllowedNamespace {
			got = append(got, cm.Namespace+"/"+cm.Name)
		}
	}
	if !slices.Equal(got, []string{ns + "/cm"}) {
		t.Fatalf("listed %v (besides %s), want [%s/cm] alone", got, testenv.AllowedNamespace, ns)
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

// IndexField as the first use of a kind, with IfAllowed, indexes the
// namespaces allowed once (a controller's setup calls it before anything
// else touches the kind).
func TestIfAllowedIndexFieldFirst(t *testing.T) {
	cfg, cs, ns := setup(t)
	if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "cm"}, Data: map[string]string{"owner": "x"}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	c, err := kcr.With(kcr.Options{IfAllowed: true})(cfg, cache.Options{DefaultNamespaces: map[string]cache.Config{ns: {}}})
	if err != nil {
		t.Fatal(err)
	}
	if err := c.IndexField(t.Context(), &corev1.ConfigMap{}, "owner", func(o client.Object) []string {
		return []string{o.(*corev1.ConfigMap).Data["owner"]}
	}); err != nil {
		t.Fatalf("IndexField first: %v", err)
	}
	runCache(t, c)
	var l corev1.ConfigMapList
	if err := c.List(t.Context(), &l, client.MatchingFields{"owner": "x"}); err != nil || len(l.Items) != 1 {
		t.Fatalf("List by the index: %d items, %v; want 1", len(l.Items), err)
	}
}

// A kind revoked in a namespace and allowed again while its handlers are
// still handling its leave joins once they have, without waiting under
// the cache's locks: meanwhile a handler that reads another kind, and a
// namespace added by hand, go on. No informer of the kind is left where
// it is refused.
func TestIfAllowedRegrantedWhileLeaving(t *testing.T) {
	cfg, cs, nsA := setup(t)
	nsB := testenv.NewNamespace(t, cfg)
	for _, ns := range []string{nsA, nsB} {
		if _, err := cs.CoreV1().ConfigMaps(ns).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "cm"}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var refusedA atomic.Bool
	var allowedA atomic.Int32 // answers allowing nsA
	restore := kcr.SetReviewHook(func(_ context.Context, gvk schema.GroupVersionKind, ns string) (bool, string, error) {
		switch {
		case gvk.Kind != "ConfigMap" || ns == "":
			return false, "not this kind, nor everywhere", nil
		case ns == nsA && refusedA.Load():
			return false, "revoked", nil
		case ns == nsA:
			allowedA.Add(1)
		}
		return true, "", nil
	})
	defer restore()
	c, err := kcr.With(kcr.Options{IfAllowed: true, Recheck: 20 * time.Millisecond})(cfg, cache.Options{
		DefaultNamespaces: map[string]cache.Config{nsA: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var log handlerLog
	leaving := make(chan struct{})
	release := make(chan struct{})
	var once sync.Once
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { log.handler().OnAdd(obj, false) },
		DeleteFunc: func(obj any) {
			once.Do(func() {
				close(leaving)
				<-release // the handler is still on the leave while the kind is allowed again
				var secrets corev1.SecretList
				if err := c.List(ctx, &secrets); err != nil { // another kind: its gate is made now
					t.Errorf("List of Secrets from the handler: %v", err)
				}
			})
			log.handler().OnDelete(obj)
		},
	}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the cache stops, which waits for the handler
	waitFor(t, "the first add", func() bool { return log.has("add " + nsA + "/cm") })

	refusedA.Store(true)
	select {
	case <-leaving:
	case <-time.After(30 * time.Second):
		t.Fatal("the revoked namespace did not leave")
	}
	before := allowedA.Load()
	refusedA.Store(false)
	added := make(chan error, 1)
	go func() { added <- kcr.AddNamespace(ctx, c, nsB) }()
	// Rechecks allow nsA again while the handler is still on its leave.
	waitFor(t, "a recheck to allow nsA again", func() bool { return allowedA.Load() > before+1 })
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "cm"}, &corev1.ConfigMap{}); err == nil {
		t.Error("Get in the namespace still leaving succeeded; want an unknown namespace until it joins again")
	}
	releaseOnce()
	select {
	case err := <-added:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(30 * time.Second):
		t.Fatal("AddNamespace did not return: blocked behind the leave")
	}
	waitFor(t, "the namespace allowed again to join after its leave", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		n := 0
		for _, l := range log.lines {
			if l == "add "+nsA+"/cm" {
				n++
			}
		}
		return n == 2
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "cm"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("Get after the join: %v", err)
	}
	waitFor(t, nsB+"'s ConfigMap", func() bool { return log.has("add " + nsB + "/cm") })
}

// A namespace removed while one of its kinds is leaving it (revoked)
// waits for that leave: the handlers get OnDelete for every object of
// the kind, and the namespace added back, and allowed, holds the kind
// again.
func TestIfAllowedNamespaceRemovedWhileKindLeaves(t *testing.T) {
	cfg, cs, nsA := setup(t)
	for _, name := range []string{"cm1", "cm2"} {
		if _, err := cs.CoreV1().ConfigMaps(nsA).Create(t.Context(), &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: name}}, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	var refused atomic.Bool
	restore := kcr.SetReviewHook(func(_ context.Context, gvk schema.GroupVersionKind, ns string) (bool, string, error) {
		if gvk.Kind != "ConfigMap" || ns == "" || refused.Load() {
			return false, "refused", nil
		}
		return true, "", nil
	})
	defer restore()
	c, err := kcr.With(kcr.Options{IfAllowed: true, Recheck: 20 * time.Millisecond})(cfg, cache.Options{
		DefaultNamespaces: map[string]cache.Config{nsA: {}}})
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	inf, err := c.GetInformer(ctx, &corev1.ConfigMap{})
	if err != nil {
		t.Fatal(err)
	}
	var log handlerLog
	leaving, release := make(chan struct{}), make(chan struct{})
	var once sync.Once
	if _, err := inf.AddEventHandler(toolscache.ResourceEventHandlerFuncs{
		AddFunc: func(obj any) { log.handler().OnAdd(obj, false) },
		DeleteFunc: func(obj any) {
			once.Do(func() { close(leaving); <-release })
			log.handler().OnDelete(obj)
		},
	}); err != nil {
		t.Fatal(err)
	}
	runCache(t, c)
	releaseOnce := sync.OnceFunc(func() { close(release) })
	t.Cleanup(releaseOnce) // before the cache stops, which waits for the handler
	waitFor(t, "the adds", func() bool { return log.has("add "+nsA+"/cm1", "add "+nsA+"/cm2") })
	refused.Store(true)
	select {
	case <-leaving:
	case <-time.After(30 * time.Second):
		t.Fatal("the revoked kind did not leave")
	}
	if err := kcr.RemoveNamespace(c, nsA); err != nil {
		t.Fatal(err)
	}
	releaseOnce()
	waitFor(t, "OnDelete for both objects of the kind's leave", func() bool {
		return log.has("delete? "+nsA+"/cm1", "delete? "+nsA+"/cm2")
	})
	refused.Store(false)
	if err := kcr.AddNamespace(ctx, c, nsA); err != nil {
		t.Fatal(err)
	}
	waitFor(t, "the namespace back to hold the kind again", func() bool {
		log.mu.Lock()
		defer log.mu.Unlock()
		n := 0
		for _, l := range log.lines {
			if strings.HasPrefix(l, "add "+nsA+"/") {
				n++
			}
		}
		return n == 4
	})
	if err := c.Get(ctx, client.ObjectKey{Namespace: nsA, Name: "cm1"}, &corev1.ConfigMap{}); err != nil {
		t.Fatalf("Get after the namespace came back: %v", err)
	}
}

// IfAllowed is refused with a ByObject's Namespaces[""] too.
func TestIfAllowedNotWithByObjectEveryOtherNamespace(t *testing.T) {
	cfg, _, ns := setup(t)
	_, err := kcr.With(kcr.Options{IfAllowed: true})(cfg, cache.Options{
		ByObject: map[client.Object]cache.ByObject{&corev1.ConfigMap{}: {Namespaces: map[string]cache.Config{ns: {}, metav1.NamespaceAll: {}}}}})
	if err == nil || !strings.Contains(err.Error(), "IfAllowed") {
		t.Fatalf("err = %v, want one naming IfAllowed", err)
	}
}
