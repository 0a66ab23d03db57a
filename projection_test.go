package kinformer

import (
	"context"
	"errors"
	"reflect"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/projection"
)

// A KeyFunc or an index that reads a field Options.Fields leave out would
// key or index every object by nothing: the informer says so at once, by
// name, instead (probed on an object with every field set: a lookup of
// one key of a map the probe cannot see, only whether the map is there).
func TestFieldsReadOutside(t *testing.T) {
	byData := func(cm *corev1.ConfigMap) []string {
		var out []string
		for k := range cm.Data {
			out = append(out, k)
		}
		return out
	}
	byLabel := func(cm *corev1.ConfigMap) []string { return []string{cm.Labels["a"]} }
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	inf := New[*corev1.ConfigMap](newFakeServer(), &Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"},
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"data": byData}})
	if err := inf.Run(ctx); !errors.Is(err, ErrFields) || !strings.Contains(err.Error(), `index "data"`) {
		t.Fatalf("an index reading data, which Fields leave out: Run %v, want ErrFields naming it", err)
	}
	inf = New[*corev1.ConfigMap](newFakeServer(), &Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"},
		KeyFunc: func(cm *corev1.ConfigMap) string { return cm.Name + "/" + strings.Join(byData(cm), ",") }})
	if err, _ := inf.LastError(); !errors.Is(err, ErrFields) || !strings.Contains(err.Error(), "KeyFunc") {
		t.Fatalf("a KeyFunc reading data: %v", err)
	}
	inf = New[*corev1.ConfigMap](newFakeServer(), &Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels", "data"},
		Indexers: map[string]IndexFunc[*corev1.ConfigMap]{"data": byData}})
	if err, _ := inf.LastError(); err != nil {
		t.Fatalf("data kept: %v", err)
	}
	if err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"label": byLabel}); err != nil {
		t.Fatal(err)
	}
	err := inf.AddIndexers(map[string]IndexFunc[*corev1.ConfigMap]{"immutable": func(cm *corev1.ConfigMap) []string {
		if cm.Immutable != nil && *cm.Immutable {
			return []string{"yes"}
		}
		return nil
	}})
	if !errors.Is(err, ErrFields) {
		t.Fatalf("AddIndexers of an index reading immutable: %v", err)
	}
}

// A wider projection given to an informer that ran and is stopped (as a
// Factory's consumer may, between two runs) is taken at its next run, by
// a list, not by a watch from the kept resourceVersion: the objects cached
// before get the new fields, each with Modified, and WaitForSync waits for
// that list.
func TestFieldsWidenedWhileStopped(t *testing.T) {
	srv := newFakeServer()
	c := cm("ns", "a", "app", "web")
	c.Data["k"] = "v"
	srv.put(c)
	inf := New[*corev1.ConfigMap](srv, &Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"}, Backoff: fastBackoff})
	mods := make(chan Event[*corev1.ConfigMap], 4)
	inf.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Modified: func(e Event[*corev1.ConfigMap]) { mods <- e }})
	inf.Start()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().GetNamespaced("ns", "a"); got == nil || got.Data != nil {
		t.Fatalf("narrow: %+v", got)
	}
	inf.Stop()
	wide, err := projection.Union(inf.configuration().fields, mustFields(t, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.reconfigure("the fields it keeps", true, func(c *config[*corev1.ConfigMap]) { c.fields = wide }); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	if err := inf.WaitForSync(ctx); !errors.Is(err, context.DeadlineExceeded) {
		t.Fatalf("WaitForSync of a stopped informer given wider fields: %v, want it to wait for the list", err)
	}
	lists, _ := srv.counts()
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().GetNamespaced("ns", "a"); got == nil || got.Data["k"] != "v" || got.Labels["app"] != "web" {
		t.Fatalf("after the wider fields were taken: %+v", got)
	}
	if l, _ := srv.counts(); l != lists+1 {
		t.Fatalf("%d lists for the wider fields, want 1", l-lists)
	}
	select {
	case e := <-mods:
		if e.Cause != CauseRelist || e.Old.Data != nil || e.Object.Data["k"] != "v" {
			t.Fatalf("Modified for the wider fields: %+v", e)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("no Modified for the object cached before the wider fields")
	}
}

func mustFields(t *testing.T, paths ...string) *projection.Fields {
	t.Helper()
	f, err := compileFields(paths, reflect.TypeFor[*corev1.ConfigMap]())
	if err != nil {
		t.Fatal(err)
	}
	return f
}
