package main

import (
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
	waitFor := func(words ...string) {
		t.Helper()
		deadline := time.Now().Add(lineTimeout)
		for {
			l := tbl.next(time.Until(deadline))
			if f := strings.Fields(l); len(f) >= len(words) && strings.Join(f[:len(words)], " ") == strings.Join(words, " ") {
				return
			}
		}
	}
	waitFor("ADDED", nsB, "b1")
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/cli-tenant", nsA)
	waitFor("JOINED", nsA, "a1")
	testenv.LabelNamespace(t, srv.Config(), nsB, "kinformer.test/cli-tenant", "other")
	waitFor("LEFT", nsB, "b1")
	waitFor("LEFT", nsB, "b2")
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
