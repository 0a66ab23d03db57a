package main

import (
	"strings"
	"testing"

	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// watch --fields against the real server: each object printed holds only
// the fields asked for and what names it; a path the type does not have
// is a usage error at once, naming it.
func TestWatchFields(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "a", map[string]string{"big": strings.Repeat("x", 100), "v": "1"})

	p := start(t, nil, "watch", "configmaps", "-n", ns, "-o", "json", "--fields", "metadata.labels,data", kubeconfigArg(srv))
	l := nextEvent(t, p)
	if l.Type != "ADDED" || l.Key != ns+"/a" {
		t.Fatalf("first line %+v", l)
	}
	meta, _ := l.Object["metadata"].(map[string]any)
	var keys []string
	for k := range meta {
		keys = append(keys, k)
	}
	if _, ok := meta["creationTimestamp"]; ok || meta["name"] != "a" || meta["uid"] == nil || l.Object["data"] == nil {
		t.Fatalf("object %v, want name, namespace, uid, resourceVersion and data only (metadata has %v)", l.Object, keys)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr %s", code, p.stderr)
	}

	code, _, stderr := runCmd(t, nil, "watch", "pods", "-n", ns, "--fields", "spec.nodename", kubeconfigArg(srv))
	if code != exitUsage || !strings.Contains(stderr, `"nodename"`) {
		t.Fatalf("bad path: exit %d, stderr %q; want %d naming it", code, stderr, exitUsage)
	}
}

// serve --fields, compact or not, serves the projected objects.
func TestServeFields(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "a", map[string]string{"k": "v"})
	for _, extra := range [][]string{nil, {"--compact"}} {
		_, base := startServe(t, append(extra, "configmaps", "-n", ns, "--fields", "data", kubeconfigArg(srv))...)
		waitReady(t, base)
		var obj map[string]any
		getJSON(t, base+"objects/configmaps/"+ns+"/a", 200, &obj)
		meta, _ := obj["metadata"].(map[string]any)
		if _, ok := meta["creationTimestamp"]; ok || meta["name"] != "a" || obj["data"] == nil || obj["kind"] != "ConfigMap" {
			t.Fatalf("serve %v --fields data: %v", extra, obj)
		}
	}
}
