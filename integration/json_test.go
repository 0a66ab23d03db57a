package integration

import (
	"encoding/json"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Custom resources travel as JSON; kinformer decodes their watches itself
// (internal/jsonwatch) for client-go's dynamic client, a Factory's Dynamic
// and typed Go structs. These tests hold it to client-go's own decoding on
// the real server.

var sprockets = schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "sprockets"}

// sprocket is a custom resource with what JSON decoding can get wrong:
// nested objects, lists of objects and strings, integers (one beyond
// float64's exact range), floats, booleans, nulls, escapes and non-ASCII.
func sprocket(ns string, i int) *unstructured.Unstructured {
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": sprockets.GroupVersion().String(), "kind": "Sprocket",
		"metadata": map[string]any{
			"name": fmt.Sprintf("sp-%03d", i), "namespace": ns,
			"labels":      map[string]any{"app": "shop", "tier": fmt.Sprint(i % 3)},
			"annotations": map[string]any{"note": "caf\u00e9 \"quoted\" \n line", "id": fmt.Sprint(i)},
		},
		"spec": map[string]any{
			"replicas": int64(i), "ratio": float64(i) + 0.25, "big": int64(9007199254740993), "enabled": i%2 == 0,
			"owner": nil, "tags": []any{"a", fmt.Sprintf("t%d", i), "\u65e5\u672c"},
			"ports": []any{map[string]any{"name": "http", "port": int64(8080)}, map[string]any{"name": "metrics", "port": int64(9090), "weight": 0.5}},
			"template": map[string]any{"image": "registry.example/app:v1", "resources": map[string]any{"cpu": "250m", "memory": "128Mi"},
				"env": []any{map[string]any{"name": "ID", "value": fmt.Sprint(i)}}},
			"empty": map[string]any{}, "none": []any{},
		},
		"status": map[string]any{"phase": "Ready", "observedGeneration": int64(1)},
	}}
}

// The dynamic client's informer: direct JSON decoding is in use, and its
// cache and events equal those of the same informer decoding through
// client-go, through a streaming list, creates, merge patches, an apply,
// a status-like change, deletes, and with paged lists too.
func TestDirectJSONMatchesClient(t *testing.T) {
	bothWays(t, testDirectJSONMatchesClient)
}

func testDirectJSONMatchesClient(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	res := createCRD(t, cfg, sprockets, "Sprocket")
	ns := testenv.NewNamespace(t, cfg)
	ctx := bounded(t, 2*time.Minute)
	for i := range 30 {
		if _, err := res.Namespace(ns).Create(ctx, sprocket(ns, i), metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	next := 30 // the next object's number
	for _, paged := range []bool{false, true} {
		t.Run(fmt.Sprintf("paged=%v", paged), func(t *testing.T) {
			opts := kinformer.Options[*unstructured.Unstructured]{DisableStreamingList: paged, PageSize: 7}
			direct, client, dRec, cRec, logs := bothLogged(t, res.Namespace(ns), opts)
			if !logs.has("encoding=json") || (paged && !logs.has("paged list decoding=direct limit=7")) {
				t.Fatalf("not decoded as JSON by kinformer; logs: %q", *logs.lines)
			}
			n := direct.Cache().Len()
			sameCaches(t, n, direct.Cache(), client.Cache())
			for _, o := range direct.Cache().List() {
				if _, ok := o.Object["metadata"].(map[string]any)["managedFields"]; ok {
					t.Fatalf("%s kept managedFields", o.GetName())
				}
			}
			base := next
			for ; next < base+5; next++ {
				if _, err := res.Namespace(ns).Create(ctx, sprocket(ns, next), metav1.CreateOptions{}); err != nil {
					t.Fatal(err)
				}
			}
			for i := 1; i < base; i += 4 {
				patch := fmt.Sprintf(`{"spec":{"replicas":%d,"ratio":1e-3,"tags":null,"nested":{"deep":[[1,2.5,"x"]]}},"metadata":{"labels":{"app":"api"}}}`, i*10)
				if _, err := res.Namespace(ns).Patch(ctx, fmt.Sprintf("sp-%03d", i), types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			apply := fmt.Sprintf(`{"apiVersion":%q,"kind":"Sprocket","metadata":{"name":"sp-002","namespace":%q},"spec":{"applied":true}}`, sprockets.GroupVersion(), ns)
			if _, err := res.Namespace(ns).Patch(ctx, "sp-002", types.ApplyPatchType, []byte(apply), metav1.PatchOptions{FieldManager: "kinformer-test", Force: new(true)}); err != nil {
				t.Fatal(err)
			}
			for i := 0; i < base; i += 6 {
				if err := res.Namespace(ns).Delete(ctx, fmt.Sprintf("sp-%03d", i), metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
					t.Fatal(err)
				}
			}
			list, err := res.Namespace(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				t.Fatal(err)
			}
			sameCaches(t, len(list.Items), direct.Cache(), client.Cache())
			for _, want := range list.Items {
				got, ok := direct.Cache().GetByKey(ns + "/" + want.GetName())
				unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
				if !ok || !reflect.DeepEqual(got.Object, want.Object) {
					t.Fatalf("%s: cache %v\nserver %v", want.GetName(), got, want.Object)
				}
			}
			eventually(t, 10*time.Second, "the same events", func() bool { return reflect.DeepEqual(perObject(dRec), perObject(cRec)) })
			if got, _ := direct.Cache().GetByKey(ns + "/sp-001"); got.Object["spec"].(map[string]any)["big"] != int64(9007199254740993) {
				t.Fatalf("a large integer did not stay an int64: %#v", got.Object["spec"])
			}
		})
	}
}

// Selectors and the namespace reach the server on kinformer's own JSON
// requests: only the matching objects are listed and watched.
func TestDirectJSONSelectors(t *testing.T) {
	bothWays(t, testDirectJSONSelectors)
}

func testDirectJSONSelectors(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	gvr := schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "washers"}
	res := createCRD(t, cfg, gvr, "Washer")
	ns, other := testenv.NewNamespace(t, cfg), testenv.NewNamespace(t, cfg)
	ctx := bounded(t, time.Minute)
	for i := range 12 {
		for _, n := range []string{ns, other} {
			w := sprocket(n, i)
			w.SetKind("Washer")
			if _, err := res.Namespace(n).Create(ctx, w, metav1.CreateOptions{}); err != nil {
				t.Fatal(err)
			}
		}
	}
	for _, paged := range []bool{false, true} {
		logs := newLogCapture()
		inf := kinformer.New[*unstructured.Unstructured](res.Namespace(ns), variant(&kinformer.Options[*unstructured.Unstructured]{
			LabelSelector: "tier=1", FieldSelector: "metadata.name!=sp-004", DisableStreamingList: paged, PageSize: 2, Logger: slog.New(logs)}))
		inf.Start()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		w := sprocket(ns, 100) // tier 1
		w.SetKind("Washer")
		if _, err := res.Namespace(ns).Create(ctx, w, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the new object", func() bool { _, ok := inf.Cache().GetByKey(ns + "/sp-100"); return ok })
		var names []string
		for _, o := range inf.Cache().List() {
			names = append(names, o.GetNamespace()+"/"+o.GetName())
		}
		slices.Sort(names)
		want := []string{ns + "/sp-001", ns + "/sp-007", ns + "/sp-010", ns + "/sp-100"}
		if !slices.Equal(names, want) || !logs.has("encoding=json") {
			t.Fatalf("paged=%v: cached %v, want %v; logs %q", paged, names, want, *logs.lines)
		}
		inf.Stop()
		if err := res.Namespace(ns).Delete(ctx, "sp-100", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}

// A Factory's Dynamic informer decodes JSON itself as well.
func TestFactoryDynamicDecodesJSON(t *testing.T) {
	bothWays(t, testFactoryDynamicDecodesJSON)
}

func testFactoryDynamicDecodesJSON(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	res := createCRD(t, cfg, schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "cogs"}, "Cog")
	ns := testenv.NewNamespace(t, cfg)
	ctx := bounded(t, time.Minute)
	for i := range 10 {
		cog := sprocket(ns, i)
		cog.SetKind("Cog")
		if _, err := res.Namespace(ns).Create(ctx, cog, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	f, logs := newFactory(t, cfg)
	inf, err := f.Dynamic(schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "cogs"}, ns, variant[*unstructured.Unstructured](nil))
	if err != nil {
		t.Fatal(err)
	}
	f.Start()
	waitForSync(t, f)
	if inf.Cache().Len() != 10 || !logs.has("encoding=json") {
		t.Fatalf("%d objects; logs %q", inf.Cache().Len(), *logs.lines)
	}
}

// gear is a typed custom resource, the kubebuilder shape: a Go struct with
// JSON tags, registered in a scheme.
type gear struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              gearSpec       `json:"spec,omitempty"`
	Status            map[string]any `json:"status,omitempty"`
}

type gearSpec struct {
	Replicas int32          `json:"replicas"`
	Ratio    float64        `json:"ratio"`
	Big      int64          `json:"big"`
	Enabled  bool           `json:"enabled"`
	Owner    *string        `json:"owner"`
	Tags     []string       `json:"tags,omitempty"`
	Ports    []gearPort     `json:"ports,omitempty"`
	Template map[string]any `json:"template,omitempty"`
	Applied  bool           `json:"applied,omitempty"`
}

type gearPort struct {
	Name   string  `json:"name"`
	Port   int32   `json:"port"`
	Weight float64 `json:"weight,omitempty"`
}

type gearList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []gear `json:"items"`
}

// DeepCopyObject is an exact copy, as controller-gen's: a JSON round trip
// would turn the int64s of Status and Template into float64s, a copy the
// cache mutation detector rightly finds different from the object.
func (g *gear) DeepCopyObject() runtime.Object {
	out := &gear{TypeMeta: g.TypeMeta, Spec: g.Spec}
	g.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	if g.Spec.Owner != nil {
		owner := *g.Spec.Owner
		out.Spec.Owner = &owner
	}
	out.Spec.Tags = slices.Clone(g.Spec.Tags)
	out.Spec.Ports = slices.Clone(g.Spec.Ports)
	if g.Spec.Template != nil {
		out.Spec.Template = runtime.DeepCopyJSON(g.Spec.Template)
	}
	if g.Status != nil {
		out.Status = runtime.DeepCopyJSON(g.Status)
	}
	return out
}

func (g *gearList) DeepCopyObject() runtime.Object { return jsonCopy(g) }

func jsonCopy[T any](v *T) *T {
	b, err := json.Marshal(v)
	if err != nil {
		panic(err)
	}
	out := new(T)
	if err := json.Unmarshal(b, out); err != nil {
		panic(err)
	}
	return out
}

var gears = schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "gears"}

// A typed custom resource through a Factory with the user's scheme: JSON
// decoded by kinformer into the Go type, equal to what the scheme's own
// decoder makes of the server's objects, and kept up to date.
func TestFactoryTypedCustomResource(t *testing.T) {
	bothWays(t, testFactoryTypedCustomResource)
}

func testFactoryTypedCustomResource(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	res := createCRD(t, cfg, gears, "Gear")
	ns := testenv.NewNamespace(t, cfg)
	ctx := bounded(t, time.Minute)
	for i := range 12 {
		g := sprocket(ns, i)
		g.SetKind("Gear")
		g.SetName(fmt.Sprintf("g-%02d", i))
		if _, err := res.Namespace(ns).Create(ctx, g, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	scheme := runtime.NewScheme()
	scheme.AddKnownTypeWithName(gears.GroupVersion().WithKind("Gear"), &gear{})
	scheme.AddKnownTypeWithName(gears.GroupVersion().WithKind("GearList"), &gearList{})
	metav1.AddToGroupVersion(scheme, gears.GroupVersion())
	logs := newLogCapture()
	dir := t.TempDir()
	f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Scheme: scheme, Logger: slog.New(logs), StateDir: dir})
	t.Cleanup(f.Stop)
	inf, err := kinformer.Shared[*gear](f, ns, variant[*gear](nil))
	if err != nil {
		t.Fatal(err)
	}
	inVariant(t, inf.Cache())
	rec := &recorder[*gear]{}
	inf.AddHandler(rec.handle)
	f.Start()
	if err := f.WaitForSync(bounded(t, 20*time.Second)); err != nil {
		t.Fatalf("%v; logs %q", err, *logs.lines)
	}
	if !logs.has("encoding=json") {
		t.Fatalf("typed custom resources not decoded by kinformer; logs %q", *logs.lines)
	}
	if _, err := res.Namespace(ns).Patch(ctx, "g-03", types.MergePatchType, []byte(`{"spec":{"replicas":33,"applied":true}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	eventually(t, 10*time.Second, "the patch seen", func() bool {
		g, ok := inf.Cache().GetByKey(ns + "/g-03")
		return ok && g.Spec.Replicas == 33
	})
	sameAsServer(t, res.Namespace(ns), inf.Cache())
	if got := strings.Join(rec.lines(kinformer.Modified), ","); got != "MODIFIED g-03" {
		t.Fatalf("modified events %q", got)
	}

	// A warm start from the factory's StateDir restores the same objects.
	f.Stop()
	f2 := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Scheme: scheme, StateDir: dir})
	t.Cleanup(f2.Stop)
	warm, err := kinformer.Shared[*gear](f2, ns, variant[*gear](nil))
	if err != nil {
		t.Fatal(err)
	}
	wrec := &recorder[*gear]{}
	warm.AddHandler(wrec.handle)
	f2.Start()
	waitForSync(t, f2)
	sameAsServer(t, res.Namespace(ns), warm.Cache())
	if n := len(wrec.all()); n == 0 || wrec.all()[0].Cause != kinformer.CauseRestore {
		t.Fatalf("not restored: %d events", n)
	}
}

// sameAsServer requires a cache of gears to equal the server's objects as
// the scheme's converter makes them.
func sameAsServer(t *testing.T, res dynamic.ResourceInterface, cache *kinformer.Cache[*gear]) {
	t.Helper()
	list, err := res.List(bounded(t, callTimeout), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if cache.Len() != len(list.Items) {
		t.Fatalf("cache has %d, server %d", cache.Len(), len(list.Items))
	}
	for _, u := range list.Items {
		want := &gear{}
		if err := runtime.DefaultUnstructuredConverter.FromUnstructured(u.Object, want); err != nil {
			t.Fatal(err)
		}
		want.ManagedFields = nil
		want.TypeMeta = metav1.TypeMeta{} // as typed clients give objects: the type says the kind
		got, ok := cache.GetByKey(u.GetNamespace() + "/" + u.GetName())
		if !ok || !reflect.DeepEqual(got, want) {
			t.Fatalf("%s:\ncache  %+v\nserver %+v", u.GetName(), got, want)
		}
	}
}

// Custom resources in the durable cache: a warm start restores them as
// they were decoded (ints still int64), then catches up.
func TestDurableCustomResources(t *testing.T) {
	bothWays(t, testDurableCustomResources)
}

func testDurableCustomResources(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	gvr := schema.GroupVersionResource{Group: "json.kinformer.test", Version: "v1", Resource: "flanges"}
	res := createCRD(t, cfg, gvr, "Flange")
	ns := testenv.NewNamespace(t, cfg)
	ctx := bounded(t, time.Minute)
	for i := range 10 {
		fl := sprocket(ns, i)
		fl.SetKind("Flange")
		if _, err := res.Namespace(ns).Create(ctx, fl, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	dir := t.TempDir()
	run := func() (*kinformer.Informer[*unstructured.Unstructured], *recorder[*unstructured.Unstructured]) {
		inf := kinformer.New[*unstructured.Unstructured](res.Namespace(ns), variant(&kinformer.Options[*unstructured.Unstructured]{StateDir: dir, StateKey: "flanges/" + ns}))
		rec := &recorder[*unstructured.Unstructured]{}
		inf.AddHandler(rec.handle)
		inf.Start()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		return inf, rec
	}
	cold, _ := run()
	cold.Stop()
	if _, err := res.Namespace(ns).Patch(ctx, "sp-004", types.MergePatchType, []byte(`{"spec":{"replicas":44}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	warm, rec := run()
	defer warm.Stop()
	eventually(t, 10*time.Second, "restored and caught up", func() bool { return rec.count(kinformer.Modified) == 1 })
	if n := len(rec.lines(kinformer.Added)); n != 10 {
		t.Fatalf("%d objects restored, want 10", n)
	}
	list, err := res.Namespace(ns).List(ctx, metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range list.Items {
		unstructured.RemoveNestedField(want.Object, "metadata", "managedFields")
		got, ok := warm.Cache().GetByKey(ns + "/" + want.GetName())
		if !ok || !reflect.DeepEqual(got.Object, want.Object) {
			t.Fatalf("%s: cache %#v\nserver %#v", want.GetName(), got, want.Object)
		}
	}
	for _, e := range rec.all() {
		if e.Type == kinformer.Added && e.Cause != kinformer.CauseRestore {
			t.Fatalf("ADDED %s with cause %q, want restore", e.Object.GetName(), e.Cause)
		}
	}
}
