package integration

import (
	"context"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// levelLog records each line with its level.
type levelLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *levelLog) Enabled(context.Context, slog.Level) bool { return true }
func (l *levelLog) WithAttrs([]slog.Attr) slog.Handler       { return l }
func (l *levelLog) WithGroup(string) slog.Handler            { return l }
func (l *levelLog) Handle(_ context.Context, r slog.Record) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.lines = append(l.lines, r.Level.String()+" "+r.Message)
	return nil
}

// count counts the lines at level whose message has sub.
func (l *levelLog) count(level slog.Level, sub string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	n := 0
	for _, s := range l.lines {
		if strings.HasPrefix(s, level.String()+" ") && strings.Contains(s, sub) {
			n++
		}
	}
	return n
}

// An informer forbidden to list says so at once and by name (the 403
// names the user, verb, resource and namespace) through WaitForSync,
// LastError and the kinformer_persistent_error metric, and logs it once
// however often it retries; a Role granted later lets it sync, which it
// logs once too, and the error and the metric clear.
func TestForbiddenSaidOnceThenAllowed(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, admin, configMap(ns, "cm", nil, "1"))
	c := clientset(t, srv.RestrictedConfig())
	log := &levelLog{}
	reg := prometheus.NewRegistry()
	m, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{
		Logger: slog.New(log), Metrics: m, Name: "configmaps",
		Backoff: kinformer.Backoff{Initial: 100 * time.Millisecond, Max: 400 * time.Millisecond}})
	inf.Start()
	defer inf.Stop()

	began := time.Now()
	err = inf.WaitForSync(bounded(t, 10*time.Second))
	if !apierrors.IsForbidden(err) {
		t.Fatalf("WaitForSync = %v, want a 403", err)
	}
	for _, want := range []string{testenv.RestrictedUser, `"configmaps"`, "list", ns} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("WaitForSync's error %q does not name %s", err, want)
		}
	}
	if d := time.Since(began); d > 3*time.Second {
		t.Errorf("WaitForSync took %v to say so", d)
	}
	eventually(t, 10*time.Second, "several attempts", func() bool { return log.count(slog.LevelDebug, "forbidden") >= 3 })
	if n := log.count(slog.LevelWarn, "forbidden"); n != 1 {
		t.Fatalf("%d Warn lines for the same 403 over several attempts, want 1:\n%s", n, strings.Join(log.lines, "\n"))
	}
	if err, since := inf.LastError(); !apierrors.IsForbidden(err) || since.IsZero() {
		t.Fatalf("LastError = %v, %v", err, since)
	}
	if v := gathered(t, reg, "kinformer_persistent_error"); v != 1 {
		t.Fatalf("kinformer_persistent_error = %v, want 1", v)
	}

	// Granted: it syncs, says so once, and the error clears.
	grantConfigMaps(t, srv, ns)
	if err := waitSynced(t, inf); err != nil {
		t.Fatal(err)
	}
	if _, ok := inf.Cache().GetNamespaced(ns, "cm"); !ok {
		t.Fatal("synced without the ConfigMap")
	}
	eventually(t, 10*time.Second, "the recovery logged", func() bool { return log.count(slog.LevelInfo, "recovered") == 1 })
	if err, _ := inf.LastError(); err != nil {
		t.Fatalf("LastError after the grant = %v", err)
	}
	if v := gathered(t, reg, "kinformer_persistent_error"); v != 0 {
		t.Fatalf("kinformer_persistent_error after the grant = %v, want 0", v)
	}
}

// waitSynced waits for a sync through persistent errors (WaitForSync
// returns them).
func waitSynced(t *testing.T, inf *kinformer.Informer[*corev1.ConfigMap]) error {
	t.Helper()
	ctx := bounded(t, callTimeout)
	for {
		err := inf.WaitForSync(ctx)
		if err == nil || ctx.Err() != nil {
			return err
		}
		select {
		case <-inf.Synced():
			return nil
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// gathered returns the value of the one series of the metric name in reg
// (-1 if there is none).
func gathered(t *testing.T, reg *prometheus.Registry, name string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name && len(mf.GetMetric()) == 1 {
			if g := mf.GetMetric()[0].GetGauge(); g != nil {
				return g.GetValue()
			}
		}
	}
	return -1
}

// A view with IfAllowed holds, of the namespaces its selector matches,
// those where the client may list and watch ConfigMaps: one whose Role is
// granted while it runs joins, one whose Role is revoked leaves (though its
// open watch would have gone on), each told to the handlers.
func TestSharedViewIfAllowedFollowsPermissions(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	nsA, nsB := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	label := "kinformer.test/allowed-tenant"
	for _, ns := range []string{nsA, nsB} {
		testenv.LabelNamespace(t, srv.Config(), ns, label, nsA)
		mustCreate(t, admin, configMap(ns, "cm", nil, "1"))
	}
	// The restricted user may watch namespaces (to follow the selector).
	srv.Grant(t, "", schema.GroupVersionResource{Version: "v1", Resource: "namespaces"})
	revokeA := grantConfigMaps(t, srv, nsA)

	log := &levelLog{}
	f := kinformer.NewFactory(srv.RestrictedConfig(), &kinformer.FactoryOptions{Logger: slog.New(log)})
	defer f.Stop()
	v, err := kinformer.SharedView[*corev1.ConfigMap](f, kinformer.Namespaces{
		Selector: label + "=" + nsA, IfAllowed: true, Recheck: 300 * time.Millisecond}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var rec recorder[*corev1.ConfigMap]
	v.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: rec.handle, Deleted: rec.handle})
	f.Start()
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if got := v.Namespaces(); len(got) != 1 || got[0] != nsA {
		t.Fatalf("Namespaces() = %v, want [%s] (the one the user may read)", got, nsA)
	}
	waitLines(t, &rec, "ADDED "+nsA+"/cm list")
	if log.count(slog.LevelInfo, "may not list and watch configmaps") == 0 {
		t.Errorf("the namespace left out was not logged:\n%s", strings.Join(log.lines, "\n"))
	}

	grantConfigMaps(t, srv, nsB)
	waitLines(t, &rec, "ADDED "+nsB+"/cm join")
	revokeA()
	waitLines(t, &rec, "DELETED "+nsA+"/cm leave")
	eventually(t, callTimeout, "only "+nsB+" in the view", func() bool {
		got := v.Namespaces()
		return len(got) == 1 && got[0] == nsB
	})
}
