package main

// The projection benchmark (issue 30, SPEC section 11): Options.Fields
// keeping five fields of realistic Pods, with and without Compact, side by
// side with client-go (defaults) and with client-go and the best its users
// do today, a hand-written allowlist Transform of the same fields; the
// compact benchmark's Pods and contender process.
//
//	cd tools/bench && go run . project

import (
	"context"
	"flag"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"time"
)

const (
	projectBegin = "<!-- project: begin -->"
	projectEnd   = "<!-- project: end -->"
)

// projectRun is what the report is made from.
type projectRun struct {
	Machine      machine
	LoadEnd, Rev string
	Args         []string
	Rounds       int
	Kinds        []string
	Sizes        []compactPodRun
	Profiles     []string // written by -profile
	Minutes      float64
}

type projectConfig struct {
	*bench
	sizes, kinds, save, replay, profile string
}

func projectFlags(fs *flag.FlagSet) func(*bench) error {
	var c projectConfig
	fs.StringVar(&c.sizes, "pods", "3000,20000", "numbers of Pods, comma-separated, ascending (each size adds Pods to the namespace)")
	fs.StringVar(&c.kinds, "kinds", strings.Join([]string{kClientGo, kClientGoAllow, kFields, kCompactFields}, ","), "contenders, comma-separated (also: "+kKinformer+", "+kCompact+", "+kCompactRaw+")")
	fs.StringVar(&c.save, "save", filepath.Join(os.TempDir(), "kinformer-bench-project.json"), "write the results here ('' for nowhere)")
	fs.StringVar(&c.replay, "replay", "", "run nothing: make the report from results saved by -save")
	fs.StringVar(&c.profile, "profile", "", "if set, write the heap (after sync) and sync CPU profiles of one extra "+kCompactFields+" run of the last size here")
	return func(b *bench) error {
		c.bench = b
		return project(c)
	}
}

func project(c projectConfig) error {
	if c.replay != "" {
		var run projectRun
		if err := readResults(c.replay, &run); err != nil {
			return err
		}
		return c.section(projectReport(run))
	}
	sizes, err := parseSizes(c.sizes)
	if err != nil {
		return fmt.Errorf("-pods: %w", err)
	}
	kinds := strings.Split(c.kinds, ",")
	if err := c.prepare(); err != nil {
		return err
	}
	start := time.Now()
	run := projectRun{Machine: describeMachine(), Rev: c.rev, Args: c.args, Rounds: c.rounds, Kinds: kinds}
	srv, cs, err := c.serveWorkload(0, 0)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	if err := ensureNamespace(ctx, cs, compactNamespace); err != nil {
		return err
	}
	have := 0
	for _, n := range sizes {
		pr := compactPodRun{Size: n}
		t := time.Now()
		if err := ensureCompactPods(ctx, cs, have, n); err != nil {
			return err
		}
		have = n
		pr.CreateSeconds = time.Since(t).Seconds()
		for r := 1; r <= c.rounds; r++ {
			for _, kind := range rotate(kinds, r-1) {
				time.Sleep(time.Second) // let the server settle
				args := []string{"compact-contender", "-kind", kind, "-kubeconfig", srv.Kubeconfig, "-namespace", compactNamespace,
					"-round", fmt.Sprint(r), "-objects", fmt.Sprint(n), "-reads", "2000", "-index-reads", "200"}
				res, _, err := runChild[compactResult](ctx, kind, nil, args...)
				if err == nil && res.Objects != n {
					err = fmt.Errorf("%d Pods in the cache when synced, want %d", res.Objects, n)
				}
				if err != nil {
					return fmt.Errorf("%s %d Pods round %d: %w", kind, n, r, err)
				}
				logf("%-25s %6d pods round %d: synced %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB (base %.1fMB, protobuf %.1fMB); get %.0fns (decode %.0fns)",
					kind, n, r, res.SyncSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.HeapBaseMB, res.ProtoMB, res.GetNs, res.GetDecodeNs)
				pr.Results = append(pr.Results, res)
			}
		}
		run.Sizes = append(run.Sizes, pr)
		if c.profile != "" && n == sizes[len(sizes)-1] {
			if err := os.MkdirAll(c.profile, 0o755); err != nil {
				return err
			}
			base := filepath.Join(c.profile, fmt.Sprintf("pods-%d-compact-fields", n))
			args := []string{"compact-contender", "-kind", kCompactFields, "-kubeconfig", srv.Kubeconfig, "-namespace", compactNamespace,
				"-objects", fmt.Sprint(n), "-reads", "100", "-index-reads", "10", "-cpuprofile", base + ".sync.cpu.pprof", "-memprofile", base + ".heap.pprof"}
			if _, _, err := runChild[compactResult](ctx, kCompactFields, nil, args...); err != nil {
				return fmt.Errorf("profile: %w", err)
			}
			run.Profiles = append(run.Profiles, base+".heap.pprof", base+".sync.cpu.pprof")
		}
	}
	run.LoadEnd = loadavg()
	run.Minutes = time.Since(start).Minutes()
	if err := saveResults(c.save, run); err != nil {
		return err
	}
	return c.section(projectReport(run))
}

// parseSizes parses a comma-separated ascending list of positive numbers.
func parseSizes(s string) ([]int, error) {
	var sizes []int
	for _, f := range strings.Split(s, ",") {
		var n int
		if _, err := fmt.Sscan(strings.TrimSpace(f), &n); err != nil || n <= 0 || (len(sizes) > 0 && n <= sizes[len(sizes)-1]) {
			return nil, fmt.Errorf("%q is not a positive number above the one before", f)
		}
		sizes = append(sizes, n)
	}
	return sizes, nil
}

// projectGoal is one of issue 30's targets: kind's figure over ref's
// (ref "": over the projected protobuf bytes) at most max.
type projectGoal struct {
	metric    string
	kind, ref string
	max       float64
}

func projectReport(run projectRun) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	m := run.Machine
	p("%s\n## Cache what you read: Options.Fields (issue 30)\n\n", projectBegin)
	p("Made on %s (%.0f minutes) with `%s`, %d cores (%s) **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, on one localapi run, by:\n\n    %s\n\n",
		m.Date, run.Minutes, m.GoVersion, m.NProc, m.CPU, m.LoadStart, run.LoadEnd, run.Rev, benchCommand("project", run.Args))
	p("The compact benchmark's realistic Pods and contender process, medians over %d round(s), the order rotating. The projection is `%s`. Contenders: `%s` (`SharedInformerFactory`, defaults), `%s` (the same with an allowlist `SetTransform` that copies those fields into a new Pod: the best client-go users do today, after a whole decode), `%s` (`kinformer.New` with `Options.Fields`), `%s` (the same with `Compact`). **Projected protobuf**: `Marshal` of every object the `%s` contender's `List` returns: what a projected cache of bytes cannot go below.\n\n",
		run.Rounds, strings.Join(projectedPodFields, ", "), kClientGo, kClientGoAllow, kFields, kCompactFields, kFields)
	metrics := []struct {
		name, format string
		get          func(compactResult) float64
	}{
		{"time to synced (s)", "%.3f", func(r compactResult) float64 { return r.SyncSeconds }},
		{"CPU for the sync (s)", "%.3f", func(r compactResult) float64 { return r.SyncCPUSeconds }},
		{"CPU to all initial ADDED handled (s)", "%.3f", func(r compactResult) float64 { return r.HandledCPUSeconds }},
		{"peak Go heap during sync (MB)", "%.1f", func(r compactResult) float64 { return r.PeakHeapMB }},
		{"heap after sync (MB)", "%.1f", func(r compactResult) float64 { return r.HeapAfterSyncMB }},
		{"heap after sync − base (MB)", "%.1f", func(r compactResult) float64 { return r.HeapAfterSyncMB - r.HeapBaseMB }},
		{"Get of a random key (ns)", "%.0f", func(r compactResult) float64 { return r.GetNs }},
		{"protobuf decode of that object (ns)", "%.0f", func(r compactResult) float64 { return r.GetDecodeNs }},
	}
	goals := []projectGoal{
		{"heap after sync (MB)", kCompactFields, kClientGo, 0.05},
		{"peak Go heap during sync (MB)", kCompactFields, kClientGo, 0.1},
		{"CPU for the sync (s)", kCompactFields, kClientGo, 0.3},
		{"heap after sync (MB)", kFields, kClientGo, 0.25},
		{"heap after sync (MB)", kCompactFields, kClientGoAllow, 0.25},
		{"peak Go heap during sync (MB)", kCompactFields, kClientGoAllow, 0.3},
		{"CPU for the sync (s)", kFields, kClientGoAllow, 0.6},
		{"peak Go heap during sync (MB)", kFields, kClientGoAllow, 0.8},
		{"heap after sync (MB)", kCompactFields, "", 1.3},
	}
	kindOf := func(r compactResult) string { return r.Contender }
	for _, pr := range run.Sizes {
		col := func(kind string, f func(compactResult) float64) float64 { return medianOf(pr.Results, kindOf, kind, f) }
		proj := col(kFields, func(r compactResult) float64 { return r.ProtoMB })
		whole := col(kClientGo, func(r compactResult) float64 { return r.ProtoMB })
		p("### %d Pods\n\nProtobuf of the Pods (managedFields cut): %.1f MB; projected: **%.1f MB** (%.0f bytes a Pod).\n\n", pr.Size, whole, proj, proj*(1<<20)/float64(pr.Size))
		p("| metric |")
		for _, k := range run.Kinds {
			p(" %s |", k)
		}
		for _, k := range run.Kinds[1:] {
			p(" %s ÷ %s |", k, run.Kinds[0])
		}
		p("\n|---|%s%s\n", strings.Repeat("---:|", len(run.Kinds)), strings.Repeat("---:|", len(run.Kinds)-1))
		for _, mt := range metrics {
			p("| %s |", mt.name)
			for _, k := range run.Kinds {
				p(" %s |", cell(mt.format, col(k, mt.get)))
			}
			for _, k := range run.Kinds[1:] {
				p(" %s |", quo(col(k, mt.get), col(run.Kinds[0], mt.get)))
			}
			p("\n")
		}
		p("\nIssue 30's targets:\n\n")
		for _, g := range goals {
			var get func(compactResult) float64
			for _, mt := range metrics {
				if mt.name == g.metric {
					get = mt.get
				}
			}
			v, ref := col(g.kind, get), proj
			what := "projected protobuf"
			if g.ref != "" {
				ref, what = col(g.ref, get), g.ref
			}
			r := v / ref
			if math.IsNaN(r) || math.IsInf(r, 0) {
				continue
			}
			p("- %s, %s ÷ %s: **%.2f** (target ≤ %.2f: %s)\n", g.metric, g.kind, what, r, g.max, met(r <= g.max))
		}
		p("\n")
	}
	if len(run.Profiles) > 0 {
		p("Profiles (`-profile`, not kept): `%s`. Read them with `go tool pprof -top FILE`.\n\n", strings.Join(run.Profiles, "`, `"))
	}
	p("%s\n", projectEnd)
	return b.String()
}
