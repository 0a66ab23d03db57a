package kinformer

import (
	"errors"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// The sharing rules: which requests share an informer (keyOf), when
// options merge or conflict (share, merge), and function identity (funcID).

func byName(c *corev1.ConfigMap) []string  { return []string{c.Name} }
func byLabel(c *corev1.ConfigMap) []string { return []string{c.Labels["k"]} }
func upper(c *corev1.ConfigMap) (*corev1.ConfigMap, error) {
	c.Name = strings.ToUpper(c.Name)
	return c, nil
}

func TestShareMergesOrRefuses(t *testing.T) {
	s := newCMShare()
	// Two memberships of one group: two distinct Sharders.
	shardA, shardB := fixedSharding(t, 64, 0, 1), fixedSharding(t, 64, 2, 3)
	first, err := s.get(cmKey, Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName}})
	if err != nil {
		t.Fatal(err)
	}
	// PageSize left zero and given as the default are the same.
	same, err := s.get(cmKey, Options[*corev1.ConfigMap]{PageSize: defaultPageSize,
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName, "label": byLabel}})
	if err != nil || same != first {
		t.Fatalf("second consumer: %p, %v; want the first informer %p", same, err, first)
	}
	if _, err := first.Cache().ByIndex("label", "x"); err != nil {
		t.Fatalf("the second consumer's index was not added: %v", err)
	}

	for _, tc := range []struct {
		name string
		o    Options[*corev1.ConfigMap]
		want string
	}{
		{"transform", Options[*corev1.ConfigMap]{Transform: upper}, "Transform"},
		{"key", Options[*corev1.ConfigMap]{KeyFunc: func(c *corev1.ConfigMap) string { return c.Name }}, "KeyFunc"},
		{"page and managed fields", Options[*corev1.ConfigMap]{PageSize: 10, KeepManagedFields: true}, "KeepManagedFields, PageSize"},
		{"backoff", Options[*corev1.ConfigMap]{Backoff: DefaultBackoff()}, "Backoff"},
		{"streaming", Options[*corev1.ConfigMap]{DisableStreamingList: true}, "DisableStreamingList"},
		{"direct", Options[*corev1.ConfigMap]{DisableDirectDecoding: true}, "DisableDirectDecoding"},
		{"timeouts", Options[*corev1.ConfigMap]{WatchTimeout: time.Minute, IdleMargin: time.Second}, "WatchTimeout, IdleMargin"},
		{"index clash", Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byLabel}}, `index "name"`},
		{"state dir", Options[*corev1.ConfigMap]{StateDir: t.TempDir()}, "StateDir"},
		{"state no sync", Options[*corev1.ConfigMap]{StateNoSync: true}, "StateNoSync"},
		{"sharding", Options[*corev1.ConfigMap]{Sharding: shardA}, "Sharding"},
		{"compact", Options[*corev1.ConfigMap]{Compact: true}, "Compact"},
	} {
		if tc.name == "compact" && compactAll {
			continue // every informer is compact (KINFORMER_TEST_COMPACT): none differs
		}
		inf, err := s.get(cmKey, tc.o)
		if err == nil || !strings.Contains(err.Error(), tc.want) || !strings.Contains(err.Error(), "configmaps in namespace ns") {
			t.Errorf("%s: %p, %v; want an error naming %s and the informer", tc.name, inf, err, tc.want)
		}
	}
	if s.made != 1 {
		t.Fatalf("%d informers made, want 1", s.made)
	}
	// Sharded by one Sharding, an informer is not shared with a consumer
	// that gives another.
	sharded := cmKey
	sharded.label = "sharded=yes"
	a, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardA})
	if err != nil {
		t.Fatal(err)
	}
	if same, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardA}); err != nil || same != a {
		t.Fatalf("the same Sharding again: %p, %v; want the first informer %p", same, err, a)
	}
	if inf, err := s.get(sharded, Options[*corev1.ConfigMap]{Sharding: shardB}); err == nil || !strings.Contains(err.Error(), "Sharding") {
		t.Fatalf("another Sharding: %p, %v; want an error naming Sharding", inf, err)
	}

	// Another selector or namespace is another informer.
	other := cmKey
	other.label = "app=web"
	if inf, err := s.get(other, Options[*corev1.ConfigMap]{Transform: upper}); err != nil || inf == first {
		t.Fatalf("other selector: %p, %v; want a new informer", inf, err)
	}
	s.f.Stop()
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{}); !errors.Is(err, ErrFactoryStopped) {
		t.Fatalf("after Stop: %v, want ErrFactoryStopped", err)
	}
}

func TestShareResyncTakesTheShortest(t *testing.T) {
	s := newCMShare()
	inf, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for _, p := range []time.Duration{0, 2 * time.Hour, 10 * time.Minute, 20 * time.Minute} {
		if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: p}); err != nil {
			t.Fatalf("resync %s: %v", p, err)
		}
	}
	if got := inf.configuration().ResyncPeriod; got != 10*time.Minute {
		t.Fatalf("resync period %s, want the shortest asked for, 10m", got)
	}

	s.f.Start()
	defer s.f.Stop()
	if err := s.f.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	// Once running: longer or none is served by the running period;
	// shorter is taken by the running informer, which resyncs (re-lists)
	// at the new period from then on; a new index is added to the running
	// informer.
	for _, p := range []time.Duration{0, 10 * time.Minute, time.Hour} {
		if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: p}); err != nil {
			t.Fatalf("resync %s after start: %v", p, err)
		}
	}
	lists, _ := s.srv.counts()
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{ResyncPeriod: 300 * time.Millisecond}); err != nil {
		t.Fatalf("shorter resync after start: %v", err)
	}
	if got := inf.configuration().ResyncPeriod; got != 300*time.Millisecond {
		t.Fatalf("resync period %s after a shorter one was asked for, want 300ms", got)
	}
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	// (The watch under way ends for it: its timeout is minutes away.)
	eventually(t, "re-lists at the new period", func() bool { l, _ := s.srv.counts(); return l >= lists+2 })
	got, err := s.get(cmKey, Options[*corev1.ConfigMap]{Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"name": byName}})
	if err != nil || got != inf {
		t.Fatalf("index after start: %v, %p; want the running informer %p", err, got, inf)
	}
	if _, err := inf.Cache().ByIndex("name", "a"); err != nil {
		t.Fatalf("the index added after start: %v", err)
	}
}

func TestKeyOf(t *testing.T) {
	f := NewFactory(nil, nil)
	gvr := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	namespaced := &meta.RESTMapping{Resource: gvr, Scope: meta.RESTScopeNamespace}
	k, o := keyOf(f, reflect.TypeFor[*corev1.ConfigMap](), namespaced, "ns",
		&Options[*corev1.ConfigMap]{LabelSelector: "b=2, a=1", FieldSelector: "metadata.name=x", Name: "mine"})
	k2, _ := keyOf(f, reflect.TypeFor[*corev1.ConfigMap](), namespaced, "ns", &Options[*corev1.ConfigMap]{LabelSelector: "a=1,b=2", FieldSelector: "metadata.name=x"})
	if k != k2 || o.Name != "deployments.apps" || o.LabelSelector != "b=2, a=1" {
		t.Fatalf("keys %+v and %+v, name %q, selector %q", k, k2, o.Name, o.LabelSelector)
	}
	cluster := &meta.RESTMapping{Resource: corev1.SchemeGroupVersion.WithResource("nodes"), Scope: meta.RESTScopeRoot}
	k, no := keyOf[*corev1.Node](f, reflect.TypeFor[*corev1.Node](), cluster, "ns", nil)
	if k.namespace != "" || no.Name != "nodes" {
		t.Fatalf("cluster-scoped: namespace %q, name %q", k.namespace, no.Name)
	}
}

func transformDropping(key string) func(*corev1.ConfigMap) (*corev1.ConfigMap, error) {
	return func(o *corev1.ConfigMap) (*corev1.ConfigMap, error) { delete(o.Data, key); return o, nil }
}

func plainTransform(o *corev1.ConfigMap) (*corev1.ConfigMap, error) { return o, nil }

// funcID tells function values apart as the factory needs: one value is
// one id, two closures (even of one literal, made in a loop) are two, and
// a function named twice is one. An explicit MetaNamespaceKey is the
// default KeyFunc.
func TestFuncID(t *testing.T) {
	var ids []uintptr
	for _, k := range []string{"password", "token"} {
		ids = append(ids, funcID(transformDropping(k)))
	}
	if ids[0] == ids[1] {
		t.Fatal("two closures with different captures have one id")
	}
	f := transformDropping("x")
	if funcID(f) != funcID(f) {
		t.Fatal("one value, two ids")
	}
	if funcID(plainTransform) != funcID(plainTransform) || funcID(plainTransform) == 0 {
		t.Fatal("a function named twice has two ids")
	}
	if funcID(nil) != 0 || funcID((func())(nil)) != 0 {
		t.Fatal("nil has an id")
	}
	if keyFuncID(MetaNamespaceKey[*corev1.ConfigMap]) != 0 || keyFuncID[*corev1.ConfigMap](nil) != 0 {
		t.Fatal("an explicit MetaNamespaceKey is not the default")
	}
	if keyFuncID(func(o *corev1.ConfigMap) string { return strings.ToUpper(o.Name) }) == 0 {
		t.Fatal("another KeyFunc is the default")
	}
}

// Any consumer of a shared informer asking for the detector turns it on
// before the start; after it, asking is an error wrapping ErrStarted,
// unless it is on.
func TestShareDetectMutations(t *testing.T) {
	plainOnly(t)
	t.Setenv(EnvMutationDetector, "")
	s := newCMShare()
	inf, err := s.get(cmKey, Options[*corev1.ConfigMap]{})
	if err != nil || inf.detectingMutations() {
		t.Fatalf("first consumer: %v, detecting %v", err, inf.detectingMutations())
	}
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{DetectMutations: true}); err != nil || !inf.detectingMutations() {
		t.Fatalf("second consumer asking: %v, detecting %v", err, inf.detectingMutations())
	}
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{}); err != nil || !inf.detectingMutations() {
		t.Fatalf("third consumer not asking: %v, detecting %v", err, inf.detectingMutations())
	}
	s.f.Start()
	defer s.f.Stop()
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{DetectMutations: true}); err != nil {
		t.Fatalf("asking after the start, on: %v", err)
	}

	other := cmKey
	other.namespace = "other"
	started, err := s.get(other, Options[*corev1.ConfigMap]{})
	if err != nil {
		t.Fatal(err)
	}
	eventually(t, "the factory's start", started.isStarted)
	if _, err := s.get(other, Options[*corev1.ConfigMap]{DetectMutations: true}); !errors.Is(err, ErrStarted) {
		t.Fatalf("asking after the start, off: %v, want ErrStarted", err)
	}
}

// merge changes nothing when it fails: a consumer whose wider Fields come
// with an index the cache refuses (a nil IndexFunc, or a name the cache
// has already, added to the informer directly) leaves the informer's
// fields as they were, so that a later consumer's index reading the
// fields the failed one asked for is still refused.
func TestShareMergeFailsWithoutWidening(t *testing.T) {
	s := newCMShare()
	inf, err := s.get(cmKey, Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"}})
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"direct": byLabel}); err != nil {
		t.Fatal(err)
	}
	before := inf.Fields()
	byData := func(c *corev1.ConfigMap) []string { return []string{strconv.Itoa(len(c.Data))} }
	for name, idx := range map[string]map[string]IndexFunc[*corev1.ConfigMap]{
		"nil IndexFunc":             {"nil": nil},
		"index added to it already": {"direct": byData},
	} {
		if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels", "data"}, Indexers: idx}); err == nil {
			t.Fatalf("%s: shared, want an error", name)
		}
		if got := inf.Fields(); !reflect.DeepEqual(got, before) {
			t.Errorf("%s: the failed merge changed the informer's fields: %v, was %v", name, got, before)
		}
	}
	if _, err := s.get(cmKey, Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"},
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"data": byData}}); !errors.Is(err, ErrFields) {
		t.Fatalf("an index reading data, which the cache does not keep: %v, want ErrFields", err)
	}
}
