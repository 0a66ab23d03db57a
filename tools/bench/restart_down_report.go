package main

// The report of restart -down: its subsection of the restart section.

import (
	"fmt"
	"math"
	"strings"
	"time"
)

// downReport is the down subsection of docs/benchmarks.md, markers included.
func downReport(dr downRun) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := dr.Machine
	results := func(d downSpec, kind string) []restartResult {
		var rs []restartResult
		for _, rd := range dr.Rounds {
			if rd.Down != d.Down || rd.Restart != d.Restart {
				continue
			}
			for _, r := range rd.Results {
				if r.Contender == kind {
					rs = append(rs, r)
				}
			}
		}
		return rs
	}
	col := func(d downSpec, kind string, f func(restartResult) float64) float64 {
		var v []float64
		for _, r := range results(d, kind) {
			if x := f(r); !math.IsNaN(x) {
				v = append(v, x)
			}
		}
		return median(v)
	}
	num := func(format string, v float64) string {
		if math.IsNaN(v) {
			return "–"
		}
		return fmt.Sprintf(format, v)
	}
	ratio := func(a, b float64) string {
		if b == 0 || math.IsNaN(a) || math.IsNaN(b) {
			return "–"
		}
		return fmt.Sprintf("%.3f", a/b)
	}
	var downs []string
	for _, s := range dr.Downs {
		downs = append(downs, fmt.Sprintf("%v (%d round(s))", s, s.Rounds))
	}

	p("%s\n### After time down: %s; %d ConfigMaps\n\n", downBegin, strings.Join(downs, ", "), dr.NCM)
	p("Made on %s with `%s`, %d cores **shared with other engineers' test runs** (load %s at the start, %s at the end), kinformer at revision `%s`, by:\n\n    %s\n\n",
		m.Date, m.GoVersion, m.NProc, m.LoadStart, dr.LoadEnd, dr.Rev, benchCommand("restart", dr.Args))
	p("- Each round: `%s` (a fresh `StateDir`) lists and writes the state file, and stops: the process is then **down** for the time given. Meanwhile the collection changes %.1f%% of its objects (%.1f%% modified, %.1f%% deleted, as many created), spread over the time down in a batch every %v, the last a second before the restart; and the rest of the cluster writes all along, during the starts too: %d Leases in `%s` renewed in turn (%d a second), an Event created every %v, a ConfigMap there updated every %d s (it shares the collection's watch cache, not its namespace). The API server compacts etcd itself every %v (kube-apiserver's default `--etcd-compaction-interval`; localapi leaves it), to the revision it noted one interval before: etcd keeps 5 to 10 minutes of history. Whether it had compacted the file's resourceVersion when the process came back is asked with an exact LIST at it (410 if so). A watch is served from the API server's watch cache (on, as in production clusters), whose history is its own: at least 75 s of each resource's events. With `+restart`, the API server is restarted halfway through the time down (on its data dir: the objects and etcd's history stay; its watch cache starts anew, from the current resourceVersion), as in an upgrade, or when the process comes back to another API server of the cluster. Once the time down is over, the collection stops changing (the rest of the cluster does not), and `%s` (the same `StateDir`) and `%s` run one after the other, the order alternating by round. Figures are medians over the rounds; ratios are kinformer warm ÷ client-go cold, from the same rounds.\n",
		rKinformerCold, dr.Churn*100, dr.Churn*50, dr.Churn*25, trickleStep, lifeLeases, lifeNamespace, leasesPerTick, lifeTick, lifeCMEvery*int(lifeTick/time.Second), compactEvery, rKinformerWarm, rClientGoCold)
	p("- **First read**: the cache holds an object (`Cache().Len()`, or the client-go store's keys, polled every 1 ms from just before the informer is made): kinformer warm answers reads from the file from then on (as of the file: the catch-up follows), client-go only from its list, which it stores at once when complete. **First restored object handled**: the first `Added` with `CauseRestore` delivered to the handler. **Synced**, **from exec**, **handled**, **CPU**, **read**, requests, heap and RSS as in the tables above; each contender's cache is compared with a LIST once stopped, as there. **Catch-up**: how the warm start reached the server's state: a watch from the file's resourceVersion, or, after 410 Gone on it, a re-list diffed against the restored cache (the re-lists the informer logged, with their reason).\n\n")

	type row struct {
		name, format string
		ratio        bool
		get          func(restartResult) float64
	}
	kindOnly := func(kind string, f func(restartResult) float64) func(restartResult) float64 {
		return func(r restartResult) float64 {
			if r.Contender != kind {
				return math.NaN()
			}
			return f(r)
		}
	}
	rows := []row{
		{"first read: cache non-empty, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.FirstReadSeconds }},
		{"first restored object handled, from New (s)", "%.3f", false, kindOnly(rKinformerWarm, func(r restartResult) float64 { return r.FirstRestoreSeconds })},
		{"time to synced, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncSeconds }},
		{"time to synced, from exec (s)", "%.3f", true, func(r restartResult) float64 { return r.ExecSeconds }},
		{"time to handled, from New (s)", "%.3f", true, func(r restartResult) float64 { return r.HandledSeconds }},
		{"CPU to synced, user+sys (s)", "%.3f", true, func(r restartResult) float64 { return r.SyncCPUSeconds }},
		{"response bytes read (MB)", "%.2f", true, func(r restartResult) float64 { return r.BodyMB }},
		{"LIST requests", "%.0f", false, func(r restartResult) float64 { return float64(r.Lists) }},
		{"WATCH requests", "%.0f", false, func(r restartResult) float64 { return float64(r.Watches + r.WatchLists) }},
		{"re-lists after the start (410 Gone)", "%.0f", false, func(r restartResult) float64 { return float64(len(r.Relists)) }},
		{"peak Go heap (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakHeapMB }},
		{"peak RSS, VmHWM (MB)", "%.1f", true, func(r restartResult) float64 { return r.PeakRSSMB }},
	}
	p("| metric |")
	sep := "|---|"
	for _, s := range dr.Downs {
		p(" %v: %s | %v: %s | %v: warm ÷ client-go cold |", s, rClientGoCold, s, rKinformerWarm, s)
		sep += "---:|---:|---:|"
	}
	p("\n%s\n", sep)
	for _, r := range rows {
		p("| %s |", r.name)
		for _, s := range dr.Downs {
			cg, kw := col(s, rClientGoCold, r.get), col(s, rKinformerWarm, r.get)
			rt := ""
			if r.ratio {
				rt = ratio(kw, cg)
			}
			p(" %s | %s | %s |", num(r.format, cg), num(r.format, kw), rt)
		}
		p("\n")
	}
	p("\n")

	for _, s := range dr.Downs {
		var compacted, rounds, relisted, watched int
		var reasons []string
		var mods, dels []float64
		for _, rd := range dr.Rounds {
			if rd.Down != s.Down || rd.Restart != s.Restart {
				continue
			}
			rounds++
			if rd.Compacted {
				compacted++
			}
			mods, dels = append(mods, float64(rd.Modified)), append(dels, float64(rd.Deleted))
		}
		for _, r := range results(s, rKinformerWarm) {
			if len(r.Relists) > 0 {
				relisted++
				reasons = append(reasons, r.Relists...)
			} else {
				watched++
			}
		}
		p("**%v** (%d round(s)): %.0f objects modified, %.0f deleted and as many created while down (medians); etcd had compacted the file's resourceVersion in **%d of %d** rounds. Catch-up: **a watch** in %d of %d warm starts, **a re-list** in %d",
			s, rounds, median(mods), median(dels), compacted, rounds, watched, watched+relisted, relisted)
		if len(reasons) > 0 {
			p(" (%s)", strings.Join(dedupe(reasons), "; "))
		}
		p(". Requests (first round): ")
		for i, kind := range []string{rKinformerWarm, rClientGoCold} {
			if rs := results(s, kind); len(rs) > 0 {
				if i > 0 {
					p("; ")
				}
				p("%s: %s", kind, joinOr(rs[0].Requests, "none"))
			}
		}
		if rs := results(s, rKinformerWarm); len(rs) > 0 {
			p(". Events handled (first round), %s: %s", rKinformerWarm, causeString(rs[0].Causes))
		}
		p(".\n\n")
	}
	downBounds(p, dr, results, col)
	p("Life of the rest of the cluster: %d writes", dr.LifeWrites)
	if dr.LifeErrors > 0 {
		p(", %d failed (first: %s)", dr.LifeErrors, dr.LifeErr)
	}
	p(".\n\n<details><summary>Every run (time down)</summary>\n\n| down | round | contender | objects | differing | first read (s) | first restored (s) | synced (s) | from exec (s) | CPU (s) | read (MB) | requests | re-lists | file's rv compacted |\n|---|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---|---|---|\n")
	for _, rd := range dr.Rounds {
		for _, r := range rd.Results {
			cpt := ""
			if r.Contender != rKinformerCold {
				cpt = map[bool]string{true: "yes", false: "no"}[rd.Compacted]
			}
			restored := math.NaN() // no restore: a cold start
			if r.FirstRestoreSeconds > 0 {
				restored = r.FirstRestoreSeconds
			}
			p("| %v | %d | %s | %d | %d | %.3f | %s | %.3f | %.3f | %.3f | %.2f | %s | %s | %s |\n", downSpec{Down: rd.Down, Restart: rd.Restart}, rd.Round, r.Contender, r.Objects, r.Differ,
				r.FirstReadSeconds, num("%.3f", restored), r.SyncSeconds, r.ExecSeconds, r.SyncCPUSeconds, r.BodyMB, joinOr(r.Requests, "none"), joinOr(r.Relists, "none"), cpt)
		}
	}
	var errs []string
	for _, rd := range dr.Rounds {
		for _, r := range rd.Results {
			for _, e := range r.Errors {
				errs = append(errs, fmt.Sprintf("%v, %s round %d: %s", downSpec{Down: rd.Down, Restart: rd.Restart}, r.Contender, r.Round, e))
			}
		}
	}
	if len(errs) > 0 {
		p("\nError events: %s\n", strings.Join(errs, "; "))
	}
	p("\n</details>\n%s\n", downEnd)
	return b.String()
}

// dedupe keeps the first of equal strings, in order, with a count.
func dedupe(xs []string) []string {
	n := map[string]int{}
	var order []string
	for _, x := range xs {
		if n[x] == 0 {
			order = append(order, x)
		}
		n[x]++
	}
	for i, x := range order {
		if n[x] > 1 {
			order[i] = fmt.Sprintf("%s (%d times)", x, n[x])
		}
	}
	return order
}

// downBounds writes what the figures say and what bounds them, from the
// results: which catch-up each time down got, and why.
func downBounds(p func(string, ...any), dr downRun, results func(downSpec, string) []restartResult, col func(downSpec, string, func(restartResult) float64) float64) {
	first := func(r restartResult) float64 { return r.FirstReadSeconds }
	sync := func(r restartResult) float64 { return r.SyncSeconds }
	p("What the figures say:\n\n")
	for _, s := range dr.Downs {
		var watched, relisted, compacted, rounds int
		for _, r := range results(s, rKinformerWarm) {
			if len(r.Relists) > 0 {
				relisted++
			} else {
				watched++
			}
		}
		for _, rd := range dr.Rounds {
			if rd.Down == s.Down && rd.Restart == s.Restart {
				rounds++
				if rd.Compacted {
					compacted++
				}
			}
		}
		how := "caught up by a watch from the file's resourceVersion"
		switch {
		case relisted > 0 && watched == 0:
			how = "re-listed after 410 Gone on its catch-up watch, the re-list diffed against the restored cache"
		case relisted > 0:
			how = fmt.Sprintf("caught up by watch in %d rounds, re-listed after 410 in %d", watched, relisted)
		}
		p("- **%v**: the warm start %s. Reads were answered from the file %.3f s after `New` (client-go cold: %.3f s, at its sync), synced at %.3f s (client-go cold %.3f s)",
			s, how, col(s, rKinformerWarm, first), col(s, rClientGoCold, first), col(s, rKinformerWarm, sync), col(s, rClientGoCold, sync))
		if compacted > 0 && relisted == 0 {
			p("; etcd had compacted the file's resourceVersion in %d of %d rounds, yet the watch was served: the API server serves watches from its watch cache, a ring of each resource's recent events that etcd's compaction does not shorten (in k8s.io/apiserver v0.37 the watch cache's compactor compacts only its list snapshots); the ring answers 410 only for a resourceVersion older than its oldest event. It grows while full with its oldest event younger than 75 s, and shrinks only when full; here it had presumably grown during the creation of the %d ConfigMaps (under a minute) and the run's later traffic never filled it again (its capacity is not recorded). With steady traffic of the resource (all namespaces), it keeps from 75 s to a few minutes of events (at least 100), and a process down 10 minutes would get 410 and re-list, as the rounds with the API server restarted do", compacted, rounds, dr.NCM)
		}
		if relisted > 0 {
			p("; the 410 is the catch-up watch's first answer, after which the informer re-lists at once (a restored cache's 410 is not a lagging watch cache's, the case the backoff after a 410 without progress is for), with the re-list's own server-side timeout, not the catch-up watch's 1 s; the re-list reads the whole collection (the bytes of a cold start) and decodes it on top of the restore, and the handler gets only the differences (`CauseRelist`), not an `Added` for every object")
		}
		// A watch-list opened before the informer has caught up has the
		// catch-up watch's server-side timeout: the server may end it
		// before its initial events are all sent.
		var short, in int
		for _, r := range results(s, rKinformerWarm) {
			n := 0
			for _, e := range r.Errors {
				n += strings.Count(e, "the stream ended before its initial events did")
			}
			if n > 0 {
				short, in = short+n, in+1
			}
		}
		if short > 0 {
			p(". In %d of %d rounds the re-list's watch-list failed (%d times in all: \"the stream ended before its initial events did\"), each time followed by a backoff: opened before the informer has caught up, it has the catch-up watch's 1 s server-side timeout (`watchTimeout` in watch.go returns `catchUpTimeout` while the probe's resourceVersion is not reached), and on this loaded machine the server did not send %d objects in 1 s; hence the slowest rounds and their bytes", in, len(results(s, rKinformerWarm)), short, dr.NCM)
		}
		p(".\n")
	}
	p("\n")
}
