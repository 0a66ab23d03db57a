package main

import (
	"fmt"
	"math"
	"slices"
	"strings"
)

type crMetric struct {
	name, format string
	get          func(crResult) float64
	updates      bool // only with an update burst
}

var crMetrics = []crMetric{
	{"time to caches synced, from exec (s)", "%.3f", func(r crResult) float64 { return r.SyncSeconds }, false},
	{"time to every object reconciled once, from exec (s)", "%.3f", func(r crResult) float64 { return r.ReconciledSeconds }, false},
	{"CPU to synced, user+sys (s)", "%.3f", func(r crResult) float64 { return r.SyncCPUSeconds }, false},
	{"CPU to reconciled, user+sys (s)", "%.3f", func(r crResult) float64 { return r.ReconciledCPUSeconds }, false},
	{"peak Go heap to synced (MB)", "%.1f", func(r crResult) float64 { return r.PeakHeapMB }, false},
	{"peak Go heap to reconciled (MB)", "%.1f", func(r crResult) float64 { return r.PeakHeapReconciledMB }, false},
	{"heap after sync (reconciled, after GC) (MB)", "%.1f", func(r crResult) float64 { return r.HeapAfterSyncMB }, false},
	{"peak RSS (VmHWM) at reconciled (MB)", "%.1f", func(r crResult) float64 { return r.PeakRSSMB }, false},
	{"CPU per update reconcile (µs)", "%.1f", func(r crResult) float64 { return r.UpdateCPUMicros }, true},
	{"reconcile latency p50, from write response (ms)", "%.1f", func(r crResult) float64 { return r.LatencyP50Ms }, true},
	{"reconcile latency p99, from write response (ms)", "%.1f", func(r crResult) float64 { return r.LatencyP99Ms }, true},
	{"heap after the burst (after GC) (MB)", "%.1f", func(r crResult) float64 { return r.HeapAfterBurstMB }, true},
}

// ratioCell is a/b, or "–".
func ratioCell(a, b float64) string {
	if b == 0 || math.IsNaN(a) || math.IsNaN(b) || (a <= 0 && b <= 0) {
		return "–"
	}
	return fmt.Sprintf("%.2f", a/b)
}

// crReport is the cr section of docs/benchmarks.md, markers included.
func crReport(m machine, c crConfig, crs []crResult, cgs []result, bursts []burstStat) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cmd := benchCommand("cr", c.args)
	p("%s\n## controller-runtime: a manager and two reconcilers\n\n", crBegin)
	p("What a controller author gets: the same controller-runtime v0.25.2 manager and reconcilers over the main workload (%d ConfigMaps of about 1 KiB in `%s`, %d Pods in `%s`), with controller-runtime's own cache and with kinformer's informers under it. Made on %s with `%s`, %d cores **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, medians of %d round(s), by:\n\n    %s\n\n",
		c.configMaps, cmNamespace, c.pods, podNamespace, m.Date, m.GoVersion, m.NProc, m.LoadStart, m.LoadEnd, c.rev, c.rounds, cmd)
	p("- The manager: `ctrl.NewManager(cfg, ctrl.Options{Metrics: server.Options{BindAddress: \"0\"}, HealthProbeBindAddress: \"0\", LeaderElection: false})`: the default scheme, a cluster-wide cache (every namespace), the default client (reads from the cache, deep copies). Protobuf on the wire, as in the main benchmark.\n")
	p("- Two reconcilers, `ctrl.NewControllerManagedBy(mgr).For(...)` with the default options (one worker each, the priority queue): ConfigMaps, a cached `Get`; Pods, a cached `Get` and a `List` with `client.InNamespace` and `client.MatchingFields` on a field index registered with `mgr.GetFieldIndexer().IndexField`: Pods by the ConfigMaps their volumes mount (`%s`, 20 Pods per value; `spec.nodeName` would be empty for every Pod, nothing schedules them), checking the Pod is in its own List.\n", podConfigMapIndex)
	p("- Contenders, each in its own process (this program re-executed), the order rotating every round:\n")
	p("  - `%s`: controller-runtime's own cache (`cache.New`, client-go SharedIndexInformers).\n", kCR)
	p("  - `%s`: the same cache with `Cache: cache.Options{NewInformer: clientgo.NewSharedIndexInformer}`: kinformer's informers under controller-runtime's cache, over the `cache.ListWatch` controller-runtime builds (its REST client inside: client-go decodes the lists and watches).\n", kCRNewInformer)
	p("  - `%s`: kinformer's controller-runtime cache, `Options.NewCache: kcr.NewCache` (a kinformer Factory's informers: kinformer's protobuf decoder; each object held as compressed bytes, decoded by every read in place of the deep copy; managedFields kept, as controller-runtime's cache keeps them), and `%s`: `kcr.With(kcr.Options{Decoded: true})`, objects held decoded and deep-copied by every read, as controller-runtime's cache holds them.\n", kCRKCR, kCRKCRDecoded)
	p("  - `%s`: controller-runtime's own cache with `DefaultTransform: cache.TransformStripManagedFields()`, and `%s`: `kcr.With(kcr.Options{DropManagedFields: true})`: both without managedFields, the configuration controller-runtime recommends for memory.\n", kCRStrip, kCRKCRDrop)
	p("- **Times from exec**: the parent's clock just before it starts the process, to both informers' `HasSynced` (polled every 1 ms; then `mgr.GetCache().WaitForCacheSync` confirms), and to each reconciler having reconciled every object of the workload once (reconciles counted). They include the binary's start, `NewManager`, discovery and the connection. **CPU**: the process's getrusage user+sys at those moments. **Peak heap**: the highest `%s` sample (every 2 ms from main) up to synced, and up to reconciled. **Heap after sync**: once reconciled, `runtime.GC()` twice. **Peak RSS**: `VmHWM` once reconciled.\n", heapMetric)
	if c.updates > 0 {
		var secs []float64
		for _, x := range bursts {
			secs = append(secs, x.Seconds)
		}
		p("- **Update burst**: once reconciled, the parent patches %d ConfigMaps, each once, as the main benchmark does (%d writers; median %.1f s per burst); the ConfigMap reconciler records the reconciles whose `Get` sees its burst's annotation. **CPU per update reconcile**: CPU from then to the last one, divided by them (the watch event, the cache, the queue, the reconcile's `Get` and its deep copy). **Latency**: reconcile time minus the write's response time.\n", c.updates, c.writers, median(secs))
	}
	p("- The parent checks every run: its cache held the workload, no reconcile failed, every update was reconciled.\n\n")

	crMed := func(kind string, f func(crResult) float64) float64 {
		var xs []float64
		for _, r := range crs {
			if r.Contender == kind {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	p("| metric |")
	for _, k := range c.contenders {
		p(" %s |", k)
	}
	for _, k := range c.contenders[1:] {
		p(" %s / %s |", k, c.contenders[0])
	}
	p("\n|---|%s%s\n", strings.Repeat("---:|", len(c.contenders)), strings.Repeat("---:|", len(c.contenders)-1))
	for _, mt := range crMetrics {
		if mt.updates && c.updates == 0 {
			continue
		}
		p("| %s |", mt.name)
		for _, k := range c.contenders {
			p(" "+mt.format+" |", crMed(k, mt.get))
		}
		for _, k := range c.contenders[1:] {
			p(" %s |", ratioCell(crMed(k, mt.get), crMed(c.contenders[0], mt.get)))
		}
		p("\n")
	}
	p("\n<details><summary>Every run</summary>\n\n| round | contender | exec→main (s) | synced (s) | reconciled (s) | CPU synced (s) | CPU reconciled (s) | peak heap synced (MB) | peak heap reconciled (MB) | heap after (MB) | peak RSS (MB) | CM reconciles | Pod reconciles | CPU/update (µs) | p50 (ms) | p99 (ms) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range crs {
		p("| %d | %s | %.3f | %.3f | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %d | %d | %.1f | %.1f | %.1f |\n", r.Round, r.Contender, r.MainSeconds,
			r.SyncSeconds, r.ReconciledSeconds, r.SyncCPUSeconds, r.ReconciledCPUSeconds, r.PeakHeapMB, r.PeakHeapReconciledMB, r.HeapAfterSyncMB,
			r.PeakRSSMB, r.CMReconciles, r.PodReconciles, r.UpdateCPUMicros, r.LatencyP50Ms, r.LatencyP99Ms)
	}
	p("\n</details>\n\n")

	if len(c.cgContenders) > 0 {
		crClientGoReport(p, c, cgs)
	}
	p("%s\n", crEnd)
	return b.String()
}

// crClientGoReport is the part outside controller-runtime: client-go's
// SharedInformerFactory against kinformer's client-go SharedIndexInformers.
func crClientGoReport(p func(string, ...any), c crConfig, rs []result) {
	p("### Outside controller-runtime: client-go SharedIndexInformers\n\n")
	p("The main benchmark's contender (`contender -kind K -lister`, the parent as above), one collection per process, its namespace only, one handler counting Added and recording Modified, which first reads its object back: through a client-go lister (`corelisters.NewConfigMapLister(inf.GetIndexer()).ConfigMaps(ns).Get(name)`, or Pods) for the SharedIndexInformers, through `Cache().GetNamespaced` for kinformer. The clock starts at `Start`/`Run` after a GET has opened the connection; the main benchmark's definitions otherwise.\n\n")
	p("- `%s`: `informers.NewSharedInformerFactoryWithOptions(cs, 0, WithNamespace(ns))`, the typed informer (the main benchmark's).\n", kClientGo)
	p("- `%s`: `clientgo.NewSharedIndexInformer(cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), resource, ns, fields.Everything()), &corev1.ConfigMap{}, 0, cache.Indexers{namespace})`: client-go's signature over a plain ListWatch, which hides the client, so client-go decodes.\n", kKClientGo)
	p("- `%s`: `clientgo.Wrap(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), nil))`: kinformer's own decoders.\n", kKClientGoWrap)
	if slices.Contains(c.cgContenders, kKinformer) {
		p("- `%s`: `kinformer.New` and `AddHandler`, no client-go interface (the main benchmark's), for reference.\n", kKinformer)
	}
	p("\n")
	base := c.cgContenders[0]
	for _, res := range []string{"configmaps", "pods"} {
		var rr []result
		for _, r := range rs {
			if r.Resource == res {
				rr = append(rr, r)
			}
		}
		n := c.configMaps
		if res == "pods" {
			n = c.pods
		}
		p("#### %d %s\n\n| metric |", n, map[string]string{"configmaps": "ConfigMaps", "pods": "Pods"}[res])
		for _, k := range c.cgContenders {
			p(" %s |", k)
		}
		for _, k := range c.cgContenders[1:] {
			p(" %s / %s |", k, base)
		}
		p("\n|---|%s%s\n", strings.Repeat("---:|", len(c.cgContenders)), strings.Repeat("---:|", len(c.cgContenders)-1))
		for _, mt := range metricsTable {
			if mt.updates && (res != "configmaps" || c.updates == 0) {
				continue
			}
			if strings.Contains(mt.name, "from write request") {
				continue
			}
			name := mt.name
			if mt.unit != "" {
				name += " (" + mt.unit + ")"
			}
			p("| %s |", name)
			for _, k := range c.cgContenders {
				p(" "+mt.format+" |", median(collect(rr, k, mt.get)))
			}
			for _, k := range c.cgContenders[1:] {
				if mt.unit == "" {
					p(" – |")
					continue
				}
				p(" %s |", ratioCell(median(collect(rr, k, mt.get)), median(collect(rr, base, mt.get))))
			}
			p("\n")
		}
		p("\n<details><summary>Every run</summary>\n\n| round | contender | synced (s) | handled (s) | CPU (s) | peak heap (MB) | heap after (MB) | peak RSS (MB) | CPU/update (µs) | p50 (ms) | p99 (ms) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range rr {
			p("| %d | %s | %.3f | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.1f |\n", r.Round, r.Contender, r.SyncSeconds, r.HandledSeconds,
				r.SyncCPUSeconds, r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.UpdateCPUMicros, r.LatencyP50Ms, r.LatencyP99Ms)
		}
		p("\n</details>\n\n")
	}
}
