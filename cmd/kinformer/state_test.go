package main

import (
	"bytes"
	"context"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"runtime"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/kinformertest"
)

// stateFiles returns the state files in dir.
func stateFiles(t *testing.T, dir string) []string {
	t.Helper()
	files, err := filepath.Glob(filepath.Join(dir, "*.kinformer"))
	if err != nil {
		t.Fatal(err)
	}
	return files
}

// waitStderr waits until p's stderr matches re.
func waitStderr(t *testing.T, p *proc, re *regexp.Regexp) string {
	t.Helper()
	deadline := time.Now().Add(lineTimeout)
	for {
		s := p.stderr.String()
		if re.MatchString(s) {
			return s
		}
		if time.Now().After(deadline) {
			t.Fatalf("stderr does not match %s after %v:\n%s", re, lineTimeout, s)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// watch --state-dir, stopped and started again: the objects as they were
// (ADDED, "cause":"restore"), then exactly what changed while it was not
// running, in the server's order; then in the table, RESTORED rows.
func TestWatchStateDir(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps(ns)
	keep := newConfigMap(t, c, ns, "keep", map[string]string{"v": "1"})
	newConfigMap(t, c, ns, "gone", nil)
	dir := t.TempDir()
	args := []string{"watch", "configmaps", "-n", ns, "--state-dir", dir, kubeconfigArg(srv)}

	// The first run lists: plain ADDED lines.
	p := start(t, nil, append(args, "-o", "json")...)
	var got []string
	for range 2 {
		l := nextEvent(t, p)
		if l.Type != "ADDED" || l.Cause != "" {
			t.Fatalf("first run: %s %s cause %q, want ADDED without a cause", l.Type, l.Key, l.Cause)
		}
		got = append(got, l.Key)
	}
	slices.Sort(got)
	if want := []string{ns + "/gone", ns + "/keep"}; !slices.Equal(got, want) {
		t.Fatalf("first run: %q, want %q", got, want)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("first run: exit %d; stderr:\n%s", code, p.stderr)
	}
	if s := p.stderr.String(); strings.Contains(s, "warning") || strings.Contains(s, "restored") {
		t.Errorf("first run: stderr %s", s)
	}
	files := stateFiles(t, dir)
	if len(files) != 1 || !strings.HasPrefix(filepath.Base(files[0]), "configmaps-") {
		t.Fatalf("state files %q, want one configmaps-….kinformer", files)
	}

	// While it is not running: a delete, a create, an update.
	if err := cms.Delete(ctx, "gone", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newConfigMap(t, c, ns, "new", nil)
	keep.Data["v"] = "2"
	if _, err := cms.Update(ctx, keep, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	p = start(t, nil, append(args, "-o", "json")...)
	got = nil
	var restoredRV string
	for range 2 {
		l := nextEvent(t, p)
		if l.Type != "ADDED" || l.Cause != "restore" {
			t.Fatalf("second run: %s %s cause %q, want ADDED with cause restore", l.Type, l.Key, l.Cause)
		}
		if l.Key == ns+"/keep" {
			if v, _, _ := unstructured.NestedString(l.Object, "data", "v"); v != "1" {
				t.Errorf("restored keep has v=%q, want the state it had: 1", v)
			}
		}
		restoredRV = l.ResourceVersion
		got = append(got, l.Key)
	}
	slices.Sort(got)
	if want := []string{ns + "/gone", ns + "/keep"}; !slices.Equal(got, want) {
		t.Fatalf("restored %q, want %q", got, want)
	}
	last := rv(t, line{ResourceVersion: restoredRV})
	for _, want := range []struct{ typ, name string }{{"DELETED", "gone"}, {"ADDED", "new"}, {"MODIFIED", "keep"}} {
		l := nextEvent(t, p)
		if l.Type != want.typ || l.Key != ns+"/"+want.name || l.Cause != "" {
			t.Fatalf("after the restore: %s %s cause %q, want %s %s/%s", l.Type, l.Key, l.Cause, want.typ, ns, want.name)
		}
		if n := rv(t, l); n <= last {
			t.Errorf("%s %s: resourceVersion %d, not above %d", l.Type, l.Key, n, last)
		} else {
			last = n
		}
	}
	// The restore says so on stderr, once caught up: how many, from where
	// (the file, at the restored version), caught up in how long.
	said := regexp.MustCompile(`(?m)^kinformer: restored 2 configmaps from ` + regexp.QuoteMeta(files[0]) + ` \(rv ` + restoredRV + `\), caught up in [0-9.]+m?s$`)
	waitStderr(t, p, said)
	if code := p.interrupt(); code != 0 {
		t.Fatalf("second run: exit %d; stderr:\n%s", code, p.stderr)
	}
	for _, l := range p.rest() {
		if decode(t, l).Type != "BOOKMARK" {
			t.Errorf("second run: unexpected line %s", l)
		}
	}
	if s := p.stderr.String(); !regexp.MustCompile(`ADDED 3 \(2 restored\), MODIFIED 1, DELETED 1, BOOKMARK \d+, ERROR 0\n$`).MatchString(s) {
		t.Errorf("second run: stderr %q, want a summary with ADDED 3 (2 restored)", s)
	}
	if s := p.stderr.String(); len(said.FindAllString(s, -1)) != 1 || strings.Count(s, "restored 2") != 1 {
		t.Errorf("second run: stderr %q, want one line matching %s", s, said)
	}

	// The table: RESTORED rows, then nothing (nothing changed).
	p = start(t, nil, args...)
	if h := strings.Join(strings.Fields(p.next(lineTimeout)), " "); h != "EVENT NAME AGE RESOURCEVERSION" {
		t.Fatalf("header %q", h)
	}
	got = nil
	for range 2 {
		row := strings.Fields(p.next(lineTimeout))
		if len(row) != 4 || row[0] != "RESTORED" {
			t.Fatalf("row %q, want RESTORED NAME AGE RV", row)
		}
		got = append(got, row[1])
	}
	slices.Sort(got)
	if want := []string{"keep", "new"}; !slices.Equal(got, want) {
		t.Errorf("restored rows %q, want %q", got, want)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("third run: exit %d; stderr:\n%s", code, p.stderr)
	}
	if rest := p.rest(); len(rest) != 0 {
		t.Errorf("third run: unexpected rows %q", rest)
	}
}

// A state file that cannot be used (garbage) is a warning on stderr that
// names it; the watch lists as without the flag, and the next run restores
// from the file written instead.
func TestWatchStateDirBadFile(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "a", nil)
	dir := t.TempDir()
	args := []string{"watch", "cm", "-n", ns, "--state-dir", dir, kubeconfigArg(srv)}
	expectFirst(t, ns+"/a", nil, append(args[1:], "-o", "json")...)
	files := stateFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("state files %q, want one", files)
	}
	garbage := []byte(strings.Repeat("not a bbolt file\x00\xff", 512))
	if err := os.WriteFile(files[0], garbage, 0o600); err != nil {
		t.Fatal(err)
	}

	p := start(t, nil, args...)
	p.next(lineTimeout) // the header
	if row := strings.Fields(p.next(lineTimeout)); len(row) != 4 || row[0] != "ADDED" || row[1] != "a" {
		t.Fatalf("row %q, want ADDED a: listed, not restored", row)
	}
	stderr := waitStderr(t, p, regexp.MustCompile(`warning: .*`+regexp.QuoteMeta(filepath.Base(files[0]))))
	if !strings.Contains(stderr, "state snapshot unusable") || !strings.Contains(stderr, "set aside") || strings.Contains(stderr, "retrying") {
		t.Errorf("stderr %q: want a warning that the state file is unusable and set aside", stderr)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if _, err := os.Stat(files[0] + ".bad"); err != nil {
		t.Errorf("the bad file was not set aside: %v", err)
	}
	// The file set aside is reported by every process that opens the
	// directory, until pruned.
	if code, stdout, stderr := runCmd(t, nil, "state", "prune", "--state-dir", dir); code != 0 || !strings.Contains(stdout, filepath.Base(files[0])+".bad") {
		t.Fatalf("state prune: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}

	// The file written instead restores.
	p = start(t, nil, append(args, "-o", "json")...)
	if l := nextEvent(t, p); l.Type != "ADDED" || l.Key != ns+"/a" || l.Cause != "restore" {
		t.Errorf("after the bad file: %s %s cause %q, want ADDED %s/a restored", l.Type, l.Key, l.Cause, ns)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), "warning") {
		t.Errorf("stderr %s", p.stderr)
	}
}

// A restarted serve --state-dir answers /objects with what the server
// has, after the restored objects and the changes made while it was down
// (as the feed shows); a garbage file is a warning and serve still works.
func TestServeStateDir(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	ctx := context.Background()
	cms := c.CoreV1().ConfigMaps(ns)
	a := newConfigMap(t, c, ns, "a", map[string]string{"v": "1"})
	newConfigMap(t, c, ns, "b", nil)
	dir := t.TempDir()
	args := []string{"cm", "-n", ns, "--state-dir", dir, kubeconfigArg(srv)}

	p, base := startServe(t, args...)
	waitReady(t, base)
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}

	if err := cms.Delete(ctx, "b", metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	newConfigMap(t, c, ns, "c", nil)
	a.Data["v"] = "2"
	if _, err := cms.Update(ctx, a, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}

	p, base = startServe(t, args...)
	waitReady(t, base)
	var l listResponse
	getJSON(t, base+"objects?resource=configmaps", 200, &l)
	if got := names(l); !slices.Equal(got, []string{"a", "c"}) || l.Count != 2 {
		t.Errorf("/objects after the restart: %q, want [a c]", got)
	} else if v := l.Items[0]["data"].(map[string]any)["v"]; v != "2" {
		t.Errorf("/objects after the restart: a has v=%v, want 2", v)
	}
	if got, want := restartEvents(t, base), []string{"ADDED restore a", "ADDED restore b", "DELETED watch b", "ADDED watch c", "MODIFIED watch a"}; !slices.Equal(got, want) {
		t.Errorf("/events/recent after the restart: %q, want %q", got, want)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
	if strings.Contains(p.stderr.String(), "warning") {
		t.Errorf("stderr %s", p.stderr)
	}
	files := stateFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("state files %q, want one", files)
	}
	said := regexp.MustCompile(`(?m)^kinformer: restored 2 configmaps from ` + regexp.QuoteMeta(files[0]) + ` \(rv \d+\), caught up in [0-9.]+m?s$`)
	if s := p.stderr.String(); len(said.FindAllString(s, -1)) != 1 {
		t.Errorf("stderr %q, want one line matching %s", s, said)
	}

	// Garbage in the file: a warning, and serve lists instead.
	if err := os.WriteFile(files[0], []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	p, base = startServe(t, args...)
	waitReady(t, base)
	getJSON(t, base+"objects?resource=configmaps", 200, &l)
	if got := names(l); !slices.Equal(got, []string{"a", "c"}) {
		t.Errorf("/objects after a bad file: %q, want [a c]", got)
	}
	stderr := waitStderr(t, p, regexp.MustCompile(`warning: state snapshot unusable: .*`+regexp.QuoteMeta(filepath.Base(files[0]))))
	if !strings.Contains(stderr, "set aside") || strings.Contains(stderr, "restored") {
		t.Errorf("stderr %q: want the file set aside, nothing restored", stderr)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
}

// gatedWatch holds every watch until open is closed.
type gatedWatch struct {
	*kinformertest.Server[*unstructured.Unstructured]
	open chan struct{}
}

func (g *gatedWatch) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	select {
	case <-g.open:
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	return g.Server.Watch(ctx, opts)
}

// A restored serve serves the restored objects at once, and /readyz says
// it is not ready until the informer has caught up with the server.
func TestServeRestoredNotReady(t *testing.T) {
	t.Parallel()
	cm := func(name, v string) *unstructured.Unstructured {
		o := &unstructured.Unstructured{}
		o.SetAPIVersion("v1")
		o.SetKind("ConfigMap")
		o.SetNamespace("ns")
		o.SetName(name)
		_ = unstructured.SetNestedField(o.Object, v, "data", "v")
		return o
	}
	fake := kinformertest.NewServer(cm("a", "1"), cm("b", "1"))
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	dir := t.TempDir()
	opts := func(s *server) *kinformer.Options[*unstructured.Unstructured] {
		return &kinformer.Options[*unstructured.Unstructured]{
			Name: res.String(), Metrics: s.metrics, StateDir: dir, StateKey: "fake " + res.gvr.String() + " all-namespaces",
		}
	}

	// A first informer syncs and writes the file.
	s := mustNewServer(t, 8, 16)
	inf := kinformer.New[*unstructured.Unstructured](fake, opts(s))
	s.add("cm", res, "", inf)
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { _ = inf.Run(ctx) })
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	if _, err := fake.Update(cm("a", "2")); err != nil {
		t.Fatal(err)
	}

	// A second one restores, and cannot watch yet.
	gated := &gatedWatch{Server: fake, open: make(chan struct{})}
	s = mustNewServer(t, 8, 16)
	inf = kinformer.New[*unstructured.Unstructured](gated, opts(s))
	s.add("cm", res, "", inf)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	ctx, cancel = context.WithCancel(context.Background())
	t.Cleanup(func() { cancel(); wg.Wait() })
	wg.Go(func() { _ = inf.Run(ctx) })

	deadline := time.Now().Add(10 * time.Second)
	for {
		var l listResponse
		getJSON(t, hs.URL+"/objects?resource=configmaps", 200, &l)
		if slices.Equal(names(l), []string{"a", "b"}) {
			if v := l.Items[0]["data"].(map[string]any)["v"]; v != "1" {
				t.Errorf("restored a has v=%v, want 1", v)
			}
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/objects: %+v, want the restored a and b", l)
		}
		time.Sleep(10 * time.Millisecond)
	}
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := get(t, hs.URL+"/readyz")
		if code != 503 || !onlyNotSynced(body) {
			t.Fatalf("/readyz while catching up: %d %q, want 503 not synced", code, body)
		}
		if body == "configmaps: not synced: restored, catching up\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz while catching up: %q", body)
		}
	}

	close(gated.open)
	for deadline := time.Now().Add(10 * time.Second); ; time.Sleep(10 * time.Millisecond) {
		code, body := get(t, hs.URL+"/readyz")
		if code == 200 && body == "ok\n" {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/readyz after the watch opened: %d %q", code, body)
		}
	}
	var obj map[string]any
	getJSON(t, hs.URL+"/objects/configmaps/ns/a", 200, &obj)
	if v := obj["data"].(map[string]any)["v"]; v != "2" {
		t.Errorf("a after catching up: v=%v, want 2", v)
	}
}

// Two users never share a state file: the key says whom the config acts as
// (impersonation, a hash of the credentials), and no secret.
func TestStateKeyNamesTheUser(t *testing.T) {
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "secrets"}}
	base := &rest.Config{Host: "https://k8s.example", BearerToken: "s3cret-token"}
	keys := map[string]string{}
	for name, cfg := range map[string]*rest.Config{
		"token":       base,
		"other token": {Host: base.Host, BearerToken: "another"},
		"impersonate": {Host: base.Host, BearerToken: base.BearerToken, Impersonate: rest.ImpersonationConfig{UserName: "bob"}},
		"cert":        {Host: base.Host, TLSClientConfig: rest.TLSClientConfig{CertData: []byte("cert")}},
	} {
		k := stateKey(cfg, res, "default")
		if strings.Contains(k, "s3cret") {
			t.Fatalf("%s: the key %q holds the token", name, k)
		}
		for other, ok := range keys {
			if ok == k {
				t.Fatalf("%s and %s share the key %q", name, other, k)
			}
		}
		keys[name] = k
	}
	if stateKey(base, res, "default") != keys["token"] {
		t.Fatal("the key of one config changes between calls")
	}
}

// restartEvents renders /events/recent of configmaps as "TYPE CAUSE
// name" lines, the first two (two objects restored from the state file,
// in no particular order) sorted.
func restartEvents(t *testing.T, base string) []string {
	t.Helper()
	var recent struct{ Events []feedEvent }
	getJSON(t, base+"events/recent?resource=cm", 200, &recent)
	var got []string
	for _, e := range recent.Events {
		got = append(got, string(e.Type)+" "+e.Cause+" "+e.Name)
	}
	if len(got) >= 2 {
		slices.Sort(got[:2])
	}
	return got
}

// --state-dir refuses a directory that is not private, or whose key file
// is not, at once: a usage error naming the directory, the problem and
// the fix, before anything is read from it or sent to the server.
func TestStateDirRefused(t *testing.T) {
	t.Parallel()
	nowhere := "--kubeconfig=" + filepath.Join(t.TempDir(), "none")
	for _, tc := range []struct {
		name  string
		setup func(t *testing.T, dir string)
		root  bool // needs root (chown)
		want  []string
	}{
		{"world-writable", func(t *testing.T, dir string) { chmod(t, dir, 0o777) }, false, []string{"may write", "chmod 700"}},
		{"group-writable", func(t *testing.T, dir string) { chmod(t, dir, 0o770) }, false, []string{"may write", "chmod 700"}},
		{"another user's", func(t *testing.T, dir string) { chown(t, dir, 65534) }, true, []string{"owned by uid 65534"}},
		{"key file a symbolic link", func(t *testing.T, dir string) {
			target := filepath.Join(t.TempDir(), "elsewhere")
			if err := os.Symlink(target, filepath.Join(dir, "kinformer.key")); err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				if _, err := os.Lstat(target); err == nil {
					t.Errorf("the key's symbolic link was followed: %s exists", target)
				}
			})
		}, false, []string{"symbolic link", "kinformer.key"}},
		{"key file another user's", func(t *testing.T, dir string) {
			key := filepath.Join(dir, "kinformer.key")
			if err := os.WriteFile(key, make([]byte, 32), 0o600); err != nil {
				t.Fatal(err)
			}
			chown(t, key, 65534)
		}, true, []string{"owned by uid 65534", "kinformer.key"}},
		{"key file readable by others", func(t *testing.T, dir string) {
			if err := os.WriteFile(filepath.Join(dir, "kinformer.key"), make([]byte, 32), 0o644); err != nil {
				t.Fatal(err)
			}
		}, false, []string{"chmod 600"}},
	} {
		for _, cmd := range []string{"watch", "serve"} {
			t.Run(tc.name+"/"+cmd, func(t *testing.T) {
				t.Parallel()
				if tc.root && os.Geteuid() != 0 {
					t.Skip("needs root, to give a file away")
				}
				dir := filepath.Join(t.TempDir(), "state")
				if err := os.Mkdir(dir, 0o700); err != nil {
					t.Fatal(err)
				}
				tc.setup(t, dir)
				code, stdout, stderr := runCmd(t, nil, cmd, "cm", "--state-dir", dir, nowhere)
				if code != exitUsage {
					t.Errorf("exit code %d, want %d (usage); stderr:\n%s", code, exitUsage, stderr)
				}
				for _, m := range append([]string{"state directory refused", dir}, tc.want...) {
					if !strings.Contains(stderr, m) {
						t.Errorf("stderr %q lacks %q", stderr, m)
					}
				}
				if stdout != "" {
					t.Errorf("stdout %q, want nothing", stdout)
				}
				if f := stateFiles(t, dir); len(f) != 0 {
					t.Errorf("state files %q in a refused directory", f)
				}
			})
		}
	}
}

func chmod(t *testing.T, path string, mode os.FileMode) {
	t.Helper()
	if err := os.Chmod(path, mode); err != nil {
		t.Fatal(err)
	}
}

func chown(t *testing.T, path string, uid int) {
	t.Helper()
	if err := os.Chown(path, uid, -1); err != nil {
		t.Fatal(err)
	}
}

// A state file's name is keyed with its directory's own key (made 0600
// on first use): the same watch, as the same user, in two directories has
// two names, so a name cannot be checked offline against a guessed token.
func TestStateFileNameKeyed(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	newConfigMap(t, kubernetes.NewForConfigOrDie(srv.Config()), ns, "a", nil)
	var names []string
	for range 2 {
		dir := filepath.Join(t.TempDir(), "not-yet")
		expectFirst(t, ns+"/a", nil, "cm", "-n", ns, "--state-dir", dir, kubeconfigArg(srv))
		files := stateFiles(t, dir)
		if len(files) != 1 {
			t.Fatalf("state files %q, want one", files)
		}
		names = append(names, filepath.Base(files[0]))
		for path, want := range map[string]os.FileMode{dir: 0o700, files[0]: 0o600, filepath.Join(dir, "kinformer.key"): 0o600} {
			fi, err := os.Lstat(path)
			if err != nil {
				t.Fatal(err)
			}
			if fi.Mode().Perm() != want {
				t.Errorf("%s: mode %04o, want %04o", path, fi.Mode().Perm(), want)
			}
		}
	}
	if names[0] == names[1] {
		t.Fatalf("one watch has the name %s in two state directories: the name is not keyed", names[0])
	}
}

// Secrets and --state-key-file, against the real server: without keys a
// watch of Secrets keeps no state file; with a key file the file holds no
// byte of the Secret's value and the next run restores it; the keys may
// come from $KINFORMER_STATE_KEY instead; a key file that cannot be used is
// a usage error.
func TestWatchStateKeyFile(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	const value = "p4ssw0rd-only-in-this-secret-3b9e"
	if _, err := c.CoreV1().Secrets(ns).Create(context.Background(), &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Name: "db", Namespace: ns}, Data: map[string][]byte{"password": []byte(value)}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	keyText := base64.StdEncoding.EncodeToString(key)
	keyFile := filepath.Join(t.TempDir(), "state.key")
	if err := os.WriteFile(keyFile, []byte("# the state key\n"+keyText+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	args := func(dir string, more ...string) []string {
		return append([]string{"watch", "secrets", "-n", ns, "--state-dir", dir, kubeconfigArg(srv), "-o", "json"}, more...)
	}
	once := func(env []string, args []string) line {
		t.Helper()
		p := start(t, env, args...)
		l := nextEvent(t, p)
		if code := p.interrupt(); code != 0 {
			t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
		}
		return l
	}

	dir := t.TempDir()
	p := start(t, nil, args(dir)...)
	if l := nextEvent(t, p); l.Key != ns+"/db" {
		t.Fatalf("without keys: %s %s", l.Type, l.Key)
	}
	if code := p.interrupt(); code != 0 || !strings.Contains(p.stderr.String(), "secrets are not kept in --state-dir without --state-key-file") {
		t.Fatalf("without keys: exit %d, stderr %q; want a warning that Secrets are not kept", code, p.stderr)
	}
	if f := stateFiles(t, dir); len(f) != 0 {
		t.Fatalf("without keys, a watch of Secrets kept %q", f)
	}

	for _, way := range []struct {
		name string
		env  []string
		args []string
	}{
		{"--state-key-file", nil, []string{"--state-key-file", keyFile}},
		{"$KINFORMER_STATE_KEY", []string{"KINFORMER_STATE_KEY=" + keyText}, nil},
	} {
		dir := t.TempDir()
		if l := once(way.env, args(dir, way.args...)); l.Cause != "" {
			t.Fatalf("%s, first run: %s %s cause %q", way.name, l.Type, l.Key, l.Cause)
		}
		f := stateFiles(t, dir)
		if len(f) != 1 {
			t.Fatalf("%s: state files %q, want one", way.name, f)
		}
		b, err := os.ReadFile(f[0])
		if err != nil {
			t.Fatal(err)
		}
		if bytes.Contains(b, []byte(value)) || bytes.Contains(b, []byte(base64.StdEncoding.EncodeToString([]byte(value)))) {
			t.Fatalf("%s: %s holds the Secret's value", way.name, f[0])
		}
		if l := once(way.env, args(dir, way.args...)); l.Key != ns+"/db" || l.Cause != "restore" {
			t.Fatalf("%s, second run: %s %s cause %q, want db restored", way.name, l.Type, l.Key, l.Cause)
		}
	}

	bad := filepath.Join(t.TempDir(), "bad.key")
	if err := os.WriteFile(bad, []byte("not a key\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	code, _, stderr := runCmd(t, nil, args(t.TempDir(), "--state-key-file", bad)...)
	if code != exitUsage || !strings.Contains(stderr, "--state-key-file") || !strings.Contains(stderr, "not base64") {
		t.Fatalf("a bad key file: exit %d, stderr %q; want a usage error naming it", code, stderr)
	}
}

// `kinformer state prune` lists (--dry-run) and removes the files of a
// state directory no informer will use, and nothing else.
func TestStatePrune(t *testing.T) {
	t.Parallel()
	dir := filepath.Join(t.TempDir(), "state")
	if err := os.Mkdir(dir, 0o700); err != nil {
		t.Fatal(err)
	}
	files := map[string]bool{ // name → to be pruned
		"configmaps-0123456789abcdef.kinformer.bad": true, // set aside
		"pods-fedcba9876543210.kinformer":           true, // not a state file that can be read
		"notes.txt":                                 false,
	}
	for name := range files {
		if err := os.WriteFile(filepath.Join(dir, name), []byte("garbage"), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	code, stdout, stderr := runCmd(t, nil, "state", "prune", "--state-dir", dir, "--dry-run")
	if code != 0 || !strings.Contains(stdout, "would remove 2 files, 14 bytes") {
		t.Fatalf("--dry-run: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for name := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); err != nil {
			t.Fatalf("--dry-run removed %s", name)
		}
	}
	code, stdout, stderr = runCmd(t, nil, "state", "prune", "--state-dir", dir)
	if code != 0 || !strings.Contains(stdout, "removed 2 files, 14 bytes") {
		t.Fatalf("prune: exit %d, stdout %q, stderr %q", code, stdout, stderr)
	}
	for name, pruned := range files {
		if _, err := os.Stat(filepath.Join(dir, name)); (err == nil) == pruned {
			t.Errorf("%s: pruned %v, want %v", name, err != nil, pruned)
		}
	}
	if code, _, _ := runCmd(t, nil, "state", "prune"); code != exitUsage {
		t.Errorf("state prune without --state-dir: exit %d, want %d", code, exitUsage)
	}
}

// A --state-dir under a directory others may write (a Kubernetes emptyDir
// is 0777) is used, and the CLI says so on stderr, though its logs are
// off; under a private one, nothing is said.
func TestStateDirUnderAWritableParent(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no modes")
	}
	t.Parallel()
	shared := t.TempDir()
	if err := os.Chmod(shared, 0o777); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		parent string
		warned bool
	}{{shared, true}, {t.TempDir(), false}} {
		dir := filepath.Join(tc.parent, "state")
		_, _, stderr := runCmd(t, cleanEnv(), "watch", "configmaps", "--state-dir", dir, "--server", "http://127.0.0.1:1", "--request-timeout", "1s")
		warned := strings.Contains(stderr, "warning: --state-dir "+dir+": "+tc.parent+" (mode 0777) may be written by group or others")
		if warned != tc.warned {
			t.Errorf("under %s: warned %v, want %v; stderr:\n%s", tc.parent, warned, tc.warned, stderr)
		}
	}
}

// A --state-key-file that group or others may read is used, and warned
// of (as ssh warns of a private key's); one only its owner reads is not.
func TestStateKeyFileReadableByOthersIsWarned(t *testing.T) {
	if runtime.GOOS == "windows" {
		t.Skip("no Unix permissions")
	}
	key := make([]byte, 32)
	if _, err := rand.Read(key); err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "state.key")
	if err := os.WriteFile(file, []byte(base64.StdEncoding.EncodeToString(key)+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{{0o600, false}, {0o400, false}, {0o640, true}, {0o644, true}, {0o604, true}} {
		if err := os.Chmod(file, tc.mode); err != nil {
			t.Fatal(err)
		}
		var warnings []string
		k := stateKeys{file: file}
		if err := k.load(func(s string) { warnings = append(warnings, s) }); err != nil || len(k.keys) != 1 {
			t.Fatalf("mode %#o: load: %v, %d keys", tc.mode, err, len(k.keys))
		}
		if got := len(warnings) == 1 && strings.Contains(warnings[0], "may be read by group or others") && strings.Contains(warnings[0], file); got != tc.warn || len(warnings) > 1 {
			t.Fatalf("mode %#o: warnings %q, want a warning: %v", tc.mode, warnings, tc.warn)
		}
	}
}

// The CLI does not make the directory's key when it reads --state-dir:
// the library does, at the first informer's open, and so sees a key that
// was removed and reports the files named under it (which no informer
// finds again), on stderr.
func TestStateDirKeyRemovedIsReported(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	newConfigMap(t, c, ns, "a", nil)
	dir := filepath.Join(t.TempDir(), "state")
	args := []string{"cm", "-n", ns, "--state-dir", dir, kubeconfigArg(srv), "-o", "json"}
	expectFirst(t, ns+"/a", nil, args...)
	files := stateFiles(t, dir)
	if len(files) != 1 {
		t.Fatalf("state files %q, want one", files)
	}
	key := filepath.Join(dir, "kinformer.key")
	if err := os.Remove(key); err != nil {
		t.Fatal(err)
	}
	// A parse alone (a usage error after the flag) makes no key.
	if code, _, _ := runCmd(t, nil, "watch", "--state-dir", dir, "-o", "nonsense", "cm"); code != exitUsage {
		t.Fatalf("exit %d, want %d", code, exitUsage)
	}
	if _, err := os.Stat(key); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the key after a parse: %v; want none", err)
	}
	p := start(t, nil, "watch", "cm", "-n", ns, "--state-dir", dir, kubeconfigArg(srv))
	p.next(lineTimeout) // the header
	if row := strings.Fields(p.next(lineTimeout)); len(row) != 4 || row[0] != "ADDED" || row[1] != "a" {
		t.Fatalf("row %q, want ADDED a: listed, not restored", row)
	}
	waitStderr(t, p, regexp.MustCompile(`warning: .*1 files no informer will use .*`+regexp.QuoteMeta(filepath.Base(files[0]))))
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit %d; stderr:\n%s", code, p.stderr)
	}
}

// The restore line: the objects summed, one file named with its version,
// several by their directory.
func TestRestoreLine(t *testing.T) {
	t.Parallel()
	if got := restoreLine("kinformer", "configmaps", nil, time.Second); got != "" {
		t.Errorf("nothing restored: %q, want no line", got)
	}
	one := []kinformer.StateRestore{{Objects: 1234, File: "/d/configmaps-x.kinformer", ResourceVersion: "5678"}}
	if got, want := restoreLine("kinformer", "configmaps", one, 412345*time.Microsecond), "kinformer: restored 1,234 configmaps from /d/configmaps-x.kinformer (rv 5678), caught up in 412ms"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	three := append(one, kinformer.StateRestore{Objects: 1000000, File: "/d/b"}, kinformer.StateRestore{File: "/d/c"})
	if got, want := restoreLine("kinformer", "widgets.example.com", three, 2*time.Second), "kinformer: restored 1,001,234 widgets.example.com from 3 state files in /d, caught up in 2s"; got != want {
		t.Errorf("got  %q\nwant %q", got, want)
	}
	for n, want := range map[int]string{0: "0", 999: "999", 1000: "1,000", 123456: "123,456", -1234: "-1,234"} {
		if got := thousands(n); got != want {
			t.Errorf("thousands(%d) = %q, want %q", n, got, want)
		}
	}
}
