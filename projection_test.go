package kinformer

import (
	"context"
	"errors"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
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
