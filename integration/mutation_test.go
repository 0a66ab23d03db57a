package integration

import (
	"errors"
	"fmt"
	"testing"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// A handler that changes the object it was given, instead of a copy, is
// reported by the cache mutation detector: an Error event wrapping
// ErrMutated that names the object and what changed, once, though the
// object is then checked every second and replaced by an update. Objects
// decoded after it do not inherit the changed labels map, though they
// were shared with it.
func TestMutatingHandlerIsReported(t *testing.T) {
	// Report, not panic (TestMain's mode): this test changes an object on
	// purpose.
	t.Setenv(kinformer.EnvMutationDetector, "true")
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	inf, _, rec := start(t, srv.Config(), ns, nil)
	ctx := bounded(t, time.Minute)

	mutated := make(chan struct{})
	inf.AddEventHandler(kinformer.Added, func(e cmEvent) {
		if e.Object.Name == "victim" {
			e.Object.Labels["touched"] = "yes" // the bug: no DeepCopy first
			close(mutated)
		}
	})
	labels := map[string]string{"app": "web"}
	mustCreate(t, c, configMap(ns, "victim", labels, "x"))
	select {
	case <-mutated:
	case <-ctx.Done():
		t.Fatal("the handler never saw the object")
	}
	reports := func() []cmEvent {
		var out []cmEvent
		for _, e := range rec.all() {
			if e.Type == kinformer.Error && errors.Is(e.Err, kinformer.ErrMutated) {
				out = append(out, e)
			}
		}
		return out
	}
	// The periodic check, within a second or two.
	eventually(t, 10*time.Second, "the report", func() bool { return len(reports()) > 0 })
	e := reports()[0]
	want := "cached object modified in place: " + ns + `/victim: metadata.labels["touched"]: "yes", was absent`
	if e.Err.Error() != want {
		t.Fatalf("report %q, want %q", e.Err, want)
	}

	// Replaced by an update, then checked again: no second report. A new
	// object with the labels the changed map had gets its own, right ones.
	if _, err := c.CoreV1().ConfigMaps(ns).Patch(ctx, "victim", types.MergePatchType, []byte(`{"data":{"v":"two"}}`), metav1.PatchOptions{}); err != nil {
		t.Fatal(err)
	}
	mustCreate(t, c, configMap(ns, "later", labels, "x"))
	eventually(t, 10*time.Second, "the update and the new object", func() bool {
		return rec.count(kinformer.Modified) == 1 && rec.count(kinformer.Added) == 2
	})
	time.Sleep(2500 * time.Millisecond) // two checks
	if n := len(reports()); n != 1 {
		t.Fatalf("%d reports, want 1: %v", n, reports())
	}
	for _, key := range []string{"victim", "later"} {
		if o, _ := inf.Cache().GetByKey(ns + "/" + key); fmt.Sprint(o.Labels) != "map[app:web]" {
			t.Errorf("%s's labels %v, want the server's, map[app:web]", key, o.Labels)
		}
	}
}
