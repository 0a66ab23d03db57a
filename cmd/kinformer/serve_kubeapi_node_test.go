package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// jsClientVersion is the JavaScript client the test installs from npm
// (its 1.x line runs on Debian's Node.js 20; 2.x needs 22).
const jsClientVersion = "1.3.0"

// needJSClient returns node and a directory where testdata/kubeapi's
// scripts find @kubernetes/client-node: installed with npm into the user's
// cache once. Without node and npm the test is skipped, or fails if CI is
// set (.ci/run installs them).
func needJSClient(t *testing.T) (node, dir string) {
	t.Helper()
	node, errNode := exec.LookPath("node")
	npm, errNPM := exec.LookPath("npm")
	if errNode != nil || errNPM != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("node or npm is not installed (CI is set: install Debian's nodejs and npm packages)")
		}
		t.Skip("node or npm is not installed (apt-get install nodejs npm); set CI to make this a failure")
	}
	cache, err := os.UserCacheDir()
	if err != nil {
		t.Fatal(err)
	}
	dir = filepath.Join(cache, "kinformer-npm", "client-node-"+jsClientVersion)
	if _, err := os.Stat(filepath.Join(dir, "node_modules", "@kubernetes", "client-node", "package.json")); err != nil {
		tmp := fmt.Sprintf("%s.tmp-%d", dir, os.Getpid())
		if err := os.MkdirAll(tmp, 0o755); err != nil {
			t.Fatal(err)
		}
		defer os.RemoveAll(tmp)
		if err := os.WriteFile(filepath.Join(tmp, "package.json"), []byte(`{"private":true,"type":"module"}`+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		defer cancel()
		cmd := exec.CommandContext(ctx, npm, "install", "--no-audit", "--no-fund", "--prefix", tmp, "@kubernetes/client-node@"+jsClientVersion)
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Fatalf("npm install @kubernetes/client-node@%s: %v\n%s", jsClientVersion, err, out)
		}
		if err := os.Rename(tmp, dir); err != nil && !os.IsExist(err) {
			if _, statErr := os.Stat(dir); statErr != nil {
				t.Fatal(err)
			}
		}
	}
	return node, dir
}

// The JavaScript client's informer (@kubernetes/client-node's
// makeInformer, from npm) syncs through serve --kube-api and follows a
// create, an update and a delete made on the API server.
func TestServeKubeAPIJavaScriptInformer(t *testing.T) {
	t.Parallel()
	node, dir := needJSClient(t)
	script, err := os.ReadFile(filepath.Join("testdata", "kubeapi", "informer.mjs"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, fmt.Sprintf("informer-%d.mjs", os.Getpid()))
	if err := os.WriteFile(path, script, 0o644); err != nil {
		t.Fatal(err)
	}
	defer os.Remove(path)

	ns, base, change := serveAB(t)

	type line struct{ Type, Name, Error string }
	nextLine := clientLines(t, "the JavaScript informer", exec.Command(node, path, strings.TrimSuffix(base, "/"), ns), dir)
	// next returns the next event, failing on an error event.
	next := func(what string) line {
		t.Helper()
		var l line
		nextLine(what, &l)
		if l.Type == "error" {
			t.Fatalf("%s: the JavaScript informer's error: %s", what, l.Error)
		}
		return l
	}
	added := map[string]bool{}
	for l := next("sync"); l.Type != "synced"; l = next("sync") {
		if l.Type == "add" {
			added[l.Name] = true
		}
	}
	if !added["a"] || !added["b"] {
		t.Fatalf("synced with %v, want a and b", added)
	}
	change()
	want := map[string]string{"c": "add", "a": "update", "b": "delete"}
	got := map[string]string{}
	for len(got) < len(want) {
		l := next(fmt.Sprintf("the changes (so far %v)", got))
		if want[l.Name] == l.Type {
			got[l.Name] = l.Type
		}
	}
}

// needPythonClient returns a Python that imports the Kubernetes client
// (Debian's python3-kubernetes, for /usr/bin/python3). Without it the test
// is skipped, or fails if CI is set (.ci/run installs it).
func needPythonClient(t *testing.T) string {
	t.Helper()
	for _, py := range []string{"/usr/bin/python3", "python3"} {
		if exec.Command(py, "-c", "import kubernetes").Run() == nil {
			return py
		}
	}
	if os.Getenv("CI") != "" {
		t.Fatal("no python3 with the kubernetes client (CI is set: install Debian's python3-kubernetes package)")
	}
	t.Skip("no python3 with the kubernetes client (apt-get install python3-kubernetes); set CI to make this a failure")
	return ""
}

// The Kubernetes Python client lists through serve --kube-api and
// watches from the list's resourceVersion: it sees a create, an update
// and a delete made on the API server.
func TestServeKubeAPIPythonWatch(t *testing.T) {
	t.Parallel()
	py := needPythonClient(t)
	ns, base, change := serveAB(t)

	type line struct {
		Type, Name string
		Names      []string
	}
	nextLine := clientLines(t, "the Python watch", exec.Command(py, filepath.Join("testdata", "kubeapi", "watch.py"), strings.TrimSuffix(base, "/"), ns), "")
	next := func(what string) line {
		t.Helper()
		var l line
		nextLine(what, &l)
		return l
	}
	if l := next("the list"); l.Type != "listed" || strings.Join(l.Names, ",") != "a,b" {
		t.Fatalf("listed %+v, want a and b", l)
	}
	change()
	want := []string{"ADDED c", "MODIFIED a", "DELETED b"}
	var got []string
	for len(got) < len(want) {
		l := next(fmt.Sprintf("the changes (so far %v)", got))
		got = append(got, l.Type+" "+l.Name)
	}
	if strings.Join(got, ",") != strings.Join(want, ",") {
		t.Errorf("the Python watch saw %v, want %v", got, want)
	}
}

// clientLines runs cmd (a client of another language, in dir if not "")
// until the test ends, and returns what reads its next line of JSON into
// v, failing the test if it exits or says nothing for 60 s (what says
// what was awaited).
func clientLines(t *testing.T, who string, cmd *exec.Cmd, dir string) func(what string, v any) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	run := exec.CommandContext(ctx, cmd.Path, cmd.Args[1:]...)
	run.Dir = dir
	stdout, err := run.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr syncBuffer
	run.Stderr = &stderr
	if err := run.Start(); err != nil {
		t.Fatal(err)
	}
	lines := make(chan []byte, 100)
	var wg sync.WaitGroup
	wg.Go(func() {
		defer close(lines)
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			lines <- append([]byte(nil), sc.Bytes()...)
		}
	})
	t.Cleanup(func() {
		cancel()
		wg.Wait()
		_ = run.Wait()
	})
	return func(what string, v any) {
		t.Helper()
		for {
			select {
			case l, ok := <-lines:
				if !ok {
					t.Fatalf("%s: %s exited; stderr:\n%s", what, who, stderr.String())
				}
				if json.Unmarshal(l, v) == nil {
					return
				}
			case <-time.After(60 * time.Second):
				t.Fatalf("%s: nothing from %s after 60 s; stderr:\n%s", what, who, stderr.String())
			}
		}
	}
}

// serveAB makes ConfigMaps a and b in a new namespace and serves them
// with --kube-api; change, on the API server, creates c, updates a and
// deletes b.
func serveAB(t *testing.T) (ns, base string, change func()) {
	t.Helper()
	srv := testenv.Shared(t)
	ns = testenv.NewNamespace(t, srv.Config())
	real := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	for _, n := range []string{"a", "b"} {
		newConfigMap(t, real, ns, n, nil)
	}
	_, base = startServe(t, "configmaps", "-n", ns, "--kube-api", kubeconfigArg(srv))
	waitReady(t, base)
	return ns, base, func() {
		t.Helper()
		newConfigMap(t, real, ns, "c", nil)
		if _, err := real.CoreV1().ConfigMaps(ns).Update(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "a", Namespace: ns}, Data: map[string]string{"k": "v"}}, metav1.UpdateOptions{}); err != nil {
			t.Fatal(err)
		}
		if err := real.CoreV1().ConfigMaps(ns).Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
			t.Fatal(err)
		}
	}
}
