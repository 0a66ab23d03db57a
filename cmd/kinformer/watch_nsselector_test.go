package main

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer/internal/testenv"
)

// watch --namespace-selector follows the namespaces a label selects: the
// objects of one labelled while it runs arrive as ADDED with cause "join",
// those of one unlabelled as DELETED with cause "leave"; the table says
// JOINED and LEFT. Flags that choose namespaces otherwise are refused.
func TestWatchNamespaceSelector(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	sel := "kinformer.test/cli-tenant=" + nsA
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/cli-tenant", nsA)
	newConfigMap(t, c, nsA, "a1", nil)
	newConfigMap(t, c, nsB, "b1", nil)

	p := start(t, nil, "watch", "configmaps", "--namespace-selector", sel, "-o", "json", kubeconfigArg(srv))
	if l := nextEvent(t, p); l.Type != "ADDED" || l.Key != nsA+"/a1" || l.Cause != "" {
		t.Fatalf("first line %+v: want ADDED %s/a1 without a cause", l, nsA)
	}
	testenv.LabelNamespace(t, srv.Config(), nsB, "kinformer.test/cli-tenant", nsA)
	if l := nextEvent(t, p); l.Type != "ADDED" || l.Key != nsB+"/b1" || l.Cause != "join" {
		t.Fatalf("after labelling %s: %+v, want ADDED %s/b1 cause join", nsB, l, nsB)
	}
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/cli-tenant", "")
	if l := nextEvent(t, p); l.Type != "DELETED" || l.Key != nsA+"/a1" || l.Cause != "leave" {
		t.Fatalf("after unlabelling %s: %+v, want DELETED %s/a1 cause leave", nsA, l, nsA)
	}
	newConfigMap(t, c, nsB, "b2", nil)
	if l := nextEvent(t, p); l.Type != "ADDED" || l.Key != nsB+"/b2" || l.Cause != "" {
		t.Fatalf("%+v: want ADDED %s/b2 from the watch", l, nsB)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	for _, l := range p.rest() {
		if decode(t, l).Type != "BOOKMARK" {
			t.Errorf("unexpected line: %s", l)
		}
	}

	// The table: JOINED and LEFT, with the namespace column.
	tbl := start(t, nil, "watch", "configmaps", "--namespace-selector", sel, kubeconfigArg(srv))
	// waitFor waits for a row starting with each of rows' words, in any
	// order (a leave's rows come in no particular order).
	waitFor := func(rows ...string) {
		t.Helper()
		want := map[string]bool{}
		for _, r := range rows {
			want[r] = true
		}
		deadline := time.Now().Add(lineTimeout)
		for len(want) > 0 {
			f := strings.Fields(tbl.next(time.Until(deadline)))
			if len(f) >= 3 {
				delete(want, strings.Join(f[:3], " "))
			}
		}
	}
	waitFor("ADDED " + nsB + " b1")
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/cli-tenant", nsA)
	waitFor("JOINED " + nsA + " a1")
	testenv.LabelNamespace(t, srv.Config(), nsB, "kinformer.test/cli-tenant", "other")
	waitFor("LEFT "+nsB+" b1", "LEFT "+nsB+" b2")
	if code := tbl.interrupt(); code != 0 {
		t.Fatalf("exit code %d after SIGINT; stderr:\n%s", code, tbl.stderr)
	}

	for _, args := range [][]string{
		{"--namespace-selector", sel, "-n", nsA},
		{"--namespace-selector", sel, "-A"},
		{"--namespace-selector", "a in (", "-o", "json"},
	} {
		q := start(t, nil, append([]string{"watch", "configmaps", kubeconfigArg(srv)}, args...)...)
		if code := q.wait(lineTimeout); code != 2 || !strings.Contains(q.stderr.String(), "--namespace-selector") {
			t.Errorf("watch %v: exit %d, stderr %q; want a usage error (2) naming --namespace-selector", args, code, q.stderr)
		}
	}
}

// serve --namespace-selector serves a namespaced resource in the
// namespaces a label selects, following them: /objects holds the objects
// of a namespace labelled while it runs and loses those of one
// unlabelled, and /events/recent says why (causes join and leave);
// cluster-scoped resources are served whole.
func TestServeNamespaceSelector(t *testing.T) {
	t.Parallel()
	for _, extra := range [][]string{nil, {"--compact"}} {
		t.Run(strings.Join(append([]string{"serve"}, extra...), " "), func(t *testing.T) {
			t.Parallel()
			serveNamespaceSelector(t, extra...)
		})
	}
}

// serveNamespaceSelector is TestServeNamespaceSelector with extra args:
// with --compact, /objects reads each object from its namespace's cache as
// it writes it (viewSource.keyed).
func serveNamespaceSelector(t *testing.T, extra ...string) {
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	key := "kinformer.test/serve-tenant"
	testenv.LabelNamespace(t, srv.Config(), nsA, key, nsA)
	newConfigMap(t, c, nsA, "a1", nil)
	newConfigMap(t, c, nsB, "b1", nil)

	p, base := startServe(t, append([]string{"configmaps", "namespaces", "--namespace-selector", key + "=" + nsA, kubeconfigArg(srv)}, extra...)...)
	waitReady(t, base)
	held := func() []string {
		var l listResponse
		getJSON(t, base+"objects?resource=configmaps", 200, &l)
		var out []string
		for _, it := range l.Items {
			m := it["metadata"].(map[string]any)
			if ns := m["namespace"].(string); ns == nsA || ns == nsB {
				out = append(out, ns+"/"+m["name"].(string))
			}
		}
		return out
	}
	if got := held(); len(got) != 1 || got[0] != nsA+"/a1" {
		t.Fatalf("/objects: %v, want only %s/a1", got, nsA)
	}
	// The namespaces' informers count in the served metrics.
	if _, metrics := get(t, base+"metrics"); !strings.Contains(metrics, `kinformer_synced{resource="configmaps"} 1`) ||
		!strings.Contains(metrics, `kinformer_events_total{resource="configmaps",type="ADDED"}`) {
		t.Errorf("/metrics has no synced configmaps informer with events:\n%s", metrics)
	}
	var nsl listResponse
	getJSON(t, base+"objects?resource=namespaces", 200, &nsl)
	if nsl.Count < 2 {
		t.Fatalf("namespaces (cluster-scoped) served %d, want them all", nsl.Count)
	}

	testenv.LabelNamespace(t, srv.Config(), nsB, key, nsA)
	testenv.LabelNamespace(t, srv.Config(), nsA, key, "")
	deadline := time.Now().Add(lineTimeout)
	for got := held(); len(got) != 1 || got[0] != nsB+"/b1"; got = held() {
		if time.Now().After(deadline) {
			t.Fatalf("/objects: %v, want only %s/b1 after the labels moved", got, nsB)
		}
		time.Sleep(50 * time.Millisecond)
	}
	// The feed follows the cache: its handler may not have had the join
	// yet when the cache holds b1 (under load, it had not).
	wants := []string{"ADDED " + nsB + "/b1 join", "DELETED " + nsA + "/a1 leave"}
	deadline = time.Now().Add(lineTimeout)
	for {
		var recent struct {
			Events []feedEvent `json:"events"`
		}
		getJSON(t, base+"events/recent?resource=configmaps", 200, &recent)
		var causes []string
		for _, e := range recent.Events {
			if e.Namespace == nsA || e.Namespace == nsB {
				causes = append(causes, string(e.Type)+" "+e.Namespace+"/"+e.Name+" "+e.Cause)
			}
		}
		if !slices.ContainsFunc(wants, func(w string) bool { return !slices.Contains(causes, w) }) {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("/events/recent: %v, want %q", causes, wants)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
}

// watch --namespace-selector --state-dir keeps a state file per namespace;
// the file of a namespace that leaves (unlabelled) goes with it, and the
// others stay for the next start.
func TestWatchNamespaceSelectorStateFiles(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	c := kubernetes.NewForConfigOrDie(srv.Config())
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	key := "kinformer.test/cli-state"
	testenv.LabelNamespace(t, srv.Config(), nsA, key, nsA)
	testenv.LabelNamespace(t, srv.Config(), nsB, key, nsA)
	newConfigMap(t, c, nsA, "a1", nil)
	newConfigMap(t, c, nsB, "b1", nil)
	dir := t.TempDir()
	files := func() int {
		m, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
		return len(m)
	}
	waitFiles := func(n int, what string) {
		t.Helper()
		for deadline := time.Now().Add(lineTimeout); files() != n; time.Sleep(20 * time.Millisecond) {
			if time.Now().After(deadline) {
				t.Fatalf("%d state files in %s, want %d: %s", files(), dir, n, what)
			}
		}
	}

	p := start(t, nil, "watch", "configmaps", "--namespace-selector", key+"="+nsA, "--state-dir", dir, "-o", "json", kubeconfigArg(srv))
	got := map[string]bool{}
	for len(got) < 2 {
		got[nextEvent(t, p).Key] = true
	}
	// One per namespace, and the Namespace objects' (the selector's).
	waitFiles(3, "one per namespace, and the selector's")
	testenv.LabelNamespace(t, srv.Config(), nsB, key, "")
	if l := nextEvent(t, p); l.Type != "DELETED" || l.Key != nsB+"/b1" || l.Cause != "leave" {
		t.Fatalf("after unlabelling %s: %+v, want DELETED %s/b1 cause leave", nsB, l, nsB)
	}
	waitFiles(2, nsB+"'s removed as it left")
	if code := p.interrupt(); code != 0 {
		t.Fatalf("exit code %d after SIGINT; stderr:\n%s", code, p.stderr)
	}
	if files() != 2 {
		t.Errorf("after the watch stopped: %d state files, want %s's and the selector's kept", files(), nsA)
	}
}
