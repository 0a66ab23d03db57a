package main

// The controller-runtime benchmark: what a controller author gets. The
// same manager and reconcilers over the main workload, with
// controller-runtime's own cache and with kinformer's informers under it;
// and, outside controller-runtime, client-go's SharedInformerFactory
// against kinformer's client-go SharedIndexInformers.
//
//	cd tools/bench && go run . cr

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

const (
	crBegin = "<!-- cr: begin -->"
	crEnd   = "<!-- cr: end -->"
)

// crConfig is the cr benchmark's flags.
type crConfig struct {
	*bench
	configMaps, pods, updates, writers int
	contenders, cgContenders           []string
	profileDir                         string
}

func crFlags(fs *flag.FlagSet) func(*bench) error {
	var c crConfig
	fs.IntVar(&c.configMaps, "configmaps", 20000, "ConfigMaps in the workload (about 1 KiB each)")
	fs.IntVar(&c.pods, "pods", 5000, "Pods in the workload")
	fs.IntVar(&c.updates, "updates", -1, "ConfigMaps patched once each after each contender's sync (-1: every one; 0: no burst)")
	fs.IntVar(&c.writers, "writers", 32, "concurrent writers of the update burst")
	contenders := fs.String("contenders", strings.Join([]string{kCR, kCRKCR, kCRKCRDecoded, kCRStrip, kCRKCRDrop, kCRKCRFields, kCRNewInformer}, ","), "controller-runtime contenders, comma-separated; ratios are to the first")
	cg := fs.String("cg-contenders", strings.Join([]string{kClientGo, kKClientGo, kKClientGoWrap, kKinformer}, ","), "contenders outside controller-runtime, comma-separated ('' for none)")
	fs.StringVar(&c.profileDir, "profile", "", "if set, also write CPU and heap profiles of one extra run of each controller-runtime contender here (no burst)")
	return func(b *bench) error {
		c.bench = b
		c.contenders = strings.Split(*contenders, ",")
		if *cg != "" {
			c.cgContenders = strings.Split(*cg, ",")
		}
		return cr(c)
	}
}

func cr(c crConfig) error {
	if c.updates < 0 || c.updates > c.configMaps {
		c.updates = c.configMaps // a reconcile per write: no two writes to one object
	}
	if err := checkCRContenders(c.contenders); err != nil {
		return err
	}
	if err := c.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := c.serveWorkload(c.configMaps, c.pods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	// A warm-up LIST of each collection, not recorded.
	for _, w := range [][2]any{{"configmaps", c.configMaps}, {"pods", c.pods}} {
		if _, _, err := runContender(ctx, cs, srv.Kubeconfig, kFloor, w[0].(string), 0, w[1].(int), 0, c.configMaps, c.writers, nil); err != nil {
			return fmt.Errorf("warm-up: %w", err)
		}
	}

	var crs []crResult
	var cgs []result
	var bursts []burstStat
	for r := 1; r <= c.rounds; r++ {
		for _, kind := range rotate(c.contenders, r-1) {
			time.Sleep(time.Second) // let the server settle
			res, b, err := runCRContender(ctx, cs, srv.Kubeconfig, kind, r, c, c.updates, nil)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			crs = append(crs, res)
			if b != nil {
				bursts = append(bursts, *b)
			}
			logf("%-15s round %d: synced %.3fs reconciled %.3fs (main %.3fs) cpu %.3fs/%.3fs peak heap %.1f/%.1fMB heap after %.1fMB rss %.1fMB; reconciles %d cm %d pods, %d errors; updates %d/%d cpu/reconcile %.1fµs p50 %.1fms p99 %.1fms",
				kind, r, res.SyncSeconds, res.ReconciledSeconds, res.MainSeconds, res.SyncCPUSeconds, res.ReconciledCPUSeconds,
				res.PeakHeapMB, res.PeakHeapReconciledMB, res.HeapAfterSyncMB, res.PeakRSSMB, res.CMReconciles, res.PodReconciles, res.Errors,
				res.Updates, res.UpdatesExpected, res.UpdateCPUMicros, res.LatencyP50Ms, res.LatencyP99Ms)
		}
		if len(c.cgContenders) == 0 {
			continue
		}
		for _, j := range []struct {
			resource         string
			objects, updates int
		}{{"configmaps", c.configMaps, c.updates}, {"pods", c.pods, 0}} {
			for _, kind := range rotate(c.cgContenders, r-1) {
				time.Sleep(time.Second)
				res, _, err := runContender(ctx, cs, srv.Kubeconfig, kind, j.resource, r, j.objects, j.updates, c.configMaps, c.writers, []string{"-lister"})
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", kind, j.resource, r, err)
				}
				if res.Objects != j.objects || res.ReadMisses != 0 {
					return fmt.Errorf("%s %s round %d: %d objects cached (want %d), %d reads missed", kind, j.resource, r, res.Objects, j.objects, res.ReadMisses)
				}
				res.Series = nil
				cgs = append(cgs, res)
				logf("%-15s %-10s round %d: synced %.3fs handled %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB rss %.1fMB; updates %d/%d cpu/event %.1fµs p50 %.1fms p99 %.1fms",
					kind, j.resource, r, res.SyncSeconds, res.HandledSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.PeakRSSMB,
					res.Updates, res.UpdatesExpected, res.UpdateCPUMicros, res.LatencyP50Ms, res.LatencyP99Ms)
			}
		}
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
		for _, kind := range c.contenders {
			for _, p := range []string{"cpu", "mem"} {
				file := filepath.Join(c.profileDir, fmt.Sprintf("%s.%s.pprof", strings.ReplaceAll(kind, "+", "-"), p))
				if _, _, err := runCRContender(ctx, cs, srv.Kubeconfig, kind, 0, c, 0, []string{"-" + p + "profile", file}); err != nil {
					return err
				}
				logf("wrote %s", file)
			}
		}
	}
	m.LoadEnd = loadavg()
	return c.section(crReport(m, c, crs, cgs, bursts))
}

// checkCRContenders fails on a name crNewCache does not know.
func checkCRContenders(kinds []string) error {
	for _, k := range kinds {
		if _, ok := crNewCache[k]; !ok {
			return fmt.Errorf("unknown controller-runtime contender %q", k)
		}
	}
	return nil
}

// runCRContender runs one controller-runtime contender in its own process,
// the update burst after its sync, and checks what its cache held.
func runCRContender(ctx context.Context, cs kubernetes.Interface, kubeconfig, kind string, round int, c crConfig, updates int, extra []string) (crResult, *burstStat, error) {
	burstID := fmt.Sprintf("cr-%d-%s-%d", round, kind, time.Now().UnixNano())
	args := []string{"cr-contender", "-kind", kind, "-kubeconfig", kubeconfig, "-round", fmt.Sprint(round), "-burst-id", burstID,
		"-configmaps", fmt.Sprint(c.configMaps), "-pods", fmt.Sprint(c.pods), "-updates", fmt.Sprint(updates),
		"-exec-ns", fmt.Sprint(time.Now().UnixNano())}
	res, b, err := runChild[crResult](ctx, kind, configMapBurst(ctx, cs, burstID, updates, c.configMaps, c.writers), append(args, extra...)...)
	if err != nil {
		return res, b, err
	}
	if res.CachedConfigMaps != c.configMaps || res.CachedPods != c.pods || res.Errors != 0 || res.Updates != updates {
		return res, b, fmt.Errorf("cache held %d ConfigMaps and %d Pods (want %d and %d); %d reconcile errors; %d of %d updates reconciled",
			res.CachedConfigMaps, res.CachedPods, c.configMaps, c.pods, res.Errors, res.Updates, updates)
	}
	return res, b, nil
}
