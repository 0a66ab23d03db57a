package main

import (
	"context"
	"fmt"
	"math/rand/v2"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
)

const trafficLong = `
Creates the namespaces PREFIX-1 … PREFIX-N, then creates, updates and deletes
configmaps in them, one change every --interval, until interrupted. Used by
hack/demo.sh to give "watch" something to show.
`

var (
	namespacesGVR = schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}
	configmapsGVR = schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}
)

type trafficFlags struct {
	cluster    clusterFlags
	namespaces int
	interval   time.Duration
	prefix     string
}

func (f *trafficFlags) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("demo-traffic", pflag.ContinueOnError)
	fs.IntVar(&f.namespaces, "namespaces", 2, "how many namespaces to spread the configmaps over")
	fs.DurationVar(&f.interval, "interval", 300*time.Millisecond, "time between two changes")
	fs.StringVar(&f.prefix, "prefix", "demo", "namespace name prefix")
	f.cluster.bind(fs, false)
	return fs
}

func runTraffic(ctx context.Context, e *env, args []string) error {
	var f trafficFlags
	fs := f.flagSet()
	if err := parseFlags(e, fs, args, "demo-traffic [flags]", trafficLong); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("demo-traffic: unexpected argument %q", fs.Arg(0))
	}
	if f.namespaces < 1 || f.interval <= 0 {
		return usageErrorf("demo-traffic: --namespaces and --interval must be positive")
	}
	cfg, _, err := f.cluster.load(userAgent() + " (demo-traffic)")
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}

	g := &traffic{dyn: dyn, live: map[string][]string{}}
	for i := 1; i <= f.namespaces; i++ {
		g.namespaces = append(g.namespaces, fmt.Sprintf("%s-%d", f.prefix, i))
	}
	t := time.NewTicker(f.interval)
	defer t.Stop()
	for ready := false; ; {
		select {
		case <-ctx.Done():
			return nil
		case <-t.C:
		}
		var err error
		if !ready {
			err = g.setup(ctx)
			ready = err == nil
		} else {
			err = g.step(ctx)
		}
		if err != nil && ctx.Err() == nil {
			fmt.Fprintf(e.stderr, "%s demo-traffic: %v\n", e.prog, err)
		}
	}
}

// traffic is the state of the generator: the configmaps it believes exist.
type traffic struct {
	dyn        dynamic.Interface
	namespaces []string
	live       map[string][]string // namespace → configmap names
	seq        int
}

func (g *traffic) setup(ctx context.Context) error {
	for _, ns := range g.namespaces {
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "Namespace",
			"metadata": map[string]any{"name": ns},
		}}
		_, err := g.dyn.Resource(namespacesGVR).Create(ctx, obj, metav1.CreateOptions{})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating namespace %s: %w", ns, err)
		}
	}
	return nil
}

// step makes one change: create while there are few configmaps, delete
// while there are many, otherwise mostly updates.
func (g *traffic) step(ctx context.Context) error {
	ns := g.namespaces[rand.IntN(len(g.namespaces))]
	names := g.live[ns]
	cms := g.dyn.Resource(configmapsGVR).Namespace(ns)
	r := rand.IntN(10)
	switch {
	case len(names) < 3 || (len(names) < 8 && r < 3):
		g.seq++
		name := fmt.Sprintf("cm-%d", g.seq)
		obj := &unstructured.Unstructured{Object: map[string]any{
			"apiVersion": "v1", "kind": "ConfigMap",
			"metadata": map[string]any{"name": name, "labels": map[string]any{"app": "demo"}},
			"data":     map[string]any{"counter": "0"},
		}}
		if _, err := cms.Create(ctx, obj, metav1.CreateOptions{}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("creating configmap %s/%s: %w", ns, name, err)
		}
		g.live[ns] = append(names, name)
	case len(names) >= 8 || r < 5:
		i := rand.IntN(len(names))
		name := names[i]
		g.live[ns] = append(names[:i:i], names[i+1:]...)
		if err := cms.Delete(ctx, name, metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
			return fmt.Errorf("deleting configmap %s/%s: %w", ns, name, err)
		}
	default:
		name := names[rand.IntN(len(names))]
		patch := `{"data":{"counter":"` + strconv.Itoa(rand.IntN(1000)) + `","updated":"` + time.Now().UTC().Format(time.RFC3339Nano) + `"}}`
		if _, err := cms.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{}); err != nil {
			if apierrors.IsNotFound(err) {
				g.live[ns] = remove(names, name)
				return nil
			}
			return fmt.Errorf("updating configmap %s/%s: %w", ns, name, err)
		}
	}
	return nil
}

func remove(names []string, name string) []string {
	out := names[:0:0]
	for _, n := range names {
		if n != name {
			out = append(out, n)
		}
	}
	return out
}
