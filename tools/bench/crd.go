package main

// The custom-resource benchmark: informers of a CRD's objects (JSON on the
// wire), kinformer's dynamic paths (kinformer.New over a dynamic client,
// and a Factory's Dynamic) and its typed path (Shared with a scheme)
// against client-go's dynamic informer and a typed SharedIndexInformer.
//
//	cd tools/bench && go run . crd

import (
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/kubernetes"
)

const (
	crdBegin = "<!-- crd: begin -->"
	crdEnd   = "<!-- crd: end -->"
)

var crdGVR = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

// ---- the CustomResourceDefinition ----

func sObj(props map[string]any, required ...string) map[string]any {
	m := map[string]any{"type": "object", "properties": props}
	if len(required) > 0 {
		m["required"] = required
	}
	return m
}

func sType(t string) map[string]any { return map[string]any{"type": t} }

func sArr(items map[string]any) map[string]any {
	return map[string]any{"type": "array", "items": items}
}

// widgetCRD is widgets.bench.kinformer.io: namespaced, v1, a full
// structural schema, no status subresource (so that a Create sets the
// status too, as the benchmark's objects have one).
func widgetCRD() *unstructured.Unstructured {
	str, integer, number, boolean := sType("string"), sType("integer"), sType("number"), sType("boolean")
	spec := sObj(map[string]any{
		"image":    str,
		"replicas": integer,
		"paused":   boolean,
		"weight":   number,
		"tags":     sArr(str),
		"owner": sObj(map[string]any{
			"team":    str,
			"contact": sObj(map[string]any{"email": str, "pager": boolean}),
		}),
		"endpoints": sArr(sObj(map[string]any{"name": str, "port": integer, "protocol": str, "tls": boolean, "weight": number}, "name")),
		"limits": sObj(map[string]any{
			"cpu":      number,
			"memoryMB": integer,
			"burst":    sObj(map[string]any{"factor": number, "windowSeconds": integer}),
		}),
		"env":     sArr(sObj(map[string]any{"name": str, "value": str}, "name")),
		"payload": str,
	}, "image")
	status := sObj(map[string]any{
		"phase":              str,
		"observedGeneration": integer,
		"readyReplicas":      integer,
		"score":              number,
		"conditions": sArr(sObj(map[string]any{
			"type": str, "status": str, "reason": str, "message": str,
			"lastTransitionTime": map[string]any{"type": "string", "format": "date-time"},
		}, "type", "status")),
	})
	return &unstructured.Unstructured{Object: map[string]any{
		"apiVersion": "apiextensions.k8s.io/v1",
		"kind":       "CustomResourceDefinition",
		"metadata":   map[string]any{"name": crdResource + "." + crdGroup},
		"spec": map[string]any{
			"group": crdGroup,
			"scope": "Namespaced",
			"names": map[string]any{"plural": crdResource, "singular": "widget", "kind": crdKind, "listKind": crdKind + "List"},
			"versions": []any{map[string]any{
				"name": "v1", "served": true, "storage": true,
				"schema": map[string]any{"openAPIV3Schema": sObj(map[string]any{"spec": spec, "status": status})},
			}},
		},
	}}
}

// installCRD creates the CRD (if missing) and waits until it is
// Established and its resource is served.
func installCRD(ctx context.Context, dyn dynamic.Interface) error {
	crd := widgetCRD()
	if _, err := dyn.Resource(crdGVR).Create(ctx, crd, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return fmt.Errorf("create CRD: %w", err)
	}
	deadline := time.Now().Add(2 * time.Minute)
	for {
		u, err := dyn.Resource(crdGVR).Get(ctx, crd.GetName(), metav1.GetOptions{})
		if err == nil {
			conds, _, _ := unstructured.NestedSlice(u.Object, "status", "conditions")
			established := slices.ContainsFunc(conds, func(c any) bool {
				m, _ := c.(map[string]any)
				return m["type"] == "Established" && m["status"] == "True"
			})
			if established {
				_, err = dyn.Resource(widgetGVR).Namespace(crdNamespace).List(ctx, metav1.ListOptions{Limit: 1})
				if err == nil {
					return nil
				}
			}
		}
		if time.Now().After(deadline) {
			return fmt.Errorf("CRD %s not established and served after 2 minutes (last error: %v)", crd.GetName(), err)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// createWidgets creates Widgets 0..n-1 (those missing) with 48 writers.
func createWidgets(ctx context.Context, dyn dynamic.Interface, n int) error {
	client := dyn.Resource(widgetGVR).Namespace(crdNamespace)
	return createObjects("widgets", n, func(i int) error {
		u, err := unstructuredWidget(i)
		if err != nil {
			return err
		}
		if _, err = client.Create(ctx, u, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
			return fmt.Errorf("create %s: %w", u.GetName(), err)
		}
		return nil
	})
}

// crdUpdateBurst patches n Widgets (w-00000, w-00001, ... wrapping) with
// workers concurrent writers: a JSON merge patch of spec.payload, and the
// annotations bench/round and bench/ts, as updateBurst does for ConfigMaps.
func crdUpdateBurst(ctx context.Context, dyn dynamic.Interface, round string, n, nObjects, workers int) ([]write, time.Duration, error) {
	client := dyn.Resource(widgetGVR).Namespace(crdNamespace)
	writes := make([]write, n)
	start := time.Now()
	err := parallel(n, workers, func(i int) error {
		r := rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano())))
		name := widgetName(i % nObjects)
		ts := time.Now().UnixNano()
		patch := fmt.Sprintf(`{"metadata":{"annotations":{%q:%q,%q:%q}},"spec":{"payload":%q}}`,
			annTS, strconv.FormatInt(ts, 10), annRound, round, randHex(r, 48))
		u, err := client.Patch(ctx, name, types.MergePatchType, []byte(patch), metav1.PatchOptions{FieldManager: fieldManager})
		if err != nil {
			return fmt.Errorf("patch %s: %w", name, err)
		}
		writes[i] = write{Name: name, RV: u.GetResourceVersion(), Resp: time.Now().UnixNano()}
		return nil
	})
	return writes, time.Since(start), err
}

// ---- the crd subcommand (the parent) ----

// crdRun is one size's figures.
type crdRun struct {
	Size          int
	CreateSeconds float64
	Updates       int
	JSONBytes     float64 // mean size of an object as listed, without managedFields
	JSONBytesMF   float64 // with them
	Results       []crdResult
	Bursts        []burstStat
	Skipped       map[string]string // contender -> why it was left out
}

func crdFlags(fs *flag.FlagSet) func(*bench) error {
	crs := fs.String("crs", "10000,50000", "numbers of custom resources, comma-separated; each size gets its own localapi run")
	updates := fs.Int("updates", 10000, "custom resources patched after each contender's sync (at most the size; 0: none)")
	writers := fs.Int("writers", 32, "concurrent writers of the update burst")
	contenders := fs.String("contenders", strings.Join([]string{cClientGo, cClientGoStrip, cKinformer, cKinFactory, cClientGoTyped, cKinTyped}, ","), "contenders, comma-separated")
	profile := fs.String("profile", "", "if set, write CPU profiles of one extra sync and update burst of each contender here, as SIZE-KIND.cpu.pprof")
	return func(b *bench) error { return crd(b, *crs, *updates, *writers, *contenders, *profile) }
}

func crd(b *bench, crs string, updates, writers int, contenders, profile string) error {
	var sizes []int
	for _, s := range strings.Split(crs, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-crs: %q is not a positive number", s)
		}
		sizes = append(sizes, n)
	}
	kinds := strings.Split(contenders, ",")
	for _, k := range kinds {
		if !slices.Contains([]string{cClientGo, cClientGoStrip, cKinformer, cKinCompact, cKinFactory, cClientGoTyped, cKinTyped}, k) {
			return fmt.Errorf("-contenders: unknown contender %q", k)
		}
	}
	if err := b.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	start := time.Now()

	var runs []crdRun
	for _, n := range sizes {
		dir := filepath.Join(b.dataDir, fmt.Sprintf("crs-%d", n))
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return err
		}
		logf("starting localapi on %s", dir)
		srv, err := startServer(b.bin, dir, b.verbose)
		if err != nil {
			return err
		}
		logf("localapi ready: %s", srv.Server)
		run, err := crdSize(srv, n, b.rounds, min(updates, n), writers, slices.Clone(kinds), profile)
		srv.stop()
		if err != nil {
			return fmt.Errorf("%d custom resources: %w", n, err)
		}
		runs = append(runs, run)
	}
	logf("crd benchmark done in %.1f minutes", time.Since(start).Minutes())
	return b.section(crdReport(m, b.rev, b.args, b.rounds, writers, runs))
}

// crdSize creates the CRD and n Widgets on srv and runs the rounds.
func crdSize(srv *server, n, rounds, updates, writers int, kinds []string, profile string) (crdRun, error) {
	run := crdRun{Size: n, Updates: updates, Skipped: map[string]string{}}
	ctx := context.Background()
	cfg, err := crdRestConfig(srv.Kubeconfig, 5000)
	if err != nil {
		return run, err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return run, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return run, err
	}
	wstart := time.Now()
	if err := ensureNamespace(ctx, cs, crdNamespace); err != nil {
		return run, err
	}
	if err := installCRD(ctx, dyn); err != nil {
		return run, err
	}
	if err := createWidgets(ctx, dyn, n); err != nil {
		return run, err
	}
	run.CreateSeconds = time.Since(wstart).Seconds()

	// A warm-up LIST (not recorded), which also gives the objects' size.
	var l *unstructured.UnstructuredList
	if err := retried(func() (err error) {
		l, err = dyn.Resource(widgetGVR).Namespace(crdNamespace).List(ctx, metav1.ListOptions{})
		return err
	}); err != nil {
		return run, err
	}
	if len(l.Items) != n {
		return run, fmt.Errorf("%d custom resources in %s, want %d (a data dir with another workload?)", len(l.Items), crdNamespace, n)
	}
	var with, without float64
	for i := range l.Items {
		b, _ := json.Marshal(l.Items[i].Object)
		with += float64(len(b))
		l.Items[i].SetManagedFields(nil)
		b, _ = json.Marshal(l.Items[i].Object)
		without += float64(len(b))
	}
	run.JSONBytes, run.JSONBytesMF = without/float64(n), with/float64(n)
	l = nil
	logf("%d widgets ready in %.0fs: %.0f bytes of JSON each, %.0f with managedFields", n, run.CreateSeconds, run.JSONBytes, run.JSONBytesMF)

	contender := func(kind string, round int, extra ...string) (crdResult, *burstStat, error) {
		burstID := fmt.Sprintf("%d-%s-%d", round, kind, time.Now().UnixNano())
		var burst burstFunc
		if updates > 0 {
			burst = func() ([]write, time.Duration, error) { return crdUpdateBurst(ctx, dyn, burstID, updates, n, writers) }
		}
		res, b, err := runChild[crdResult](ctx, kind, burst, append([]string{"crd-contender", "-kind", kind, "-kubeconfig", srv.Kubeconfig,
			"-namespace", crdNamespace, "-round", fmt.Sprint(round), "-burst-id", burstID,
			"-objects", fmt.Sprint(n), "-updates", fmt.Sprint(updates)}, extra...)...)
		if err == nil && res.Objects != n {
			err = fmt.Errorf("%d objects in the cache when synced, want %d", res.Objects, n)
		}
		return res, b, err
	}
	typed := func(k string) bool { return k == cClientGoTyped || k == cKinTyped }
	for r := 1; r <= rounds; r++ {
		for _, kind := range rotate(kinds, r-1) {
			if run.Skipped[kind] != "" {
				continue
			}
			time.Sleep(time.Second) // let the server settle
			res, b, err := contender(kind, r)
			if err != nil && typed(kind) {
				// The typed paths are optional: one that fails is reported, not fatal.
				logf("%s round %d failed, left out: %v", kind, r, err)
				run.Skipped[kind] = err.Error()
				continue
			}
			if err != nil {
				return run, fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			run.Results = append(run.Results, res)
			if b != nil {
				run.Bursts = append(run.Bursts, *b)
			}
			logf("%-17s %6d CRs round %d: synced %.3fs handled %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB rss %.1fMB; requests %v + %d other, %.1fMB read; updates %d/%d cpu/event %.1fµs p50 %.1fms p99 %.1fms%s",
				kind, n, r, res.SyncSeconds, res.HandledSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.PeakRSSMB,
				res.Requests, res.Other, res.BodyMB, res.Updates, res.UpdatesExpected, res.UpdateCPUMicros, res.LatencyP50Ms, res.LatencyP99Ms, errSuffix(res.Errors))
		}
	}
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return run, err
		}
		for _, kind := range kinds {
			if run.Skipped[kind] != "" {
				continue
			}
			file := filepath.Join(profile, fmt.Sprintf("%d-%s.cpu.pprof", n, kind))
			if _, _, err := contender(kind, 0, "-cpuprofile", file); err != nil {
				return run, fmt.Errorf("%s profile: %w", kind, err)
			}
			logf("wrote %s and %s.burst.cpu.pprof", file, strings.TrimSuffix(file, ".cpu.pprof"))
		}
	}
	return run, nil
}

func errSuffix(errs []string) string {
	if len(errs) == 0 {
		return ""
	}
	return fmt.Sprintf("; %d error events: %q", len(errs), errs)
}

// crdReport is the crd section of docs/benchmarks.md, markers included.
func crdReport(m machine, rev string, args []string, rounds, writers int, runs []crdRun) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	ratio := func(a, b float64) string {
		if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "–"
		}
		return fmt.Sprintf("%.2f", a/b)
	}
	num := func(format string, v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	cmd := benchCommand("crd", args)
	p("%s\n## Custom resources (JSON)\n\n", crdBegin)
	p("Informers of a custom resource, served as JSON (custom resources have no protobuf). Made on %s with `%s`, %d cores **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, by:\n\n    %s\n\n",
		m.Date, m.GoVersion, m.NProc, m.LoadStart, loadavg(), rev, cmd)
	p("**How measured.** Each size has its own localapi run: the parent creates the CRD `%s.%s` (namespaced, `v1`, a full structural schema, no status subresource), waits until it is Established and served, and creates the objects in `%s` with a plain `Create` (48 writers; server-side managedFields as in production). Each object is about 1.2 KiB of JSON as created, distinct per object (seeded rand): a spec with objects nested 3 levels deep (`spec.owner.contact.email`, `spec.limits.burst.factor`), lists of objects and of strings, integers and floats (non-integral), booleans, five labels (two shared by all, one by 40 groups, two distinct), an annotation, and a status with conditions. ", crdResource, crdGroup, crdNamespace)
	p("The contenders each run in their own process, the order rotating every round, with the same rest.Config (JSON, 1000 QPS, gzip on) and one handler counting ADDED and recording MODIFIED:\n\n")
	p("- `%s`: `dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, ns, nil).ForResource(gvr).Informer()`, defaults (unstructured objects).\n", cClientGo)
	p("- `%s`: the same with `SetTransform` dropping managedFields.\n", cClientGoStrip)
	p("- `%s`: `kinformer.New[*unstructured.Unstructured](dyn.Resource(gvr).Namespace(ns), nil)`, `dyn` from `dynamic.NewForConfig(cfg)`: the plain user path.\n", cKinformer)
	p("- `%s`: `kinformer.NewFactory(cfg, nil).Dynamic(gvr, ns, nil)` (its clock includes the factory's discovery).\n", cKinFactory)
	p("- `%s`: a typed `Widget` Go struct (TypeMeta, ObjectMeta, Spec, Status; hand-written DeepCopyObject) in a scheme of its own; `cache.NewSharedIndexInformer` over `cache.NewListWatchFromClient` of a REST client with that scheme (JSON).\n", cClientGoTyped)
	p("- `%s`: `kinformer.Shared[*Widget](kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Scheme: scheme}), ns, nil)`.\n\n", cKinTyped)
	p("Before its clock starts each contender opens the connection (one GET) and runs `runtime.GC()`. **Time to synced**: from just before the informer (or the factory) is made until `HasSynced()`, polled every 1 ms; **CPU**: getrusage user+sys over the same interval; **peak heap**: highest `%s` sample (every 2 ms) up to synced; **heap after sync**: once every initial ADDED was handled, `runtime.GC()` twice; every contender's cache must hold every object. **Requests**: each GET of the collection up to synced, recorded by a `WrapTransport` (a streaming list is a WATCH with `sendInitialEvents`), and the bytes read from them after gunzip. **CPU per update event**: after the sync the parent patches `-updates` objects once each (a JSON merge patch of `spec.payload` and two annotations) with %d writers; CPU from synced to the last of those MODIFIED events handled, per event. Figures are medians over %d round(s); ratios below 1 favour kinformer.\n\n",
		heapMetric, writers, rounds)

	order := []string{cClientGo, cClientGoStrip, cKinformer, cKinFactory, cClientGoTyped, cKinTyped}
	type row struct {
		name, format string
		ratio        bool
		get          func(crdResult) float64
	}
	rows := []row{
		{"time to synced (s)", "%.3f", true, func(r crdResult) float64 { return r.SyncSeconds }},
		{"time to all initial ADDED handled (s)", "%.3f", true, func(r crdResult) float64 { return r.HandledSeconds }},
		{"CPU to synced, user+sys (s)", "%.3f", true, func(r crdResult) float64 { return r.SyncCPUSeconds }},
		{"peak Go heap during sync (MB)", "%.1f", true, func(r crdResult) float64 { return r.PeakHeapMB }},
		{"heap after sync (MB)", "%.1f", true, func(r crdResult) float64 { return r.HeapAfterSyncMB }},
		{"peak RSS, VmHWM (MB)", "%.1f", true, func(r crdResult) float64 { return r.PeakRSSMB }},
		{"CPU per update event (µs)", "%.1f", true, func(r crdResult) float64 { return r.UpdateCPUMicros }},
		{"event latency p50, from write response (ms)", "%.1f", false, func(r crdResult) float64 { return r.LatencyP50Ms }},
		{"event latency p99 (ms)", "%.1f", false, func(r crdResult) float64 { return r.LatencyP99Ms }},
		{"update events handled", "%.0f", false, func(r crdResult) float64 { return float64(r.Updates) }},
		{"heap after the burst (MB)", "%.1f", false, func(r crdResult) float64 { return r.HeapAfterBurstMB }},
	}
	for _, run := range runs {
		col := func(kind string, f func(crdResult) float64) float64 {
			var xs []float64
			for _, r := range run.Results {
				if r.Contender == kind {
					xs = append(xs, f(r))
				}
			}
			return median(xs)
		}
		var kinds []string
		for _, k := range order {
			if slices.ContainsFunc(run.Results, func(r crdResult) bool { return r.Contender == k }) {
				kinds = append(kinds, k)
			}
		}
		var secs []float64
		for _, x := range run.Bursts {
			secs = append(secs, x.Seconds)
		}
		p("### %d custom resources: medians of %d round%s\n\n", run.Size, rounds, map[bool]string{true: "s"}[rounds > 1])
		p("%d objects created in %.0f s; %.0f bytes of JSON each as listed, %.0f with managedFields. ", run.Size, run.CreateSeconds, run.JSONBytes, run.JSONBytesMF)
		if run.Updates > 0 && len(secs) > 0 {
			p("Update burst: %d patches, median %.1f s (%.0f writes/s).", run.Updates, median(secs), float64(run.Updates)/median(secs))
		}
		p("\n\n| metric |")
		for _, k := range kinds {
			p(" %s |", k)
		}
		p("\n|---|%s\n", strings.Repeat("---:|", len(kinds)))
		for _, rw := range rows {
			p("| %s |", rw.name)
			for _, k := range kinds {
				p(" %s |", num(rw.format, col(k, rw.get)))
			}
			p("\n")
		}
		type pair struct{ a, b string }
		var pairs []pair
		for _, a := range []string{cKinformer, cKinFactory} {
			for _, o := range []string{cClientGo, cClientGoStrip} {
				if slices.Contains(kinds, a) && slices.Contains(kinds, o) {
					pairs = append(pairs, pair{a, o})
				}
			}
		}
		if slices.Contains(kinds, cKinTyped) && slices.Contains(kinds, cClientGoTyped) {
			pairs = append(pairs, pair{cKinTyped, cClientGoTyped})
		}
		if len(pairs) > 0 {
			p("\n| ratio of medians |")
			for _, pr := range pairs {
				p(" %s ÷ %s |", pr.a, pr.b)
			}
			p("\n|---|%s\n", strings.Repeat("---:|", len(pairs)))
			for _, rw := range rows {
				if !rw.ratio {
					continue
				}
				p("| %s |", strings.TrimSuffix(strings.TrimSuffix(strings.TrimSuffix(rw.name, " (s)"), " (MB)"), " (µs)"))
				for _, pr := range pairs {
					p(" %s |", ratio(col(pr.a, rw.get), col(pr.b, rw.get)))
				}
				p("\n")
			}
		}
		if len(run.Skipped) > 0 {
			var ks []string
			for k := range run.Skipped {
				ks = append(ks, k)
			}
			slices.Sort(ks)
			p("\nLeft out: ")
			for i, k := range ks {
				if i > 0 {
					p("; ")
				}
				p("`%s` failed: %s", k, strings.ReplaceAll(truncate(run.Skipped[k], 400), "\n", " "))
			}
			p(".\n")
		}
		p("\nRequests up to synced (first round; other requests, such as discovery, counted apart): ")
		for i, k := range kinds {
			for _, r := range run.Results {
				if r.Contender == k {
					if i > 0 {
						p("; ")
					}
					p("%s: %s, %d other, %.1f MB read", k, countPaths(r.Requests), r.Other, r.BodyMB)
					break
				}
			}
		}
		p(".\n")
		var errs []string
		for _, r := range run.Results {
			for _, e := range r.Errors {
				errs = append(errs, fmt.Sprintf("%s round %d: %s", r.Contender, r.Round, e))
			}
		}
		if len(errs) > 0 {
			p("\nError events: %s.\n", strings.Join(errs, "; "))
		}
		p("\n<details><summary>Every run (%d custom resources)</summary>\n\n| round | contender | synced (s) | handled (s) | CPU (s) | peak heap (MB) | heap after (MB) | peak RSS (MB) | updates | CPU/update (µs) | p50 (ms) | p99 (ms) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n", run.Size)
		for _, r := range run.Results {
			p("| %d | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %d | %.1f | %.1f | %.1f |\n", r.Round, r.Contender, r.SyncSeconds, r.HandledSeconds, r.SyncCPUSeconds,
				r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.Updates, r.UpdateCPUMicros, r.LatencyP50Ms, r.LatencyP99Ms)
		}
		p("\n</details>\n\n")
	}
	p("%s\n", crdEnd)
	return b.String()
}
