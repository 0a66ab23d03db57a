package main

// The factory benchmark: memory and requests of N consumers of Pods and
// ConfigMaps through one kinformer.Factory, against 2N independent
// informers (kinformer.New over a clientset's typed clients).
//
//	cd tools/bench && go run . factory

import (
	"context"
	"flag"
	"fmt"
	"math"
	"runtime"
	"runtime/debug"
	"slices"
	"strings"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	fFactory     = "factory"     // one NewFactory, every consumer calls Shared
	fIndependent = "independent" // one kinformer.New per consumer and resource

	factoryBegin = "<!-- factory: begin -->"
	factoryEnd   = "<!-- factory: end -->"
)

// factoryResult is what a factory-contender process reports, as one JSON line.
type factoryResult struct {
	Contender string `json:"contender"`
	Round     int    `json:"round"`
	Informers int    `json:"informers"` // distinct informers the consumers got
	Objects   int    `json:"objects"`   // in their caches, summed over distinct informers

	SyncSeconds    float64 `json:"syncSeconds"`    // start -> every informer HasSynced (polled every 1 ms)
	HandledSeconds float64 `json:"handledSeconds"` // start -> every handler has had Added for every object
	CPUSeconds     float64 `json:"cpuSeconds"`     // user+sys, start -> handled
	PeakHeapMB     float64 `json:"peakHeapMB"`     // highest heap objects sample, start -> handled
	HeapAllocMB    float64 `json:"heapAllocMB"`    // after handled and runtime.GC() twice
	HeapInuseMB    float64 `json:"heapInuseMB"`    //
	PeakRSSMB      float64 `json:"peakRSSMB"`      // VmHWM when handled

	// Requests up to 1 s after handled.
	Lists      int64    `json:"lists"`      // GET of a pods/configmaps collection without watch
	Watches    int64    `json:"watches"`    // GET with watch=true, without sendInitialEvents
	WatchLists int64    `json:"watchLists"` // GET with watch=true&sendInitialEvents=true (streaming list)
	Other      int64    `json:"other"`      // any other request (discovery)
	OtherPaths []string `json:"otherPaths"` //
	BodyMB     float64  `json:"bodyMB"`     // response bodies read, after the transport's gunzip
}

// ---- the factory-contender subcommand (a child process) ----

func factoryContenderMain(args []string) error {
	fs := flag.NewFlagSet("factory-contender", flag.ExitOnError)
	kind := fs.String("kind", fFactory, "factory | independent")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	consumers := fs.Int("consumers", 10, "consumers, each of Pods and of ConfigMaps")
	nCM := fs.Int("configmaps", 0, "ConfigMaps expected")
	nPods := fs.Int("pods", 0, "Pods expected")
	fs.Parse(args)

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	counter := &reqCounter{}
	cfg.WrapTransport = counter.wrap
	res := factoryResult{Contender: *kind, Round: *round}

	// One handler per consumer and resource, each counting its initial
	// Added events; handled closes when every one has had all of them.
	remaining := atomic.Int64{}
	remaining.Store(int64(2 * *consumers))
	handled := make(chan struct{})
	handler := func(want int) func(kinformer.EventType) {
		var n atomic.Int64
		if want == 0 {
			if remaining.Add(-1) == 0 {
				close(handled)
			}
		}
		return func(t kinformer.EventType) {
			if t == kinformer.Added && n.Add(1) == int64(want) && remaining.Add(-1) == 0 {
				close(handled)
			}
		}
	}
	type informer struct {
		id        any
		start     func()
		hasSynced func() bool
		length    func() int
	}
	var infs []informer
	add := func(id any, start func(), hasSynced func() bool, length func() int) {
		infs = append(infs, informer{id, start, hasSynced, length})
	}

	runtime.GC()
	debug.FreeOSMemory()
	cpu0 := cpuSeconds()
	t0 := time.Now()
	smp := startSampler(t0)
	var startAll func()
	switch *kind {
	case fFactory:
		f := kinformer.NewFactory(cfg, nil)
		for range *consumers {
			pods, err := kinformer.Shared[*corev1.Pod](f, podNamespace, nil)
			if err != nil {
				return err
			}
			h := handler(*nPods)
			pods.AddHandler(func(e kinformer.Event[*corev1.Pod]) { h(e.Type) })
			add(pods, nil, pods.HasSynced, pods.Cache().Len)
			cms, err := kinformer.Shared[*corev1.ConfigMap](f, cmNamespace, nil)
			if err != nil {
				return err
			}
			h2 := handler(*nCM)
			cms.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) { h2(e.Type) })
			add(cms, nil, cms.HasSynced, cms.Cache().Len)
		}
		startAll = f.Start
	case fIndependent:
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		for range *consumers {
			pods := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(podNamespace), nil)
			h := handler(*nPods)
			pods.AddHandler(func(e kinformer.Event[*corev1.Pod]) { h(e.Type) })
			add(pods, pods.Start, pods.HasSynced, pods.Cache().Len)
			cms := kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(cmNamespace), nil)
			h2 := handler(*nCM)
			cms.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) { h2(e.Type) })
			add(cms, cms.Start, cms.HasSynced, cms.Cache().Len)
		}
		startAll = func() {
			for _, inf := range infs {
				inf.start()
			}
		}
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}
	startAll()
	for slices.ContainsFunc(infs, func(i informer) bool { return !i.hasSynced() }) {
		time.Sleep(time.Millisecond)
	}
	res.SyncSeconds = time.Since(t0).Seconds()
	select {
	case <-handled:
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s: not every handler had its initial Added events after 2 minutes", *kind)
	}
	res.HandledSeconds = time.Since(t0).Seconds()
	res.CPUSeconds = cpuSeconds() - cpu0
	res.PeakRSSMB = vmHWM()
	res.PeakHeapMB = slices.MaxFunc(smp.finish(), func(a, b [2]float64) int { return cmpF(a[1], b[1]) })[1]
	// Let each streaming list's plain watch open before counting.
	time.Sleep(time.Second)
	res.Lists, res.Watches, res.WatchLists, res.Other = counter.lists.Load(), counter.watches.Load(), counter.watchLists.Load(), counter.other.Load()
	res.BodyMB = float64(counter.body.Load()) / (1 << 20)
	counter.mu.Lock()
	res.OtherPaths = slices.Clone(counter.otherPaths)
	counter.mu.Unlock()

	seen := map[any]bool{}
	for _, inf := range infs {
		if !seen[inf.id] {
			seen[inf.id] = true
			res.Informers++
			res.Objects += inf.length()
		}
	}
	runtime.GC()
	runtime.GC()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	res.HeapAllocMB = float64(ms.HeapAlloc) / (1 << 20)
	res.HeapInuseMB = float64(ms.HeapInuse) / (1 << 20)
	runtime.KeepAlive(infs)
	if _, err := childSynced(); err != nil {
		return err
	}
	return childResult(res)
}

// ---- the factory subcommand (the parent) ----

func factoryFlags(fs *flag.FlagSet) func(*bench) error {
	consumers := fs.Int("consumers", 10, "consumers, each of Pods and of ConfigMaps")
	nCM := fs.Int("configmaps", 5000, "ConfigMaps in the workload (about 1 KiB each)")
	nPods := fs.Int("pods", 1000, "Pods in the workload")
	return func(b *bench) error { return factory(b, *consumers, *nCM, *nPods) }
}

func factory(b *bench, consumers, nCM, nPods int) error {
	if err := b.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := b.serveWorkload(nCM, nPods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	// A warm-up LIST of each collection, not recorded.
	if _, err := cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}
	if _, err := cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{}); err != nil {
		return err
	}

	var results []factoryResult
	for r := 1; r <= b.rounds; r++ {
		for _, kind := range rotate([]string{fFactory, fIndependent}, r-1) {
			time.Sleep(time.Second) // let the server settle
			res, _, err := runChild[factoryResult](ctx, kind, nil, "factory-contender", "-kind", kind, "-kubeconfig", srv.Kubeconfig,
				"-round", fmt.Sprint(r), "-consumers", fmt.Sprint(consumers), "-configmaps", fmt.Sprint(nCM), "-pods", fmt.Sprint(nPods))
			if err != nil {
				return fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			infs := 2 // the factory's: one per resource
			if kind == fIndependent {
				infs = 2 * consumers
			}
			if res.Informers != infs || res.Objects != infs/2*(nCM+nPods) {
				return fmt.Errorf("%s round %d: %d informers holding %d objects, want %d holding %d", kind, r, res.Informers, res.Objects, infs, infs/2*(nCM+nPods))
			}
			results = append(results, res)
			logf("%-11s round %d: synced %.3fs handled %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB (inuse %.1fMB) rss %.1fMB; requests: %d list, %d watch, %d streaming list, %d other %v; %.1fMB read",
				kind, r, res.SyncSeconds, res.HandledSeconds, res.CPUSeconds, res.PeakHeapMB, res.HeapAllocMB, res.HeapInuseMB, res.PeakRSSMB,
				res.Lists, res.Watches, res.WatchLists, res.Other, res.OtherPaths, res.BodyMB)
		}
	}
	return b.section(factoryReport(m, b.rev, b.args, b.rounds, consumers, nCM, nPods, results))
}

// factoryReport is the factory section of docs/benchmarks.md, markers included.
func factoryReport(m machine, rev string, args []string, rounds, consumers, nCM, nPods int, rs []factoryResult) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cmd := benchCommand("factory", args)
	p("%s\n## Shared informers: a factory against independent informers\n\n", factoryBegin)
	p("%d consumers each of Pods (%d in `%s`) and of ConfigMaps (%d of about 1 KiB in `%s`), the workload of the main benchmark in smaller numbers. Made on %s with `%s`, %d cores **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, by:\n\n    %s\n\n",
		consumers, nPods, podNamespace, nCM, cmNamespace, m.Date, m.GoVersion, m.NProc, m.LoadStart, loadavg(), rev, cmd)
	p("- `factory`: one `kinformer.NewFactory(cfg, nil)`; each consumer calls `kinformer.Shared[*corev1.Pod]` and `kinformer.Shared[*corev1.ConfigMap]` in its namespace and registers one `AddHandler` on each; then `Start`. The consumers get 2 informers.\n")
	p("- `independent`: `kubernetes.NewForConfig(cfg)`, and for each consumer `kinformer.New` over `cs.CoreV1().Pods(ns)` and over `cs.CoreV1().ConfigMaps(ns)`, one `AddHandler` each, then `Start`: %d informers, %d caches.\n", 2*consumers, 2*consumers)
	p("- Each contender in its own process (this program re-executed), the two alternating over %d rounds; figures are medians. Same rest.Config (protobuf, 1000 QPS, gzip on); both clocks start before the client is made, so they include opening the connection, and the factory's discovery (its first `Shared`).\n", rounds)
	p("- **Synced**: every informer's `HasSynced`, polled every 1 ms; **handled**: every handler has had `Added` for every object. **CPU**: getrusage user+sys up to handled. **Peak heap**: highest `%s` sample (every 2 ms) up to handled. **Heap after**: `runtime.GC()` twice once handled, then MemStats `HeapAlloc` and `HeapInuse`. **Peak RSS**: `VmHWM` when handled.\n", heapMetric)
	p("- **Requests**: counted by a `rest.Config.WrapTransport` up to 1 s after handled: a GET of the `pods`/`configmaps` collection is a LIST; a GET with `watch=true` a WATCH, a *streaming list* when it also has `sendInitialEvents=true` (kinformer's default initial list where the server offers it: a watch that replays the collection up to a bookmark, closed there; a plain watch from its resourceVersion follows). Anything else (discovery) is *other*. **Read**: response body bytes the client read, after the transport's gunzip.\n\n")

	col := func(kind string, f func(factoryResult) float64) float64 {
		var xs []float64
		for _, r := range rs {
			if r.Contender == kind {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	p("| metric | factory | independent | factory ÷ independent |\n|---|---:|---:|---:|\n")
	for _, row := range []struct {
		name, format string
		get          func(factoryResult) float64
	}{
		{"informers (caches)", "%.0f", func(r factoryResult) float64 { return float64(r.Informers) }},
		{"time to all synced (s)", "%.3f", func(r factoryResult) float64 { return r.SyncSeconds }},
		{"time to all initial Added handled (s)", "%.3f", func(r factoryResult) float64 { return r.HandledSeconds }},
		{"CPU to handled, user+sys (s)", "%.3f", func(r factoryResult) float64 { return r.CPUSeconds }},
		{"peak Go heap (MB)", "%.1f", func(r factoryResult) float64 { return r.PeakHeapMB }},
		{"heap after sync, HeapAlloc (MB)", "%.1f", func(r factoryResult) float64 { return r.HeapAllocMB }},
		{"heap after sync, HeapInuse (MB)", "%.1f", func(r factoryResult) float64 { return r.HeapInuseMB }},
		{"peak RSS, VmHWM (MB)", "%.1f", func(r factoryResult) float64 { return r.PeakRSSMB }},
		{"LIST requests", "%.0f", func(r factoryResult) float64 { return float64(r.Lists) }},
		{"WATCH requests (plain)", "%.0f", func(r factoryResult) float64 { return float64(r.Watches) }},
		{"WATCH requests (streaming list)", "%.0f", func(r factoryResult) float64 { return float64(r.WatchLists) }},
		{"other requests (discovery, see below)", "%.0f", func(r factoryResult) float64 { return float64(r.Other) }},
		{"response bytes read (MB)", "%.1f", func(r factoryResult) float64 { return r.BodyMB }},
	} {
		f, ind := col(fFactory, row.get), col(fIndependent, row.get)
		ratio := "–"
		if ind != 0 && !math.IsNaN(ind) && !math.IsNaN(f) {
			ratio = fmt.Sprintf("%.2f", f/ind)
		}
		p("| %s | "+row.format+" | "+row.format+" | %s |\n", row.name, f, ind, ratio)
	}
	p("\nOther requests, first round: ")
	for i, kind := range []string{fFactory, fIndependent} {
		for _, r := range rs {
			if r.Contender == kind {
				if i > 0 {
					p("; ")
				}
				p("%s %s", kind, countPaths(r.OtherPaths))
				break
			}
		}
	}
	p(".\n")
	p("\n<details><summary>Every run</summary>\n\n| round | contender | synced (s) | handled (s) | CPU (s) | peak heap (MB) | HeapAlloc (MB) | HeapInuse (MB) | peak RSS (MB) | LIST | WATCH | streaming | other | read (MB) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		p("| %d | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %d | %d | %d | %d | %.1f |\n", r.Round, r.Contender, r.SyncSeconds, r.HandledSeconds,
			r.CPUSeconds, r.PeakHeapMB, r.HeapAllocMB, r.HeapInuseMB, r.PeakRSSMB, r.Lists, r.Watches, r.WatchLists, r.Other, r.BodyMB)
	}
	p("\n</details>\n%s\n", factoryEnd)
	return b.String()
}

// countPaths summarizes request paths in their first order: "`/api`, 2× `/api/v1`".
func countPaths(paths []string) string {
	if len(paths) == 0 {
		return "none"
	}
	n := map[string]int{}
	var order []string
	for _, p := range paths {
		if n[p] == 0 {
			order = append(order, p)
		}
		n[p]++
	}
	var parts []string
	for _, p := range order {
		if n[p] > 1 {
			parts = append(parts, fmt.Sprintf("%d× `%s`", n[p], p))
		} else {
			parts = append(parts, "`"+p+"`")
		}
	}
	return strings.Join(parts, ", ")
}
