package main

// The warm-restart benchmark: what Options.StateDir saves a process that
// restarts (time, bytes, requests, CPU, heap to synced; client-go's cold
// start, kinformer's cold start writing the state file, and kinformer's
// warm start from it after some changes), and what it costs on the update
// path (CPU per update event with the file kept, fsync on and off, and
// without it).
//
//	cd tools/bench && go run . restart

import (
	"fmt"
	"math"
	"os"
	"slices"
	"strings"
)

// restartRun is what the report is made from, saved with -save to be
// re-rendered with -replay.
type restartRun struct {
	Machine            machine
	LoadEnd, Rev       string
	Args               []string
	Rounds, NCM, NPods int
	Churn              float64
	Updates, Writers   int
	Results, Ups       []restartResult
	Bursts             []burstStat
	ChurnSec           float64
}

// restartReport is the restart section of docs/benchmarks.md, markers included.
func restartReport(rr restartRun) string {
	m, rev, args, rounds, nCM, nPods, churn, updates, writers, rs, ups, bursts, churnSec := rr.Machine, rr.Rev, rr.Args, rr.Rounds, rr.NCM, rr.NPods, rr.Churn, rr.Updates, rr.Writers, rr.Results, rr.Ups, rr.Bursts, rr.ChurnSec
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cmd := benchCommand("restart", args)
	col := func(xs []restartResult, kind, resource string, f func(restartResult) float64) float64 {
		var v []float64
		for _, r := range xs {
			if r.Contender == kind && r.Resource == resource {
				v = append(v, f(r))
			}
		}
		return median(v)
	}
	ratio := func(a, b float64) string {
		if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "–"
		}
		return fmt.Sprintf("%.3f", a/b)
	}
	num := func(format string, v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}

	p("%s\n## Warm restart: the durable cache (Options.StateDir)\n\n", restartBegin)
	p("Made on %s with `%s`, %d cores **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, state files on the local disk (`%s`), by:\n\n    %s\n\n",
		m.Date, m.GoVersion, m.NProc, m.LoadStart, rr.LoadEnd, rev, os.TempDir(), cmd)
	p("- Workload: %d ConfigMaps of about 1 KiB and %d Pods, as the main benchmark's. Each contender is this program re-executed, in its own process; %d round(s), the order alternating (client-go cold first in odd rounds, last in even ones); figures are medians.\n", nCM, nPods, rounds)
	p("- `%s`: `informers.NewSharedInformerFactoryWithOptions(cs, 0, WithNamespace(ns))`, the typed informer, one handler, `HasSynced` polled every 1 ms. `%s`: `kinformer.New` with `Options{StateDir: dir}` on an empty directory (a fresh one each round): the full initial list, and the state file written. `%s`: the same `StateDir` in a new process, after `%s` stopped cleanly (`Stop`) and the parent changed %.1f%% of the objects (%.1f%% modified, %.1f%% deleted, %.1f%% created; median %.1f s of writes): the objects restored from the file (`Added`, `CauseRestore`), the one-object probe, a watch from the file's resourceVersion. `%s`: the same again after `%s` stopped, as many changes, and then **one write to a ConfigMap in another namespace**, as a live cluster makes all the time (leases, events): the server's resourceVersion, which the probe learns, is then past the collection's last change.\n",
		rClientGoCold, rKinformerCold, rKinformerWarm, rKinformerCold, churn*100, churn*50, churn*25, churn*25, churnSec, rKinformerBusy, rKinformerWarm)
	p("- Same rest.Config for all (protobuf, 1000 QPS, gzip on). Each process first makes one GET to open the connection; then `runtime.GC()`, and the clock starts **just before the informer (or factory) is made**, and stops when `WaitForSync` returns (kinformer) or `HasSynced` is true (client-go). **From exec** adds the process's start: the parent's `exec` to synced (Go runtime, client construction, the connection-opening GET).\n")
	p("- **Handled**: the handler's registration `HasSynced` (and, for kinformer, no event pending): every event up to sync delivered. **Durable**: kinformer's `Stop`, called once handled, returns once the last commit is in the file (fsync on): the time until the first start's work is on disk. client-go has no file; its `Stop` is the factory's `Shutdown`. Once stopped, each contender's cache is compared with a LIST (names and resourceVersions; nothing changes the collection meanwhile): every run below matched unless the table says otherwise.\n")
	p("- **CPU**: getrusage user+sys over the same interval. **Read**: response body bytes read through a `WrapTransport`, after gunzip, up to synced. **Requests** up to synced: a GET of the collection is a LIST, with `watch=true` a WATCH. **Peak heap**: highest `%s` sample (every 2 ms) up to synced; **heap after**: after `Stop`, `runtime.GC()` twice (the cache still referenced). **Peak RSS**: `VmHWM` at synced.\n\n", heapMetric)

	for _, res := range []struct {
		name string
		n    int
	}{{"configmaps", nCM}, {"pods", nPods}} {
		if res.n == 0 {
			continue
		}
		p("### %d %s\n\n", res.n, map[string]string{"configmaps": "ConfigMaps", "pods": "Pods"}[res.name])
		p("| metric | %s | %s | %s | %s | warm ÷ client-go cold | warm ÷ kinformer cold | busy ÷ client-go cold |\n|---|---:|---:|---:|---:|---:|---:|---:|\n", rClientGoCold, rKinformerCold, rKinformerWarm, rKinformerBusy)
		for _, row := range []struct {
			name, format string
			ratios       bool
			get          func(restartResult) float64
		}{
			{"time to synced, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncSeconds }},
			{"time to synced, from exec (s)", "%.3f", true, func(r restartResult) float64 { return r.ExecSeconds }},
			{"time to handled, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.HandledSeconds }},
			{"time to durable: Stop returned (s)", "%.3f", false, func(r restartResult) float64 {
				if r.Contender == rClientGoCold {
					return math.NaN()
				}
				return r.DurableSeconds
			}},
			{"CPU to synced, user+sys (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncCPUSeconds }},
			{"CPU to durable (s)", "%.3f", false, func(r restartResult) float64 {
				if r.Contender == rClientGoCold {
					return math.NaN()
				}
				return r.DurableCPU
			}},
			{"response bytes read (MB)", "%.2f", true, func(r restartResult) float64 { return r.BodyMB }},
			{"LIST requests", "%.0f", false, func(r restartResult) float64 { return float64(r.Lists) }},
			{"WATCH requests", "%.0f", false, func(r restartResult) float64 { return float64(r.Watches + r.WatchLists) }},
			{"other requests (discovery)", "%.0f", false, func(r restartResult) float64 { return float64(r.Other) }},
			{"peak Go heap (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakHeapMB }},
			{"heap after sync (MB)", "%.1f", true, func(r restartResult) float64 { return r.HeapAfterSyncMB }},
			{"peak RSS, VmHWM (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakRSSMB }},
			{"state file (MB)", "%.1f", false, func(r restartResult) float64 {
				if r.Contender == rClientGoCold {
					return math.NaN()
				}
				return r.FileMB
			}},
		} {
			cg, kc, kw, kb := col(rs, rClientGoCold, res.name, row.get), col(rs, rKinformerCold, res.name, row.get), col(rs, rKinformerWarm, res.name, row.get), col(rs, rKinformerBusy, res.name, row.get)
			r1, r2, r3 := "", "", ""
			if row.ratios {
				r1, r2, r3 = ratio(kw, cg), ratio(kw, kc), ratio(kb, cg)
			}
			p("| %s | %s | %s | %s | %s | %s | %s | %s |\n", row.name, num(row.format, cg), num(row.format, kc), num(row.format, kw), num(row.format, kb), r1, r2, r3)
		}
		p("\nRequests (first round): ")
		for i, kind := range []string{rClientGoCold, rKinformerCold, rKinformerWarm, rKinformerBusy} {
			for _, r := range rs {
				if r.Contender == kind && r.Resource == res.name {
					if i > 0 {
						p("; ")
					}
					p("%s: %s", kind, joinOr(r.Requests, "none"))
					break
				}
			}
		}
		p(". Events handled (first round): ")
		for i, kind := range []string{rKinformerCold, rKinformerWarm, rKinformerBusy} {
			for _, r := range rs {
				if r.Contender == kind && r.Resource == res.name {
					if i > 0 {
						p("; ")
					}
					p("%s: %s", kind, causeString(r.Causes))
					break
				}
			}
		}
		p(".\n\n")
		tw, tb := col(rs, rKinformerWarm, res.name, func(r restartResult) float64 { return r.SyncSeconds }), col(rs, rKinformerWarm, res.name, func(r restartResult) float64 { return r.BodyMB })
		tc, bc := col(rs, rClientGoCold, res.name, func(r restartResult) float64 { return r.SyncSeconds }), col(rs, rClientGoCold, res.name, func(r restartResult) float64 { return r.BodyMB })
		tbz, bbz := col(rs, rKinformerBusy, res.name, func(r restartResult) float64 { return r.SyncSeconds }), col(rs, rKinformerBusy, res.name, func(r restartResult) float64 { return r.BodyMB })
		p("Goal (warm against client-go cold): at least 5x faster — **%.1fx** (%s), busy server **%.1fx** (%s); at least 20x fewer bytes — **%.0fx** (%s), busy server **%.0fx** (%s).\n\n",
			tc/tw, met(tc/tw >= 5), tc/tbz, met(tc/tbz >= 5), bc/tb, met(bc/tb >= 20), bc/bbz, met(bc/bbz >= 20))
	}

	if len(ups) > 0 {
		p("### The update path: %d ConfigMap updates with and without the state file\n\n", updates)
		p("After each contender's sync, and once its state file has not changed for 1 s (its own commits done; the plain contender waits 1 s too), the parent patches %d ConfigMaps (%d writers, the main benchmark's burst: median %.1f s, %.0f writes/s; events per second are bounded by these writes, not by the informer). `%s`: no `StateDir`; `%s`: `StateDir` (fsync after each commit, the default; one state file, which each state contender starts warm from); `%s`: the same with `StateNoSync`. **CPU per update event**: CPU from the burst's start to the last event handled, per event; *with the final commit*: to `Stop` returned (its last commit in the file). **Committed/s**: events ÷ (first event → `Stop` returned); **written**: bytes passed to write(2) (`wchar` of /proc/self/io), per event.\n\n",
			updates, writers, median(burstSecs(bursts)), float64(updates)/median(burstSecs(bursts)), uPlain, uState, uStateNoSync)
		p("| metric | %s | %s | %s | state ÷ plain | nosync ÷ plain |\n|---|---:|---:|---:|---:|---:|\n", uPlain, uState, uStateNoSync)
		for _, row := range []struct {
			name, format string
			ratios       bool
			get          func(restartResult) float64
		}{
			{"update events handled", "%.0f", false, func(r restartResult) float64 { return float64(r.Updates) }},
			{"CPU per update event (µs)", "%.1f", true, func(r restartResult) float64 { return r.UpdateCPUMicros }},
			{"CPU per update event, with the final commit (µs)", "%.1f", true, func(r restartResult) float64 { return r.CommitCPUMicros }},
			{"events handled per second", "%.0f", true, func(r restartResult) float64 { return r.EventsPerSec }},
			{"events committed per second (to Stop returned)", "%.0f", true, func(r restartResult) float64 { return r.CommittedPerSec }},
			{"Stop after the last event (ms)", "%.1f", false, func(r restartResult) float64 { return r.StopMs }},
			{"bytes written per event (KB)", "%.2f", false, func(r restartResult) float64 { return r.WrittenKBPerEvt }},
			{"heap after sync (MB)", "%.1f", true, func(r restartResult) float64 { return r.HeapAfterSyncMB }},
			{"heap after the burst (MB)", "%.1f", true, func(r restartResult) float64 { return r.HeapAfterBurstMB }},
		} {
			pl, st, ns := col(ups, uPlain, "configmaps", row.get), col(ups, uState, "configmaps", row.get), col(ups, uStateNoSync, "configmaps", row.get)
			r1, r2 := "", ""
			if row.ratios {
				r1, r2 = ratio(st, pl), ratio(ns, pl)
			}
			p("| %s | %s | %s | %s | %s | %s |\n", row.name, num(row.format, pl), num(row.format, st), num(row.format, ns), r1, r2)
		}
		cpu := func(k string) float64 {
			return col(ups, k, "configmaps", func(r restartResult) float64 { return r.CommitCPUMicros })
		}
		p("\nGoal: CPU per update event with the state file at most 1.3x without it — fsync on **%.2fx** (%s), fsync off **%.2fx** (%s), with the final commit.\n",
			cpu(uState)/cpu(uPlain), met(cpu(uState)/cpu(uPlain) <= 1.3), cpu(uStateNoSync)/cpu(uPlain), met(cpu(uStateNoSync)/cpu(uPlain) <= 1.3))
	}

	restartBounds(p, rr, col)
	p("\n<details><summary>Every run</summary>\n\n| round | resource | contender | objects | differing | synced (s) | from exec (s) | handled (s) | durable (s) | CPU (s) | read (MB) | LIST | WATCH | peak heap (MB) | heap after (MB) | RSS (MB) | file (MB) |\n|---:|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		p("| %d | %s | %s | %d | %d | %.3f | %.3f | %.3f | %.3f | %.3f | %.2f | %d | %d | %.1f | %.1f | %.1f | %.1f |\n", r.Round, r.Resource, r.Contender, r.Objects, r.Differ, r.SyncSeconds, r.ExecSeconds,
			r.HandledSeconds, r.DurableSeconds, r.SyncCPUSeconds, r.BodyMB, r.Lists, r.Watches+r.WatchLists, r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.FileMB)
	}
	if len(ups) > 0 {
		p("\n| round | contender | sync (s) | quiet after (s) | updates | CPU/event (µs) | with final commit (µs) | events/s | committed/s | Stop (ms) | written (KB/event) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
		for _, r := range ups {
			p("| %d | %s | %.3f | %.1f | %d | %.1f | %.1f | %.0f | %.0f | %.1f | %.2f |\n", r.Round, r.Contender, r.SyncSeconds, r.QuietSeconds, r.Updates,
				r.UpdateCPUMicros, r.CommitCPUMicros, r.EventsPerSec, r.CommittedPerSec, r.StopMs, r.WrittenKBPerEvt)
		}
	}
	var errs []string
	for _, r := range append(slices.Clone(rs), ups...) {
		for _, e := range r.Errors {
			errs = append(errs, fmt.Sprintf("%s %s round %d: %s", r.Contender, r.Resource, r.Round, e))
		}
	}
	if len(errs) > 0 {
		p("\nError events: %s\n", strings.Join(errs, "; "))
	}
	p("\n</details>\n%s\n", restartEnd)
	return b.String()
}

func burstSecs(bs []burstStat) []float64 {
	var xs []float64
	for _, b := range bs {
		xs = append(xs, b.Seconds)
	}
	return xs
}

func met(ok bool) string {
	if ok {
		return "met"
	}
	return "**not met**"
}

func joinOr(xs []string, none string) string {
	if len(xs) == 0 {
		return none
	}
	return "`" + strings.Join(xs, "`, `") + "`"
}

func causeString(c map[string]int64) string {
	if len(c) == 0 {
		return "none"
	}
	keys := make([]string, 0, len(c))
	for k := range c {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var parts []string
	for _, k := range keys {
		parts = append(parts, fmt.Sprintf("%d %s", c[k], k))
	}
	return strings.Join(parts, ", ")
}

// restartBounds writes what bounds each figure, from the results.
func restartBounds(p func(string, ...any), rr restartRun, col func([]restartResult, string, string, func(restartResult) float64) float64) {
	get := func(kind, res string, f func(restartResult) float64) float64 { return col(rr.Results, kind, res, f) }
	sync := func(r restartResult) float64 { return r.SyncSeconds }
	cpu := func(r restartResult) float64 { return r.SyncCPUSeconds }
	p("\n### What bounds each figure\n\n")
	p("- **Cold starts** (both libraries) read the whole collection (the same bytes: protobuf, managedFields included on the wire) and decode every object; client-go keeps managedFields, hence its heap. ")
	if rr.NCM > 0 {
		p("kinformer cold's **durable** time adds the first full commit after sync: every object encoded, written into a new bbolt file and fsynced (20,000 ConfigMaps: %.2f s and %.2f s of CPU after sync), in the background of a running informer.\n",
			get(rKinformerCold, "configmaps", func(r restartResult) float64 { return r.DurableSeconds - r.HandledSeconds }),
			get(rKinformerCold, "configmaps", func(r restartResult) float64 { return r.DurableCPU - r.SyncCPUSeconds }))
	} else {
		p("\n")
	}
	p("- **Warm start, quiet server**: restoring is reading the bbolt file and decoding every object from protobuf (the same decoding as from the wire, without managedFields; in a CPU profile of a warm start of Pods (`-profile`), about half is `Pod.Unmarshal`, much of the rest GC), plus the changes over the watch. Its bytes are the probe and the changed objects (the figures above: %.0f%% of the objects changed or created). So the warm start saves the network and the server's work, not the decoding: ",
		rr.Churn*75)
	for i, res := range []string{"configmaps", "pods"} {
		if n := map[string]int{"configmaps": rr.NCM, "pods": rr.NPods}[res]; n > 0 {
			if i > 0 {
				p("; ")
			}
			p("%s: CPU to synced %.2f s warm against %.2f s for client-go cold", res, get(rKinformerWarm, res, cpu), get(rClientGoCold, res, cpu))
		}
	}
	p(". Where decoding is most of a cold start (Pods: deep objects, fewer bytes each to fetch), the ratio of times stays near that of CPU.\n")
	slow, all := 0, 0
	for _, r := range rr.Results {
		if r.Contender == rKinformerWarm {
			all++
			if r.SyncSeconds >= 0.9 {
				slow++
			}
		}
	}
	busy := math.Max(get(rKinformerBusy, "configmaps", sync), get(rKinformerBusy, "pods", sync))
	warm := math.Max(get(rKinformerWarm, "configmaps", sync), get(rKinformerWarm, "pods", sync))
	if busy >= 0.9 && busy > warm+0.5 {
		p("- **Warm start, busy server**: the probe (a LIST with limit=1) gives the server's resourceVersion, which any write elsewhere moves; a watch of one collection never reaches it, and servers send no bookmark to a watch already at their resourceVersion, so the informer is synced only when its one-second catch-up watch (`catchUpTimeout` in loop.go) ends quiet: a floor of about 1 s on top of the restore (medians %.2f s busy against %.2f s quiet, the same CPU and bytes). In a live cluster leases and events move the resourceVersion every few seconds, so this is the usual case: here %d of %d *quiet* warm starts waited the same second, writes the benchmark did not make (the API server's own) having moved the resourceVersion between the changes and the probe.\n", busy, warm, slow, all)
	} else {
		p("- **Warm start, busy server**: the probe (a LIST with limit=1) gives the server's resourceVersion, which any write elsewhere moves; a watch of one collection never reaches it, and servers send no bookmark to a watch already at their resourceVersion. The server sends the history since the file's resourceVersion back to back as the watch opens, so the informer counts as caught up once its catch-up watch has been silent for three of the probe's round trips after its last event, at least 100 ms (`minQuiet` in loop.go; 300 ms, `minFirstQuiet`, when nothing came at all): medians %.2f s busy against %.2f s quiet, the same CPU and bytes, the difference being that silence and a second watch.\n", busy, warm)
	}
	p("- **Peak RSS** of a warm start includes the pages of the state file, which bbolt maps into memory; the heap after sync is the same as a cold start's.\n")
	p("- **State file**: the objects as cached (protobuf, without managedFields) in a bbolt B+tree, whose pages are partly empty after random inserts, in a file that grows in steps: larger than the objects it holds.\n")
	if len(rr.Ups) > 0 {
		p("- **Update path**: the events per second are the writers' rate, the same for all three; the extra CPU with a state file is encoding each changed object and a bbolt transaction per commit interval (250 ms: about %.0f events each at this rate), whose pages are rewritten whole (the bytes written per event), plus, by default, one fsync per commit; `StateNoSync` removes only the fsync.\n",
			col(rr.Ups, uState, "configmaps", func(r restartResult) float64 { return r.EventsPerSec })/4)
	}
}
