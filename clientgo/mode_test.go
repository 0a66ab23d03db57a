package clientgo_test

import (
	"context"
	"log/slog"
	"sync"
	"testing"

	"github.com/go-logr/logr"
	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
	"k8s.io/klog/v2"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/clientgo"
)

// records is a slog handler that keeps the Info records it is given, with
// their attributes as strings.
type records struct {
	mu   sync.Mutex
	seen []map[string]string // "msg" and the attributes
}

func (r *records) Enabled(context.Context, slog.Level) bool { return true }
func (r *records) WithAttrs([]slog.Attr) slog.Handler       { return r }
func (r *records) WithGroup(string) slog.Handler            { return r }
func (r *records) Handle(_ context.Context, rec slog.Record) error {
	if rec.Level != slog.LevelInfo {
		return nil
	}
	m := map[string]string{"msg": rec.Message}
	rec.Attrs(func(a slog.Attr) bool {
		m[a.Key] = a.Value.String()
		return true
	})
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, m)
	return nil
}

// starts returns the "Starting kinformer informer" records.
func (r *records) starts() []map[string]string {
	r.mu.Lock()
	defer r.mu.Unlock()
	var out []map[string]string
	for _, m := range r.seen {
		if m["msg"] == "Starting kinformer informer" {
			out = append(out, m)
		}
	}
	return out
}

// loggingContext is a context whose klog logger writes to r.
func loggingContext(r *records) context.Context {
	return klog.NewContext(context.Background(), logr.FromSlogHandler(r))
}

// Each informer of the package says, at its start, that it is kinformer's
// and how it caches, in one Info line through the logger of
// RunWithContext's context; IsKinformer and Mode say the same.
func TestStartLogsMode(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "p0", "n1", nil))
	lw := cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())
	pods := func(o *kinformer.Options[*corev1.Pod]) cache.SharedIndexInformer {
		return clientgo.Wrap(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), o))
	}
	fields := []string{"spec.nodeName"}
	for _, c := range []struct {
		name, resource, mode string
		sii                  cache.SharedIndexInformer
	}{
		{"NewSharedIndexInformer", "pod", "plain", clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)},
		{"Wrap", "pod", "plain", pods(nil)},
		{"Compact", "pod", "compact", pods(&kinformer.Options[*corev1.Pod]{Compact: true})},
		{"Fields", "pods", "projected", pods(&kinformer.Options[*corev1.Pod]{Name: "pods", Fields: fields})},
		{"CompactFields", "pod", "compact+projected", pods(&kinformer.Options[*corev1.Pod]{Compact: true, Fields: fields})},
	} {
		t.Run(c.name, func(t *testing.T) {
			if !clientgo.IsKinformer(c.sii) || clientgo.Mode(c.sii) != c.mode {
				t.Fatalf("IsKinformer = %v, Mode = %q; want true, %q", clientgo.IsKinformer(c.sii), clientgo.Mode(c.sii), c.mode)
			}
			r := &records{}
			ctx, cancel := context.WithCancel(loggingContext(r))
			done := make(chan struct{})
			go func() {
				defer close(done)
				c.sii.RunWithContext(ctx)
			}()
			defer func() { cancel(); <-done }()
			if !cache.WaitForCacheSync(bounded(t).Done(), c.sii.HasSynced) {
				t.Fatal("not synced")
			}
			got := r.starts()
			if len(got) != 1 || got[0]["resource"] != c.resource || got[0]["type"] != "*v1.Pod" || got[0]["mode"] != c.mode {
				t.Fatalf("start lines: %v; want one naming resource %s, type *v1.Pod, mode %s", got, c.resource, c.mode)
			}
		})
	}
}

// In a client-go factory, the informer ForFactory makes is kinformer's,
// and says so as the factory starts it; the factory's own are not.
func TestForFactoryIsKinformer(t *testing.T) {
	_, cs, ns := clients(t)
	f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
	f.InformerFor(&corev1.ConfigMap{}, clientgo.ForFactory(func(c kubernetes.Interface) *kinformer.Informer[*corev1.ConfigMap] {
		return kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{Name: "configmaps"})
	}))
	cms, pods := f.Core().V1().ConfigMaps().Informer(), f.Core().V1().Pods().Informer()
	if !clientgo.IsKinformer(cms) || clientgo.Mode(cms) != "plain" {
		t.Fatalf("ForFactory's informer (%T): IsKinformer = %v, Mode = %q", cms, clientgo.IsKinformer(cms), clientgo.Mode(cms))
	}
	if clientgo.IsKinformer(pods) || clientgo.Mode(pods) != "" {
		t.Fatalf("the factory's own informer: IsKinformer = %v, Mode = %q", clientgo.IsKinformer(pods), clientgo.Mode(pods))
	}
	if own := cache.NewSharedIndexInformer(&cache.ListWatch{}, &corev1.Pod{}, 0, nil); clientgo.IsKinformer(own) {
		t.Fatal("client-go's cache.NewSharedIndexInformer: IsKinformer = true")
	}
	r := &records{}
	ctx, cancel := context.WithCancel(loggingContext(r))
	f.StartWithContext(ctx)
	defer func() { cancel(); f.Shutdown() }()
	if !cache.WaitForCacheSync(bounded(t).Done(), cms.HasSynced, pods.HasSynced) {
		t.Fatal("not synced")
	}
	got := r.starts()
	if len(got) != 1 || got[0]["resource"] != "configmaps" || got[0]["type"] != "*v1.ConfigMap" || got[0]["mode"] != "plain" {
		t.Fatalf("start lines: %v; want one, for configmaps", got)
	}
}
