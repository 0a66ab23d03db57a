package main

// The compact benchmark (issue 22, SPEC section 10): Options.Compact, the
// cache of bytes, measured side by side with client-go and kinformer
// without it on one localapi run: 20,000 and 50,000 Pods (sync, heap
// against the objects' protobuf, what a Get, ByIndex and List cost against
// a plain protobuf decode), custom resources (JSON, the crd benchmark's
// contenders) and warm restarts with StateDir (the restart benchmark's
// contenders).
//
//	cd tools/bench && go run . compact

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	compactBegin = "<!-- compact: begin -->"
	compactEnd   = "<!-- compact: end -->"
)

// compactKinds are the Pod contenders of the compact benchmark.
var compactKinds = []string{kClientGo, kKinformer, kCompact}

// compactRun is what the report is made from, saved with -save to be
// re-rendered with -replay.
type compactRun struct {
	Machine      machine
	LoadEnd, Rev string
	Args         []string
	Rounds       int
	PerIndex     int
	Reads        int
	Pods         []compactPodRun
	CRD          *crdRun
	Restart      []restartResult
	RestartNCM   int
	RestartNPods int
	Churn        float64
	Profiles     []string // files written by -profile
	Minutes      float64
}

// compactPodRun is one size's Pod figures.
type compactPodRun struct {
	Size          int
	CreateSeconds float64
	Results       []compactResult
}

func compactFlags(fs *flag.FlagSet) func(*bench) error {
	var c compactConfig
	fs.StringVar(&c.podSizes, "pods", "20000,50000", "numbers of Pods, comma-separated, ascending (each size adds Pods to the namespace; '' for none)")
	fs.IntVar(&c.nCR, "crs", 10000, "custom resources (JSON; 0: none)")
	fs.IntVar(&c.crUpdates, "cr-updates", 2000, "custom resources patched after each CR contender's sync, for CPU per update event")
	fs.IntVar(&c.nCM, "configmaps", 20000, "ConfigMaps for the warm restart (0: none)")
	fs.IntVar(&c.nRestartPods, "restart-pods", 5000, "Pods for the warm restart (0: none)")
	fs.Float64Var(&c.churn, "churn", 0.02, "fraction of the objects changed between a cold and a warm start")
	fs.IntVar(&c.reads, "reads", 10000, "random Gets timed per Pod contender")
	fs.IntVar(&c.indexReads, "index-reads", 500, "random ByIndex calls timed per Pod contender")
	fs.IntVar(&c.perIndex, "per-index", 80, "Pods per value of the index that ByIndex reads")
	fs.StringVar(&c.profile, "profile", "", "if set, write profiles of one extra kinformer+compact run of the first Pod size (sync CPU, heap after sync, reads CPU), of its CR sync and of its first warm restart here")
	fs.StringVar(&c.save, "save", filepath.Join(os.TempDir(), "kinformer-bench-compact.json"), "write the results here ('' for nowhere)")
	fs.StringVar(&c.replay, "replay", "", "run nothing: make the report from results saved by -save")
	return func(b *bench) error {
		c.bench = b
		return compact(c)
	}
}

// compactConfig is the compact benchmark's flags.
type compactConfig struct {
	*bench
	podSizes                          string
	nCR, crUpdates, nCM, nRestartPods int
	churn                             float64
	reads, indexReads, perIndex       int
	profile, save, replay             string
}

func compact(c compactConfig) error {
	podSizes, nCR, crUpdates, nCM, nRestartPods, churn, reads, indexReads, perIndex, profile := c.podSizes, c.nCR, c.crUpdates, c.nCM, c.nRestartPods, c.churn, c.reads, c.indexReads, c.perIndex, c.profile
	if c.replay != "" {
		var run compactRun
		if err := readResults(c.replay, &run); err != nil {
			return err
		}
		return c.section(compactReport(run))
	}
	var sizes []int
	if strings.TrimSpace(podSizes) != "" {
		var err error
		if sizes, err = parseSizes(podSizes); err != nil {
			return fmt.Errorf("-pods: %w", err)
		}
	}
	if err := c.prepare(); err != nil {
		return err
	}
	stateRoot, err := c.tempDir("state")
	if err != nil {
		return err
	}
	if profile != "" {
		if err := os.MkdirAll(profile, 0o755); err != nil {
			return err
		}
	}
	start := time.Now()
	run := compactRun{Machine: describeMachine(), Rev: c.rev, Args: c.args, Rounds: c.rounds, PerIndex: perIndex, Reads: reads, Churn: churn}
	// The restart's workload (the main benchmark's) first, in bench-cm and bench-pods.
	srv, cs, err := c.serveWorkload(nCM, nRestartPods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()

	// ---- Pods ----
	if len(sizes) > 0 {
		if err := ensureNamespace(ctx, cs, compactNamespace); err != nil {
			return err
		}
	}
	have := 0
	for si, n := range sizes {
		pr := compactPodRun{Size: n}
		t := time.Now()
		from := have
		if err := ensureCompactPods(ctx, cs, from, n); err != nil {
			return err
		}
		have = n
		pr.CreateSeconds = time.Since(t).Seconds()
		contender := func(kind string, round int, extra ...string) (compactResult, error) {
			args := []string{"compact-contender", "-kind", kind, "-kubeconfig", srv.Kubeconfig, "-namespace", compactNamespace,
				"-round", fmt.Sprint(round), "-objects", fmt.Sprint(n), "-reads", fmt.Sprint(reads),
				"-index-reads", fmt.Sprint(indexReads), "-per-index", fmt.Sprint(perIndex)}
			res, _, err := runChild[compactResult](ctx, kind, nil, append(args, extra...)...)
			if err == nil && res.Objects != n {
				err = fmt.Errorf("%d Pods in the cache when synced, want %d", res.Objects, n)
			}
			if err == nil && res.Misses > 0 {
				err = fmt.Errorf("%d of %d Gets found nothing", res.Misses, res.Reads)
			}
			return res, err
		}
		for r := 1; r <= c.rounds; r++ {
			for _, kind := range rotate(compactKinds, r-1) {
				time.Sleep(time.Second) // let the server settle
				res, err := contender(kind, r)
				if err != nil {
					return fmt.Errorf("%s %d Pods round %d: %w", kind, n, r, err)
				}
				logf("%-17s %6d pods round %d: synced %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB (base %.1fMB, protobuf %.1fMB) rss %.1fMB; get %.0fns (decode %.0fns) byindex %.0fns/obj of %.0f (decode %.0fns) list %.0fns/obj",
					kind, n, r, res.SyncSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.HeapBaseMB, res.ProtoMB, res.PeakRSSMB,
					res.GetNs, res.GetDecodeNs, res.ByIndexNs, res.IndexObjects, res.IndexDecNs, res.ListNs)
				pr.Results = append(pr.Results, res)
			}
		}
		if profile != "" && si == 0 {
			base := filepath.Join(profile, fmt.Sprintf("pods-%d-compact", n))
			if _, err := contender(kCompact, 0, "-cpuprofile", base+".sync.cpu.pprof", "-memprofile", base+".heap.pprof", "-readprofile", base+".reads.cpu.pprof"); err != nil {
				return fmt.Errorf("profile: %w", err)
			}
			run.Profiles = append(run.Profiles, base+".sync.cpu.pprof", base+".heap.pprof", base+".reads.cpu.pprof")
			logf("wrote %s.{sync.cpu,heap,reads.cpu}.pprof", base)
		}
		run.Pods = append(run.Pods, pr)
	}

	// ---- custom resources: the crd benchmark's contenders, with and without Compact ----
	if nCR > 0 {
		prof := ""
		if profile != "" {
			prof = filepath.Join(profile, "crd")
		}
		cr, err := crdSize(srv, nCR, c.rounds, min(crUpdates, nCR), 32, []string{cClientGo, cKinformer, cKinCompact}, prof)
		if err != nil {
			return fmt.Errorf("%d custom resources: %w", nCR, err)
		}
		run.CRD = &cr
		if prof != "" {
			run.Profiles = append(run.Profiles, prof+"/*.cpu.pprof")
		}
	}

	// ---- warm restart: the restart benchmark's contenders, with and without Compact ----
	if nCM > 0 || nRestartPods > 0 {
		jobs, err := restartJobs(ctx, cs, nCM, nRestartPods)
		if err != nil {
			return err
		}
		for _, j := range jobs {
			if j.resource == "configmaps" {
				run.RestartNCM = j.n
			} else {
				run.RestartNPods = j.n
			}
			for r := 1; r <= c.rounds; r++ {
				order := []string{rClientGoCold, rKinformerCold, rKinformerWarm, rCompactCold, rCompactWarm}
				if r%2 == 0 {
					order = []string{rCompactCold, rCompactWarm, rKinformerCold, rKinformerWarm, rClientGoCold}
				}
				dir := func(kind string) string {
					if kind == rCompactCold || kind == rCompactWarm {
						return filepath.Join(stateRoot, fmt.Sprintf("%s-%d-compact", j.resource, r))
					}
					return filepath.Join(stateRoot, fmt.Sprintf("%s-%d", j.resource, r))
				}
				rs, _, err := restartSequence(ctx, cs, srv.Kubeconfig, j, r, order, dir, churn, func(kind string) ([]string, error) {
					if profile != "" && r == 1 && kind == rCompactWarm {
						f := filepath.Join(profile, "restart-"+j.resource+"-warm-compact.cpu.pprof")
						run.Profiles = append(run.Profiles, f)
						return []string{"-cpuprofile", f}, nil
					}
					return nil, nil
				})
				run.Restart = append(run.Restart, rs...)
				if err != nil {
					return err
				}
			}
		}
	}
	run.LoadEnd = loadavg()
	run.Minutes = time.Since(start).Minutes()
	logf("compact benchmark done in %.1f minutes", run.Minutes)
	if err := saveResults(c.save, run); err != nil {
		return err
	}
	return c.section(compactReport(run))
}

// ensureCompactPods makes the Pods of compactNamespace number n, creating
// pod(from)... where fewer are there (a data dir kept from an earlier run
// may hold them all).
func ensureCompactPods(ctx context.Context, cs kubernetes.Interface, from, n int) error {
	// The Pods there (a data dir kept from an earlier run may hold
	// them all), counted in pages: the server is loaded.
	countPods := func() (count int, err error) {
		err = retried(func() error {
			count = 0
			opts := metav1.ListOptions{Limit: 1000}
			for {
				l, err := cs.CoreV1().Pods(compactNamespace).List(ctx, opts)
				if err != nil {
					return err
				}
				count += len(l.Items)
				if opts.Continue = l.Continue; opts.Continue == "" {
					return nil
				}
			}
		})
		return count, err
	}
	count, err := countPods()
	if err != nil {
		return err
	}
	if count < n {
		if err := createObjects(compactNamespace+" pods", n-from, func(i int) error {
			p := pod(from + i)
			p.Namespace = compactNamespace
			_, err := cs.CoreV1().Pods(compactNamespace).Create(ctx, p, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return err
		}
		if count, err = countPods(); err != nil {
			return err
		}
	}
	if count != n {
		return fmt.Errorf("%d Pods in %s, want %d (a data dir with another workload?)", count, compactNamespace, n)
	}
	return nil
}
