package main

// The compact section of docs/benchmarks.md.

import (
	"fmt"
	"math"
	"os"
	"strings"
)

// medianOf is the median of f over the results whose kind is want.
func medianOf[R any](rs []R, kind func(R) string, want string, f func(R) float64) float64 {
	var xs []float64
	for _, r := range rs {
		if kind(r) == want {
			xs = append(xs, f(r))
		}
	}
	return median(xs)
}

// cell formats v, "–" when it is not a number.
func cell(format string, v float64) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return "–"
	}
	return fmt.Sprintf(format, v)
}

// quo is a/b to two decimals, "–" when either is not a number or b is 0.
func quo(a, b float64) string {
	if b == 0 {
		return "–"
	}
	return cell("%.2f", a/b)
}

// compactRow is one line of a table: a metric of each contender.
type compactRow[R any] struct {
	name, format string
	ratios       bool // ratios between contenders mean something
	get          func(R) float64
	goal         goal // issue 22's target for the compact contender, if any
}

// goal is one of issue 22's targets: the compact contender's figure (ref
// "") or its ratio to ref's at most max (0: no verdict, text only).
type goal struct {
	text string
	ref  string
	max  float64
}

// compactTable writes the table of rows for client-go, kinformer and
// kinformer+compact, with their ratios and, where a row has a goal, the
// verdict, also added to summary (prefixed by what).
func compactTable[R any](p func(string, ...any), summary *[]string, what string, rs []R, kindOf func(R) string, rows []compactRow[R]) {
	col := func(kind string, f func(R) float64) float64 { return medianOf(rs, kindOf, kind, f) }
	p("| metric | %s | %s | %s | kinformer ÷ client-go | compact ÷ client-go | compact ÷ kinformer | target (issue 22) |\n|---|---:|---:|---:|---:|---:|---:|---|\n", kClientGo, kKinformer, kCompact)
	for _, row := range rows {
		a, k, c := col(kClientGo, row.get), col(kKinformer, row.get), col(kCompact, row.get)
		r1, r2, r3 := "", "", ""
		if row.ratios {
			r1, r2, r3 = quo(k, a), quo(c, a), quo(c, k)
		}
		t := row.goal.text
		if g := row.goal; g.max > 0 {
			v := c
			if g.ref != "" {
				v = c / col(g.ref, row.get)
			}
			if !math.IsNaN(v) && !math.IsInf(v, 0) {
				t = fmt.Sprintf("%s: %.2f, %s", g.text, v, met(v <= g.max))
				*summary = append(*summary, fmt.Sprintf("%s, %s: %s", what, row.name, t))
			}
		}
		p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, cell(row.format, a), cell(row.format, k), cell(row.format, c), r1, r2, r3, t)
	}
	p("\n")
}

// fewMicros is how this report reads issue 22's "a few µs" more than a
// plain protobuf decode.
const fewMicros = 5.0

func compactReport(run compactRun) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := run.Machine
	loadEnd := run.LoadEnd
	if loadEnd == "" {
		loadEnd = loadavg()
	}
	p("%s\n## A cache of bytes: Options.Compact (issue 22)\n\n", compactBegin)
	p("Made on %s (%.0f minutes) with `%s`, %d cores (%s) **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, on one localapi run, by:\n\n    %s\n\n",
		m.Date, run.Minutes, m.GoVersion, m.NProc, m.CPU, m.LoadStart, loadEnd, run.Rev, benchCommand("compact", run.Args))
	p("Every contender runs in its own process (this program re-executed), the order rotating each round; figures are **medians over %d round(s)**, compare the ratios rather than the absolute values. Protobuf on the wire for built-in types, JSON for custom resources; one GET opens the connection and `runtime.GC()` runs before each clock starts. `kinformer+compact` is `kinformer.New` with `Options{Compact: true}`: the cache holds each object as bytes (built-in types their protobuf, custom resources JSON, managedFields cut) and decodes on every read.\n\n", run.Rounds)

	var summary []string
	if len(run.Pods) > 0 {
		p("### Pods\n\n")
		p("The main benchmark's realistic Deployment-style Pods (two containers, env with fieldRef/secretKeyRef, probes, resources, volumes, tolerations, anti-affinity, an owner reference; pending), created in `%s` with `Create` (48 writers; managedFields as the server writes them), each size adding to the one before. Contenders: `client-go` (`SharedInformerFactory`, defaults, with the index below added by `AddIndexers`), `kinformer` (`kinformer.New`, the index in `Options.Indexers`), `kinformer+compact` (the same with `Compact: true`). The index `group` files Pods `pod-00000`…`pod-%05d` under one value, and so on: %d Pods a value.\n\n", compactNamespace, run.PerIndex-1, run.PerIndex)
		p("- **Time to synced**, **CPU** (getrusage user+sys), **peak heap** (`%s`, sampled every 2 ms) up to `HasSynced`; **heap after sync**: once every initial ADDED was handled, `runtime.GC()` twice; **base**: the same before the informer was made (the process's own heap: client, scheme).\n", heapMetric)
		p("- **Protobuf bytes**: `Marshal` of every object `List` returns, with `ManagedFields = nil` (`Size()`): what a cache of bytes cannot go below. **Heap ÷ protobuf**: heap after sync over it (issue 22's physical limit: within 1.3x), also without the base.\n")
		p("- **Get**: `GetNamespaced` (client-go: the indexer's `GetByKey`) of %d random keys, each timed alone, median; **decode**: `(&corev1.Pod{}).Unmarshal` of the protobuf of each of the same objects (marshaled first, managedFields cut), timed alone, median. **ByIndex**: a random value of `group`, timed, divided by the objects returned, median of the calls; its **decode**: `Unmarshal` of those objects' protobuf, per object. **List**: the whole cache, per object, median of 3.\n\n", run.Reads)
		for _, pr := range run.Pods {
			compactPodTable(p, &summary, pr, run.Rounds)
		}
		if len(run.Pods) > 1 {
			compactGrowth(p, run.Pods)
		}
	}
	if run.CRD != nil {
		compactCRDTable(p, &summary, *run.CRD)
	}
	if len(run.Restart) > 0 {
		compactRestartTables(p, &summary, run)
	}
	if len(summary) > 0 {
		p("### Issue 22's targets at a glance\n\n")
		for _, l := range summary {
			p("- %s\n", l)
		}
		p("\nThe update path's target (CPU per update event with Compact ≤ 1.2x kinformer without it) for ConfigMaps and Pods is in the main benchmark's tables (`kinformer+compact`).\n\n")
	}
	if len(run.Profiles) > 0 {
		p("Profiles (`-profile`, not kept): %s. Read them with `go tool pprof -top FILE`.\n\n", "`"+strings.Join(run.Profiles, "`, `")+"`")
	}
	compactEveryRun(p, run)
	p("%s\n", compactEnd)
	return b.String()
}

func compactPodTable(p func(string, ...any), summary *[]string, pr compactPodRun, rounds int) {
	kindOf := func(r compactResult) string { return r.Contender }
	col := func(kind string, f func(compactResult) float64) float64 { return medianOf(pr.Results, kindOf, kind, f) }
	proto := col(kClientGo, func(r compactResult) float64 { return r.ProtoMB })
	n := float64(pr.Size)
	p("#### %d Pods: medians of %d round(s)\n\n", pr.Size, rounds)
	p("Protobuf of the cached Pods (managedFields cut): **%.1f MB**, %.0f bytes a Pod (created in %.0f s).\n\n", proto, proto*(1<<20)/n, pr.CreateSeconds)
	few := fmt.Sprintf("≤ a few µs (read: %g)", fewMicros)
	compactTable(p, summary, fmt.Sprintf("%d Pods", pr.Size), pr.Results, kindOf, []compactRow[compactResult]{
		{"time to synced (s)", "%.3f", true, func(r compactResult) float64 { return r.SyncSeconds }, goal{"≤ 1 × kinformer", kKinformer, 1}},
		{"time to all initial ADDED handled (s)", "%.3f", true, func(r compactResult) float64 { return r.HandledSeconds }, goal{}},
		{"CPU for the sync (s)", "%.3f", true, func(r compactResult) float64 { return r.SyncCPUSeconds }, goal{"≤ 0.8 × client-go", kClientGo, 0.8}},
		{"peak Go heap during sync (MB)", "%.1f", true, func(r compactResult) float64 { return r.PeakHeapMB }, goal{"≤ 0.5 × client-go", kClientGo, 0.5}},
		{"peak RSS, VmHWM (MB)", "%.1f", true, func(r compactResult) float64 { return r.PeakRSSMB }, goal{}},
		{"heap after sync (MB)", "%.1f", true, func(r compactResult) float64 { return r.HeapAfterSyncMB }, goal{"≤ 0.25 × client-go", kClientGo, 0.25}},
		{"heap after sync − base (MB)", "%.1f", true, func(r compactResult) float64 { return r.HeapAfterSyncMB - r.HeapBaseMB }, goal{}},
		{"heap after sync per Pod (KB)", "%.2f", true, func(r compactResult) float64 { return r.HeapAfterSyncMB * 1024 / n }, goal{}},
		{"heap after sync ÷ protobuf bytes", "%.2f", false, func(r compactResult) float64 { return r.HeapAfterSyncMB / proto }, goal{"≤ 1.3", "", 1.3}},
		{"(heap after sync − base) ÷ protobuf bytes", "%.2f", false, func(r compactResult) float64 { return (r.HeapAfterSyncMB - r.HeapBaseMB) / proto }, goal{}},
		{"Get of a random key (ns)", "%.0f", true, func(r compactResult) float64 { return r.GetNs }, goal{}},
		{"protobuf decode of that object (ns)", "%.0f", false, func(r compactResult) float64 { return r.GetDecodeNs }, goal{}},
		{"Get − decode (µs)", "%.2f", false, compactOnly(func(r compactResult) float64 { return (r.GetNs - r.GetDecodeNs) / 1000 }), goal{few, "", fewMicros}},
		{fmt.Sprintf("ByIndex, per object (ns; %.0f objects a call)", col(kCompact, func(r compactResult) float64 { return r.IndexObjects })), "%.0f", true, func(r compactResult) float64 { return r.ByIndexNs }, goal{}},
		{"protobuf decode of those objects, per object (ns)", "%.0f", false, func(r compactResult) float64 { return r.IndexDecNs }, goal{}},
		{"ByIndex − decode, per object (µs)", "%.2f", false, compactOnly(func(r compactResult) float64 { return (r.ByIndexNs - r.IndexDecNs) / 1000 }), goal{few, "", fewMicros}},
		{"List of the whole cache, per object (ns)", "%.0f", true, func(r compactResult) float64 { return r.ListNs }, goal{}},
	})
}

// compactOnly is f for the compact contender, not a number for the others
// (whose reads decode nothing).
func compactOnly(f func(compactResult) float64) func(compactResult) float64 {
	return func(r compactResult) float64 {
		if r.Contender != kCompact {
			return math.NaN()
		}
		return f(r)
	}
}

// compactGrowth shows how the ratios move from one Pod size to the next.
func compactGrowth(p func(string, ...any), prs []compactPodRun) {
	p("#### How the ratios grow with the number of Pods\n\n")
	p("| Pods | heap after ÷ client-go | peak heap ÷ client-go | sync CPU ÷ client-go | time to synced ÷ kinformer | heap after ÷ protobuf | KB a Pod: client-go / kinformer / compact | Get − decode (µs) | ByIndex − decode, per object (µs) |\n|---:|---:|---:|---:|---:|---:|---|---:|---:|\n")
	for _, pr := range prs {
		kindOf := func(r compactResult) string { return r.Contender }
		col := func(kind string, f func(compactResult) float64) float64 { return medianOf(pr.Results, kindOf, kind, f) }
		ratio := func(ref string, f func(compactResult) float64) string { return quo(col(kCompact, f), col(ref, f)) }
		proto := col(kClientGo, func(r compactResult) float64 { return r.ProtoMB })
		kb := func(kind string) string {
			return cell("%.2f", col(kind, func(r compactResult) float64 { return r.HeapAfterSyncMB })*1024/float64(pr.Size))
		}
		p("| %d | %s | %s | %s | %s | %s | %s / %s / %s | %s | %s |\n", pr.Size,
			ratio(kClientGo, func(r compactResult) float64 { return r.HeapAfterSyncMB }),
			ratio(kClientGo, func(r compactResult) float64 { return r.PeakHeapMB }),
			ratio(kClientGo, func(r compactResult) float64 { return r.SyncCPUSeconds }),
			ratio(kKinformer, func(r compactResult) float64 { return r.SyncSeconds }),
			quo(col(kCompact, func(r compactResult) float64 { return r.HeapAfterSyncMB }), proto),
			kb(kClientGo), kb(kKinformer), kb(kCompact),
			cell("%.2f", col(kCompact, func(r compactResult) float64 { return (r.GetNs - r.GetDecodeNs) / 1000 })),
			cell("%.2f", col(kCompact, func(r compactResult) float64 { return (r.ByIndexNs - r.IndexDecNs) / 1000 })))
	}
	p("\n")
}

func compactCRDTable(p func(string, ...any), summary *[]string, cr crdRun) {
	kindOf := func(r crdResult) string { return r.Contender }
	jsonMB := cr.JSONBytes * float64(cr.Size) / (1 << 20)
	p("### %d custom resources (JSON)\n\n", cr.Size)
	p("The crd benchmark's Widgets (`go run . crd`: about 1.2 KiB of JSON each, nested objects, lists, numbers; created in %.0f s) and contenders: `%s` (`dynamicinformer` factory, defaults), `%s` (`kinformer.New` over `dyn.Resource(gvr).Namespace(ns)`), `%s` (the same with `Compact: true`). JSON of the cached objects without managedFields (`json.Marshal` of each listed object): **%.1f MB**, %.0f bytes each (%.0f with managedFields). **CPU per update event**: the parent merge-patches %d Widgets once each (32 writers) after each sync; CPU from synced to the last of those events, per event.\n\n",
		cr.CreateSeconds, cClientGo, cKinformer, cKinCompact, jsonMB, cr.JSONBytes, cr.JSONBytesMF, cr.Updates)
	compactTable(p, summary, fmt.Sprintf("%d custom resources", cr.Size), cr.Results, kindOf, []compactRow[crdResult]{
		{"time to synced (s)", "%.3f", true, func(r crdResult) float64 { return r.SyncSeconds }, goal{"≤ 1 × kinformer", kKinformer, 1}},
		{"time to all initial ADDED handled (s)", "%.3f", true, func(r crdResult) float64 { return r.HandledSeconds }, goal{}},
		{"CPU for the sync (s)", "%.3f", true, func(r crdResult) float64 { return r.SyncCPUSeconds }, goal{"≤ 0.8 × client-go", kClientGo, 0.8}},
		{"peak Go heap during sync (MB)", "%.1f", true, func(r crdResult) float64 { return r.PeakHeapMB }, goal{"≤ 0.5 × client-go", kClientGo, 0.5}},
		{"peak RSS, VmHWM (MB)", "%.1f", true, func(r crdResult) float64 { return r.PeakRSSMB }, goal{}},
		{"heap after sync (MB)", "%.1f", true, func(r crdResult) float64 { return r.HeapAfterSyncMB }, goal{"≤ 0.25 × client-go", kClientGo, 0.25}},
		{"heap after sync ÷ JSON bytes", "%.2f", false, func(r crdResult) float64 { return r.HeapAfterSyncMB / jsonMB }, goal{"≤ 1.3", "", 1.3}},
		{"CPU per update event (µs)", "%.1f", true, func(r crdResult) float64 { return r.UpdateCPUMicros }, goal{"≤ 1.2 × kinformer", kKinformer, 1.2}},
		{"update events handled", "%.0f", false, func(r crdResult) float64 { return float64(r.Updates) }, goal{}},
	})
	for k, why := range cr.Skipped {
		p("\n`%s` left out: %s\n", k, why)
	}
	p("\n")
}

func compactRestartTables(p func(string, ...any), summary *[]string, run compactRun) {
	kinds := []string{rClientGoCold, rKinformerCold, rKinformerWarm, rCompactCold, rCompactWarm}
	p("### Warm restart with Compact and StateDir\n\n")
	p("The restart benchmark's contenders (`go run . restart`) on the main workload (%d ConfigMaps in `%s`, %d Pods in `%s`): `%s` (the `SharedInformerFactory`), `%s` / `%s` (`Options{StateDir: dir}`: the full list and the state file written, then a new process on the same directory after %.1f%% of the objects changed), and `%s` / `%s`, the same with `Compact: true` on a directory of their own. Clock from just before the informer is made to synced; **from exec** adds the process's start. **Read**: response bytes of the collection's requests up to synced (a `WrapTransport`, after gunzip). **Heap after**: once stopped, `runtime.GC()` twice. Every cache was compared with a LIST once stopped (the *differing* column of every run).\n\n",
		run.RestartNCM, cmNamespace, run.RestartNPods, podNamespace, rClientGoCold, rKinformerCold, rKinformerWarm, run.Churn*100, rCompactCold, rCompactWarm)
	for _, res := range []struct {
		name string
		n    int
	}{{"configmaps", run.RestartNCM}, {"pods", run.RestartNPods}} {
		if res.n == 0 {
			continue
		}
		var rs []restartResult
		for _, r := range run.Restart {
			if r.Resource == res.name {
				rs = append(rs, r)
			}
		}
		kindOf := func(r restartResult) string { return r.Contender }
		col := func(kind string, f func(restartResult) float64) float64 { return medianOf(rs, kindOf, kind, f) }
		p("#### %d %s\n\n| metric |", res.n, map[string]string{"configmaps": "ConfigMaps", "pods": "Pods"}[res.name])
		for _, k := range kinds {
			p(" %s |", k)
		}
		p(" client-go cold ÷ warm compact | client-go cold ÷ kinformer warm | warm compact ÷ kinformer warm |\n|---|")
		for range kinds {
			p("---:|")
		}
		p("---:|---:|---:|\n")
		for _, row := range []compactRow[restartResult]{
			{"time to synced, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncSeconds }, goal{}},
			{"time to synced, from exec (s)", "%.3f", true, func(r restartResult) float64 { return r.ExecSeconds }, goal{}},
			{"time to handled, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.HandledSeconds }, goal{}},
			{"CPU to synced (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncCPUSeconds }, goal{}},
			{"response bytes read (MB)", "%.3f", true, func(r restartResult) float64 { return r.BodyMB }, goal{}},
			{"peak Go heap (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakHeapMB }, goal{}},
			{"heap after (MB)", "%.1f", true, func(r restartResult) float64 { return r.HeapAfterSyncMB }, goal{}},
			{"peak RSS, VmHWM (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakRSSMB }, goal{}},
			{"state file (MB)", "%.1f", false, func(r restartResult) float64 { return r.FileMB }, goal{}},
		} {
			p("| %s |", row.name)
			for _, k := range kinds {
				p(" %s |", cell(row.format, col(k, row.get)))
			}
			if row.ratios {
				cg, kw, cw := col(rClientGoCold, row.get), col(rKinformerWarm, row.get), col(rCompactWarm, row.get)
				p(" %s | %s | %s |\n", quo(cg, cw), quo(cg, kw), quo(cw, kw))
			} else {
				p(" | | |\n")
			}
		}
		t := func(k string) float64 { return col(k, func(r restartResult) float64 { return r.SyncSeconds }) }
		by := func(k string) float64 { return col(k, func(r restartResult) float64 { return r.BodyMB }) }
		faster, fewer := t(rClientGoCold)/t(rCompactWarm), by(rClientGoCold)/by(rCompactWarm)
		p("\nTargets (warm compact against client-go cold): time to synced at least 5x faster — **%.1fx** (%s); at least 20x fewer bytes read — **%.0fx** (%s). Without Compact, kinformer warm: %.1fx and %.0fx.\n\n",
			faster, met(faster >= 5), fewer, met(fewer >= 20), t(rClientGoCold)/t(rKinformerWarm), by(rClientGoCold)/by(rKinformerWarm))
		what := fmt.Sprintf("warm restart, %d %s", res.n, res.name)
		*summary = append(*summary, fmt.Sprintf("%s: time to synced, client-go cold ÷ warm compact ≥ 5: %.1f, %s", what, faster, met(faster >= 5)),
			fmt.Sprintf("%s: bytes read, client-go cold ÷ warm compact ≥ 20: %.0f, %s", what, fewer, met(fewer >= 20)))
	}
}

func compactEveryRun(p func(string, ...any), run compactRun) {
	p("<details><summary>Every run</summary>\n\n")
	if len(run.Pods) > 0 {
		p("| Pods | round | contender | synced (s) | CPU (s) | peak heap (MB) | base (MB) | heap after (MB) | RSS (MB) | protobuf (MB) | Get (ns) | decode (ns) | ByIndex (ns/object) | decode (ns/object) | List (ns/object) |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, pr := range run.Pods {
			for _, r := range pr.Results {
				p("| %d | %d | %s | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %.1f | %.0f | %.0f | %.0f | %.0f | %.0f |\n", pr.Size, r.Round, r.Contender, r.SyncSeconds, r.SyncCPUSeconds,
					r.PeakHeapMB, r.HeapBaseMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.ProtoMB, r.GetNs, r.GetDecodeNs, r.ByIndexNs, r.IndexDecNs, r.ListNs)
			}
		}
		p("\n")
	}
	if run.CRD != nil {
		p("| CRs | round | contender | synced (s) | CPU (s) | peak heap (MB) | heap after (MB) | RSS (MB) | CPU/update (µs) | updates | read (MB) | errors |\n|---:|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|\n")
		for _, r := range run.CRD.Results {
			p("| %d | %d | %s | %.3f | %.3f | %.1f | %.1f | %.1f | %.1f | %d | %.1f | %s |\n", r.Size, r.Round, r.Contender, r.SyncSeconds, r.SyncCPUSeconds,
				r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.UpdateCPUMicros, r.Updates, r.BodyMB, joinOr(r.Errors, ""))
		}
		p("\n")
	}
	if len(run.Restart) > 0 {
		p("| round | resource | contender | objects | differing | synced (s) | from exec (s) | CPU (s) | read (MB) | requests | heap after (MB) | file (MB) | errors |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---|---:|---:|---|\n")
		for _, r := range run.Restart {
			p("| %d | %s | %s | %d | %d | %.3f | %.3f | %.3f | %.3f | %s | %.1f | %.1f | %s |\n", r.Round, r.Resource, r.Contender, r.Objects, r.Differ, r.SyncSeconds, r.ExecSeconds,
				r.SyncCPUSeconds, r.BodyMB, joinOr(r.Requests, "none"), r.HeapAfterSyncMB, r.FileMB, joinOr(r.Errors, ""))
		}
		p("\n")
	}
	p("State files in %s; the Pods' namespace `%s`.\n\n</details>\n", os.TempDir(), compactNamespace)
}
