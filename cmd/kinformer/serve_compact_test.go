package main

import (
	"context"
	"encoding/json"
	"net/url"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// serve --compact answers /objects exactly as serve without it: lists
// (by namespace and label), single objects as JSON and YAML, cluster-scoped
// ones, and a 404; after an update too. /stats says which caches are
// compact. With --state-dir, a restarted serve --compact answers the same.
func TestServeCompact(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	a := newConfigMap(t, c, ns, "a", map[string]string{"k": "v", "long": "some longer text\nover two lines"})
	if _, err := c.CoreV1().ConfigMaps(ns).Create(ctx, &corev1.ConfigMap{
		ObjectMeta: metav1.ObjectMeta{Name: "b", Labels: map[string]string{"tier": "web"}, Annotations: map[string]string{"note": "n"}},
		BinaryData: map[string][]byte{"bin": {0, 1, 2, 255}},
	}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	args := []string{"cm", "namespaces", "-n", ns, kubeconfigArg(srv)}
	_, plain := startServe(t, args...)
	dir := t.TempDir()
	compactArgs := append([]string{"--compact", "--state-dir", dir}, args...)
	p, compact := startServe(t, compactArgs...)
	waitReady(t, plain)
	waitReady(t, compact)

	for base, want := range map[string]bool{plain: false, compact: true} {
		var stats struct {
			Resources []struct {
				Name    string `json:"name"`
				Compact bool   `json:"compact"`
			} `json:"resources"`
		}
		getJSON(t, base+"stats", 200, &stats)
		if len(stats.Resources) != 2 {
			t.Fatalf("%sstats: %+v", base, stats)
		}
		for _, r := range stats.Resources {
			if r.Compact != want {
				t.Errorf("%sstats: %s compact %v, want %v", base, r.Name, r.Compact, want)
			}
		}
	}

	paths := []string{
		"objects?resource=configmaps&namespace=" + ns,
		"objects?resource=cm&label=" + url.QueryEscape("tier in (web,db)"),
		"objects?resource=configmaps&label=app%3Dtest",
		"objects/configmaps/" + ns + "/a",
		"objects/configmaps/" + ns + "/a?format=yaml",
		"objects/cm/" + ns + "/b",
		"objects/namespaces/" + ns,
		"objects/configmaps/" + ns + "/nope",
	}
	same := func(what string) {
		t.Helper()
		for _, path := range paths {
			code, body := get(t, plain+path)
			ccode, cbody := get(t, compact+path)
			if code != ccode || !sameAnswer(body, cbody) {
				t.Errorf("%s: /%s:\nwithout --compact: %d %s\nwith --compact:    %d %s", what, path, code, body, ccode, cbody)
			}
		}
	}
	same("synced")

	a.Data["k"] = "w"
	if _, err := c.CoreV1().ConfigMaps(ns).Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	updated := func(base string) {
		t.Helper()
		deadline := time.Now().Add(30 * time.Second)
		for {
			var obj map[string]any
			getJSON(t, base+"objects/configmaps/"+ns+"/a", 200, &obj)
			if obj["data"].(map[string]any)["k"] == "w" {
				return
			}
			if time.Now().After(deadline) {
				t.Fatalf("%s: the update of a was not served after 30s: %v", base, obj)
			}
			time.Sleep(20 * time.Millisecond)
		}
	}
	updated(plain)
	updated(compact)
	same("after an update")

	// Restarted from its state file (the same bytes), while b was deleted.
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if err := c.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	p, compact = startServe(t, compactArgs...)
	waitReady(t, compact)
	deadline := time.Now().Add(30 * time.Second)
	for {
		code, _ := get(t, plain+"objects/configmaps/"+ns+"/b")
		if code == 404 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatal("the deletion of b was not served after 30s")
		}
		time.Sleep(20 * time.Millisecond)
	}
	same("restarted from the state file")
	if got, want := restartEvents(t, compact), []string{"ADDED restore a", "ADDED restore b", "DELETED watch b"}; !slices.Equal(got, want) {
		t.Errorf("/events/recent after the restart: %q, want %q", got, want)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), "warning") {
		t.Errorf("stderr %s", p.stderr)
	}
}

// sameAnswer reports whether two /objects answers are the same, but for a
// list's resourceVersion (the last each informer saw, which bookmarks
// move apart): byte for byte otherwise.
func sameAnswer(a, b string) bool {
	if a == b {
		return true
	}
	var la, lb map[string]any
	if json.Unmarshal([]byte(a), &la) != nil || json.Unmarshal([]byte(b), &lb) != nil {
		return false
	}
	if _, ok := la["items"]; !ok {
		return false
	}
	delete(la, "resourceVersion")
	delete(lb, "resourceVersion")
	return reflect.DeepEqual(la, lb)
}
