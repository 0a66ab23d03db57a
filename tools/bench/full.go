package main

// The full benchmark (the default, no subcommand): kinformer against
// client-go's shared informer, ConfigMaps and Pods, each contender in its
// own process.
//
//	cd tools/bench && go run .

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// config is the full benchmark's flags.
type config struct {
	*bench
	configMaps, pods, updates, writers int
	contenders                         []string
	profileDir                         string
	noCompression                      bool
	distinct                           bool
	handlerCost                        time.Duration
}

func fullFlags(fs *flag.FlagSet) func(*bench) error {
	var c config
	fs.IntVar(&c.configMaps, "configmaps", 20000, "ConfigMaps in the workload (about 1 KiB each)")
	fs.IntVar(&c.pods, "pods", 5000, "Pods in the workload (0: skip the pod benchmark)")
	fs.IntVar(&c.updates, "updates", 20000, "ConfigMap updates in the burst after each contender's sync (0: none)")
	fs.IntVar(&c.writers, "writers", 32, "concurrent writers of the update burst")
	contenders := fs.String("contenders", strings.Join([]string{kClientGo, kKinformer, kCompact, kClientGoStrip, kFloor}, ","), "contenders, comma-separated")
	fs.StringVar(&c.profileDir, "profile", "", "if set, also write CPU and allocation profiles of one extra kinformer and client-go sync of ConfigMaps here, and CPU profiles of their update bursts (*.burst.cpu.pprof)")
	fs.BoolVar(&c.noCompression, "no-compression", false, "contenders set rest.Config.DisableCompression (no gzip responses)")
	fs.DurationVar(&c.handlerCost, "handler-cost", 0, "each contender's handler spends this long on every Added and Modified (a mapper that reads the cache: 50us), to time the list and the handler's work together (issue 45)")
	fs.BoolVar(&c.distinct, "distinct", false, "ConfigMaps that share little (issue 13): no two with equal labels, most label values unique, in namespace bench-cm-distinct")
	return func(b *bench) error {
		c.bench = b
		c.contenders = strings.Split(*contenders, ",")
		return fullRun(c)
	}
}

func fullRun(c config) error {
	setDistinct(c.distinct)
	if err := c.prepare(); err != nil {
		return err
	}
	machine := describeMachine()
	srv, cs, err := c.serveWorkload(c.configMaps, c.pods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()

	type job struct {
		resource string
		objects  int
		updates  int
	}
	jobs := []job{{"configmaps", c.configMaps, c.updates}}
	if c.pods > 0 {
		jobs = append(jobs, job{"pods", c.pods, 0})
	}
	// A warm-up LIST of each collection, not recorded.
	for _, j := range jobs {
		if _, _, err := runContender(ctx, cs, srv.Kubeconfig, kFloor, j.resource, 0, j.objects, 0, c.configMaps, c.writers, c.contenderFlags()); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}
	var results []result
	var bursts []burstStat
	for _, j := range jobs {
		for r := 1; r <= c.rounds; r++ {
			order := rotate(c.contenders, r-1)
			for _, kind := range order {
				upd := j.updates
				if kind == kFloor {
					upd = 0
				}
				time.Sleep(time.Second) // let the server settle
				res, b, err := runContender(ctx, cs, srv.Kubeconfig, kind, j.resource, r, j.objects, upd, c.configMaps, c.writers, c.contenderFlags())
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", kind, j.resource, r, err)
				}
				results = append(results, res)
				if b != nil {
					bursts = append(bursts, *b)
				}
				logf("%-17s %-10s round %d: synced %.3fs handled %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB rss %.1fMB; updates %d/%d cpu/event %.1fµs p50 %.1fms p99 %.1fms",
					kind, j.resource, r, res.SyncSeconds, res.HandledSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.PeakRSSMB,
					res.Updates, res.UpdatesExpected, res.UpdateCPUMicros, res.LatencyP50Ms, res.LatencyP99Ms)
			}
		}
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
		for _, kind := range []string{kKinformer, kClientGo} {
			for _, p := range []string{"cpu", "mem"} {
				file := filepath.Join(c.profileDir, fmt.Sprintf("%s-configmaps.%s.pprof", kind, p))
				updates := 0
				if p == "cpu" { // the CPU profile covers the sync, and the update burst in a second file
					updates = c.updates
				}
				if _, _, err := runContender(ctx, cs, srv.Kubeconfig, kind, "configmaps", 0, c.configMaps, updates, c.configMaps, c.writers, append(c.contenderFlags(), "-"+p+"profile", file)); err != nil {
					return err
				}
				logf("wrote %s", file)
			}
		}
	}
	rep := buildReport(c, machine, results, bursts)
	fmt.Println(rep.text)
	if c.out != "" {
		if err := rep.write(c.outPath()); err != nil {
			return err
		}
	}
	return nil
}

func (c config) contenderFlags() []string {
	var out []string
	if c.noCompression {
		out = append(out, "-no-compression")
	}
	if c.distinct {
		out = append(out, "-distinct")
	}
	if c.handlerCost > 0 {
		out = append(out, "-handler-cost", c.handlerCost.String())
	}
	return out
}

// runContender runs one contender in its own process; after its sync it
// runs the update burst (if updates > 0) and sends the writes' response
// times to the contender, which reports its result.
func runContender(ctx context.Context, cs kubernetes.Interface, kubeconfig, kind, resource string, round, objects, updates, nObjects, writers int, extra []string) (result, *burstStat, error) {
	burstID := fmt.Sprintf("%d-%s-%d", round, kind, time.Now().UnixNano())
	args := []string{"contender", "-kind", kind, "-resource", resource, "-kubeconfig", kubeconfig,
		"-round", fmt.Sprint(round), "-burst-id", burstID, "-objects", fmt.Sprint(objects), "-updates", fmt.Sprint(updates)}
	return runChild[result](ctx, kind, configMapBurst(ctx, cs, burstID, updates, nObjects, writers), append(args, extra...)...)
}
