package main

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

const lineTimeout = 30 * time.Second

// line is one line of -o json, decoded.
type line struct {
	Type            string         `json:"type"`
	Key             string         `json:"key"`
	ResourceVersion string         `json:"resourceVersion"`
	Cause           string         `json:"cause"` // "restore" (--state-dir), "join", "leave" (--namespace-selector), "gone" (CRD deleted), else absent
	Object          map[string]any `json:"object"`
	Error           string         `json:"error"`
}

// decode checks that raw is exactly one JSON object with only the
// documented fields, in the documented order, and decodes it.
func decode(t *testing.T, raw string) line {
	t.Helper()
	var l line
	dec := json.NewDecoder(strings.NewReader(raw))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&l); err != nil {
		t.Fatalf("line %q: %v", raw, err)
	}
	if dec.More() {
		t.Fatalf("line %q: more than one JSON value", raw)
	}
	prefix := `{"type":"` + l.Type + `"`
	if l.Key != "" {
		prefix += `,"key":"` + l.Key + `"`
	}
	prefix += `,"resourceVersion":"` + l.ResourceVersion + `"`
	if l.Cause != "" {
		switch {
		case l.Type == "ADDED" && (l.Cause == "restore" || l.Cause == "join"):
		case l.Type == "DELETED" && (l.Cause == "leave" || l.Cause == "gone"):
		default:
			t.Fatalf("line %q: only ADDED has a cause, \"restore\" or \"join\", and DELETED \"leave\" or \"gone\"", raw)
		}
		prefix += `,"cause":"` + l.Cause + `"`
	}
	if !strings.HasPrefix(raw, prefix) {
		t.Fatalf("line %q: want it to start with %q", raw, prefix)
	}
	switch l.Type {
	case "BOOKMARK":
		if l.Object != nil || l.Key != "" {
			t.Fatalf("bookmark line %q has a key or an object", raw)
		}
	case "ERROR":
		if l.Error == "" {
			t.Fatalf("error line %q has no error", raw)
		}
	case "ADDED", "MODIFIED", "DELETED":
		if l.Object == nil || l.Key == "" || l.ResourceVersion == "" {
			t.Fatalf("line %q lacks its key, resourceVersion or object", raw)
		}
	default:
		t.Fatalf("line %q: unknown type", raw)
	}
	return l
}

// nextEvent returns the next non-bookmark line.
func nextEvent(t *testing.T, p *proc) line {
	t.Helper()
	for {
		if l := decode(t, p.next(lineTimeout)); l.Type != "BOOKMARK" {
			return l
		}
	}
}

func rv(t *testing.T, l line) int64 {
	t.Helper()
	n, err := strconv.ParseInt(l.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatalf("resourceVersion %q: %v", l.ResourceVersion, err)
	}
	return n
}

func kubeconfigArg(srv *testenv.Server) string { return "--kubeconfig=" + srv.Kubeconfig() }

func newConfigMap(t *testing.T, c kubernetes.Interface, ns, name string, data map[string]string) *corev1.ConfigMap {
	t.Helper()
	cm, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: name, Labels: map[string]string{"app": "test"}},
		Data:       data,
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	return cm
}

// A scripted create, update and delete shows up as ADDED, MODIFIED and
// DELETED lines, in order, with the right keys and increasing
// resourceVersions; SIGINT then stops the watch cleanly with a summary.
func TestWatchJSON(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "seed", nil)

	p := start(t, nil, "watch", "configmaps", "-n", ns, "-o", "json", kubeconfigArg(srv))
	first := nextEvent(t, p)
	if first.Type != "ADDED" || first.Key != ns+"/seed" {
		t.Fatalf("first line: %+v, want ADDED %s/seed", first, ns)
	}
	last := rv(t, first)

	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps(ns)
	cm := newConfigMap(t, c, ns, "a", map[string]string{"v": "1"})
	cm.Data["v"] = "2"
	if _, err := cms.Update(ctx, cm, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	if err := cms.Delete(ctx, "a", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for _, want := range []struct{ typ, v string }{{"ADDED", "1"}, {"MODIFIED", "2"}, {"DELETED", "2"}} {
		l := nextEvent(t, p)
		if l.Type != want.typ || l.Key != ns+"/a" {
			t.Fatalf("got %s %s, want %s %s/a", l.Type, l.Key, want.typ, ns)
		}
		if n := rv(t, l); n <= last {
			t.Errorf("%s: resourceVersion %d, not above the previous %d", l.Type, n, last)
		} else {
			last = n
		}
		obj := unstructured.Unstructured{Object: l.Object}
		if v, _, _ := unstructured.NestedString(obj.Object, "data", "v"); v != want.v || obj.GetName() != "a" || obj.GetKind() != "ConfigMap" {
			t.Errorf("%s: object %v, want configmap a with data.v=%s", l.Type, l.Object, want.v)
		}
		if obj.GetResourceVersion() != l.ResourceVersion {
			t.Errorf("%s: line resourceVersion %s, object's %s", l.Type, l.ResourceVersion, obj.GetResourceVersion())
		}
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d after SIGINT, want 0; stderr:\n%s", code, p.stderr)
	}
	for _, l := range p.rest() {
		if decode(t, l).Type != "BOOKMARK" {
			t.Errorf("unexpected line after the script: %s", l)
		}
	}
	if s := p.stderr.String(); !regexp.MustCompile(`ADDED 2, MODIFIED 1, DELETED 1, BOOKMARK \d+, ERROR 0\n$`).MatchString(s) {
		t.Errorf("stderr %q: want a one-line summary with ADDED 2, MODIFIED 1, DELETED 1", s)
	}
}

// The table looks like kubectl get -w with an EVENT column; -A adds
// NAMESPACE; -l filters.
func TestWatchTable(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "one", nil)

	p := start(t, nil, "watch", "cm", "-A", "-l", "app=test", "--field-selector", "metadata.namespace="+ns, kubeconfigArg(srv))
	if h := strings.Fields(p.next(lineTimeout)); strings.Join(h, " ") != "EVENT NAMESPACE NAME AGE RESOURCEVERSION" {
		t.Fatalf("header %q", h)
	}
	if row := strings.Fields(p.next(lineTimeout)); len(row) != 5 || row[0] != "ADDED" || row[1] != ns || row[2] != "one" {
		t.Fatalf("row %q, want ADDED %s one AGE RV", row, ns)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(context.Background(), "one", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	if row := strings.Fields(p.next(lineTimeout)); len(row) != 5 || row[0] != "DELETED" || row[2] != "one" {
		t.Fatalf("row %q, want DELETED %s one AGE RV", row, ns)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
	}
	if rest := p.rest(); len(rest) != 0 {
		t.Errorf("unexpected rows %q", rest)
	}

	p = start(t, nil, "watch", "configmap", "-n", ns, kubeconfigArg(srv))
	newConfigMap(t, c, ns, "two", nil)
	if h := strings.Fields(p.next(lineTimeout)); strings.Join(h, " ") != "EVENT NAME AGE RESOURCEVERSION" {
		t.Fatalf("header without -A: %q", h)
	}
	if row := strings.Fields(p.next(lineTimeout)); len(row) != 4 || row[0] != "ADDED" || row[1] != "two" {
		t.Fatalf("row %q", row)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d, want 0; stderr:\n%s", code, p.stderr)
	}
}

// expectFirst runs watch with args and checks that the first event is
// ADDED for key, then stops it.
func expectFirst(t *testing.T, key string, env []string, args ...string) line {
	t.Helper()
	p := start(t, env, append([]string{"watch", "-o", "json"}, args...)...)
	l := nextEvent(t, p)
	if l.Type != "ADDED" || l.Key != key {
		t.Errorf("watch %q: first event %s %s, want ADDED %s", args, l.Type, l.Key, key)
	}
	if code := p.interrupt(); code != 0 {
		t.Errorf("watch %q: exit code %d after SIGINT; stderr:\n%s", args, code, p.stderr)
	}
	return l
}

// Resource names resolve through discovery like kubectl's.
func TestResolveConfigMaps(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	newConfigMap(t, kubernetes.NewForConfigOrDie(srv.Config()), ns, "probe", nil)
	for _, name := range []string{"cm", "configmaps", "configmap", "ConfigMap", "configmaps.", "configmaps.v1", "CM"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := expectFirst(t, ns+"/probe", nil, name, "-n", ns, kubeconfigArg(srv))
			if l.Object["kind"] != "ConfigMap" {
				t.Errorf("kind %v", l.Object["kind"])
			}
		})
	}
}

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// crd is a CustomResourceDefinition for a test.
type crd struct {
	group, version, plural, singular, kind string
	shortNames                             []string
	namespaced                             bool
}

func (c crd) gvr() schema.GroupVersionResource {
	return schema.GroupVersionResource{Group: c.group, Version: c.version, Resource: c.plural}
}

// create creates the CRD (deleted at the end of the test) and waits until
// discovery shows it.
func (c crd) create(t *testing.T, srv *testenv.Server) {
	t.Helper()
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	shortNames := []any{}
	for _, n := range c.shortNames {
		shortNames = append(shortNames, n)
	}
	scope := "Cluster"
	if c.namespaced {
		scope = "Namespaced"
	}
	obj := &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": c.plural + "." + c.group},
		"spec": map[string]any{
			"group": c.group,
			"scope": scope,
			"names": map[string]any{
				"plural": c.plural, "singular": c.singular, "kind": c.kind,
				"listKind": c.kind + "List", "shortNames": shortNames,
			},
			"versions": []any{map[string]any{
				"name": c.version, "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": map[string]any{
					"type": "object", "x-kubernetes-preserve-unknown-fields": true,
				}},
			}},
		},
	}}
	if _, err := dyn.Resource(crdGVR).Create(ctx, obj, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		// Wait until it is gone, so that the next test (-count) can make it
		// again. Its finalizer is the server's CRD controller's, which took
		// more than a minute once with three test suites on two cores.
		crds := dyn.Resource(crdGVR)
		_ = crds.Delete(context.Background(), obj.GetName(), metav1.DeleteOptions{})
		for deadline := time.Now().Add(3 * time.Minute); time.Now().Before(deadline); time.Sleep(100 * time.Millisecond) {
			if _, err := crds.Get(context.Background(), obj.GetName(), metav1.GetOptions{}); apierrors.IsNotFound(err) {
				return
			}
		}
		t.Errorf("CRD %s not deleted after 3 minutes", obj.GetName())
	})
	dc := discovery.NewDiscoveryClientForConfigOrDie(srv.Config())
	deadline := time.Now().Add(60 * time.Second)
	for {
		_, err := dc.ServerResourcesForGroupVersion(c.group + "/" + c.version)
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not served after 60s: %v", obj.GetName(), err)
		}
		time.Sleep(200 * time.Millisecond)
	}
}

// A CRD resolves by plural.group, plural, singular, short name and kind.
func TestResolveCRD(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ctx := context.Background()
	dyn := dynamic.NewForConfigOrDie(srv.Config())
	widgets := crd{group: "kinformer.example.com", version: "v1alpha1", plural: "widgets", singular: "widget",
		kind: "Widget", shortNames: []string{"wdg"}, namespaced: true}
	widgets.create(t, srv)

	// Wait until objects of the CRD can be created.
	ns := testenv.NewNamespace(t, srv.Config())
	deadline := time.Now().Add(60 * time.Second)
	for {
		w := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "kinformer.example.com/v1alpha1", "kind": "Widget",
			"metadata": map[string]any{"name": "w1"}, "spec": map[string]any{"size": 3},
		}}
		_, err := dyn.Resource(widgets.gvr()).Namespace(ns).Create(ctx, w, metav1.CreateOptions{})
		if err == nil {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD not served after 60s: %v", err)
		}
		time.Sleep(200 * time.Millisecond)
	}
	for _, name := range []string{"widgets.kinformer.example.com", "widgets", "widget", "wdg", "Widget", "widgets.v1alpha1.kinformer.example.com"} {
		t.Run(name, func(t *testing.T) {
			t.Parallel()
			l := expectFirst(t, ns+"/w1", nil, name, "-n", ns, kubeconfigArg(srv))
			if l.Object["kind"] != "Widget" {
				t.Errorf("kind %v", l.Object["kind"])
			}
		})
	}
}

// Failures exit with their documented code and a message naming the
// problem.
func TestWatchFailures(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	kc := kubeconfigArg(srv)

	// A kubeconfig whose server is a closed port.
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
	host := strings.TrimPrefix(srv.Host(), "https://")
	unreachable := filepath.Join(t.TempDir(), "kubeconfig")
	if err := os.WriteFile(unreachable, []byte(strings.ReplaceAll(string(data), host, closed)), 0o600); err != nil {
		t.Fatal(err)
	}
	home := t.TempDir() // no ~/.kube/config there

	tests := []struct {
		name string
		env  []string
		args []string
		code int
		msgs []string
	}{
		{"unknown resource", nil, []string{"nosuch", kc}, exitUnknown, []string{`unknown resource "nosuch"`}},
		{"unknown group", nil, []string{"configmaps.apps", kc}, exitUnknown, []string{`unknown resource "configmaps.apps"`}},
		{"bad label selector", nil, []string{"cm", "-l", "a=b=c", kc}, exitBadSelector, []string{"bad selector: "}},
		{"bad field selector", nil, []string{"cm", "--field-selector", "spec.nosuch=x", kc}, exitBadSelector, []string{"bad selector: ", "spec.nosuch"}},
		// (Not "connection refused": another process may take the closed port
		// meanwhile, as a second test suite on the machine once did.)
		{"unreachable", nil, []string{"cm", "--kubeconfig", unreachable}, exitUnreachable, []string{"cannot reach the cluster", closed}},
		{"missing kubeconfig", nil, []string{"cm", "--kubeconfig", filepath.Join(home, "nope")}, exitUnreachable, []string{"nope"}},
		{"no configuration", []string{"HOME=" + home, "KUBECONFIG=" + filepath.Join(home, "nope")}, []string{"cm"}, exitUnreachable, []string{"no configuration"}},
		{"forbidden namespace", nil, []string{"cm", "--context", "restricted", "-n", "default", kc}, exitForbidden,
			[]string{"forbidden: ", testenv.RestrictedUser, `resource "configmaps"`, `namespace "default"`}},
		{"forbidden cluster", nil, []string{"configmaps", "-A", "--context", "restricted", kc}, exitForbidden,
			[]string{"forbidden: ", testenv.RestrictedUser, "cluster scope"}},
		{"forbidden resource", nil, []string{"secrets", "--context", "restricted", kc}, exitForbidden,
			[]string{"forbidden: ", testenv.RestrictedUser, `"secrets"`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			t.Parallel()
			code, stdout, stderr := runCmd(t, tt.env, append([]string{"watch"}, tt.args...)...)
			if code != tt.code {
				t.Errorf("exit code %d, want %d; stderr:\n%s", code, tt.code, stderr)
			}
			for _, m := range tt.msgs {
				if !strings.Contains(stderr, m) {
					t.Errorf("stderr %q lacks %q", stderr, m)
				}
			}
			if strings.Contains(stderr, " events in ") {
				t.Errorf("stderr %q: no summary expected after a failure", stderr)
			}
			if stdout != "" {
				t.Errorf("stdout %q, want nothing", stdout)
			}
		})
	}
}

// The restricted user can watch where it is allowed; the namespace
// defaults to its kubeconfig context's ("allowed").
func TestRestrictedAllowed(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	name := fmt.Sprintf("restricted-%d", time.Now().UnixNano())
	newConfigMap(t, c, testenv.AllowedNamespace, name, nil)
	t.Cleanup(func() {
		_ = c.CoreV1().ConfigMaps(testenv.AllowedNamespace).Delete(context.Background(), name, metav1.DeleteOptions{})
	})
	expectFirstKeyIn(t, testenv.AllowedNamespace+"/"+name, "configmaps", "--context", "restricted", "-l", "app=test", kubeconfigArg(srv))
	// $KUBECONFIG works like --kubeconfig.
	expectFirstKeyIn(t, testenv.AllowedNamespace+"/"+name, "cm", "--context=restricted", "-n", testenv.AllowedNamespace, "-l", "app=test")
}

// expectFirstKeyIn is expectFirst, with KUBECONFIG set when no --kubeconfig
// is given.
func expectFirstKeyIn(t *testing.T, key string, args ...string) {
	t.Helper()
	var env []string
	if !strings.Contains(strings.Join(args, " "), "--kubeconfig") {
		env = []string{"KUBECONFIG=" + testenv.Shared(t).Kubeconfig()}
	}
	// Other tests' objects may come first: look for key among the
	// initial ADDED events.
	p := start(t, env, append([]string{"watch", "-o", "json"}, args...)...)
	for {
		l := nextEvent(t, p)
		if l.Type != "ADDED" {
			t.Fatalf("watch %q: %s %s before ADDED %s", args, l.Type, l.Key, key)
		}
		if l.Key == key {
			break
		}
	}
	if code := p.interrupt(); code != 0 {
		t.Errorf("watch %q: exit code %d; stderr:\n%s", args, code, p.stderr)
	}
}

// delete deletes c's CRD and waits until it is gone.
func (c crd) delete(t *testing.T, srv *testenv.Server) {
	t.Helper()
	crds := dynamic.NewForConfigOrDie(srv.Config()).Resource(crdGVR)
	name := c.plural + "." + c.group
	if err := crds.Delete(context.Background(), name, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(100 * time.Millisecond) {
		if _, err := crds.Get(context.Background(), name, metav1.GetOptions{}); apierrors.IsNotFound(err) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("CRD %s not deleted after 60s", name)
		}
	}
}

// createCR creates the object name of c in ns, waiting until c serves.
func (c crd) createCR(t *testing.T, srv *testenv.Server, ns, name string) {
	t.Helper()
	res := dynamic.NewForConfigOrDie(srv.Config()).Resource(c.gvr()).Namespace(ns)
	for deadline := time.Now().Add(60 * time.Second); ; time.Sleep(200 * time.Millisecond) {
		o := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": c.group + "/" + c.version, "kind": c.kind, "metadata": map[string]any{"name": name},
		}}
		_, err := res.Create(context.Background(), o, metav1.CreateOptions{})
		if err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("%s not served after 60s: %v", c.gvr(), err)
		}
	}
}

// A CRD deleted under watch says so on stderr, once, naming the resource
// and its definition gone, not only as DELETED lines (the CRD's deletion
// deletes its objects first; "cause":"gone" for those the watch missed)
// and an ERROR line for every attempt; deleted again after it came back,
// once more.
func TestWatchCRDDeletedSaysSo(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	gizmos := crd{group: "gone.kinformer.example.com", version: "v1", plural: "gizmos", singular: "gizmo", kind: "Gizmo", namespaced: true}
	gizmos.create(t, srv)
	gizmos.createCR(t, srv, ns, "g1")

	p := start(t, nil, "watch", "gizmos.gone.kinformer.example.com", "-n", ns, "-o", "json", kubeconfigArg(srv))
	if l := nextEvent(t, p); l.Type != "ADDED" || l.Key != ns+"/g1" {
		t.Fatalf("first event %s %s, want ADDED %s/g1", l.Type, l.Key, ns)
	}
	said := regexp.MustCompile(`(?m)^kinformer: the definition of gizmos\.gone\.kinformer\.example\.com was deleted; its objects are gone \(waiting for it to come back\)$`)
	// goneTwice deletes the CRD, and reads until its object's DELETED
	// and two ERROR lines of 404 have come: the line is said once for all
	// of them.
	goneTwice := func(key string, times int) {
		t.Helper()
		gizmos.delete(t, srv)
		deleted, errs := false, 0
		var read []string
		for deadline := time.Now().Add(90 * time.Second); !deleted || errs < 2; {
			if time.Now().After(deadline) {
				t.Fatalf("after the deletion, no DELETED %s and two ERROR lines (404) within 90s:\n%s\nstderr:\n%s", key, strings.Join(read, "\n"), p.stderr)
			}
			raw := p.next(90 * time.Second)
			read = append(read, raw)
			l := decode(t, raw)
			switch {
			case l.Type == "DELETED" && l.Key == key: // by the CRD's deletion ("cause":"gone" if the watch missed it)
				deleted = true
			case l.Type == "ERROR" && (strings.Contains(l.Error, "could not find") || strings.Contains(l.Error, "not found")):
				errs++
			}
		}
		if n := len(said.FindAllString(p.stderr.String(), -1)); n != times {
			t.Fatalf("after %d deletions, %d ERROR lines: the line said %d times, want %d; stderr:\n%s", times, errs, n, times, p.stderr)
		}
	}
	goneTwice(ns+"/g1", 1)

	// Back, then deleted again: said again.
	gizmos.create(t, srv)
	gizmos.createCR(t, srv, ns, "g2")
	for {
		if l := decode(t, p.next(90*time.Second)); l.Type == "ADDED" && l.Key == ns+"/g2" {
			break
		}
	}
	goneTwice(ns+"/g2", 2)
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
}
