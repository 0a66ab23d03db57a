// Command bench measures kinformer against client-go's shared informer on a
// real local kube-apiserver (tools/localapi), each contender in its own
// process, alternating, over several rounds, and writes docs/benchmarks.md
// and heap charts.
//
//	cd tools/bench && go run .              # the full benchmark (15-25 minutes)
//	cd tools/bench && go run . micro        # the cache micro-benchmarks into docs/benchmarks.md
//	cd tools/bench && go run . factory      # a Factory's shared informers against independent ones (a few minutes)
//	cd tools/bench && go run . restart      # warm restart from Options.StateDir against cold starts, and its cost per update
//	cd tools/bench && go run . crd          # custom resources (JSON): dynamic and typed informers of both libraries
//	cd tools/bench && go run . shard        # 1, 2, 4 sharded replicas, server- and client-side filtering; join and death
//	cd tools/bench && go run . cr           # controller-runtime managers over either cache; client-go SharedIndexInformers of both libraries
//	cd tools/bench && go run . compact      # Options.Compact (issue 22): 20,000 and 50,000 Pods, reads, custom resources, warm restarts
//
// It is its own Go module so that `go test ./...` at the repository root
// never builds it.
package main

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "contender":
			if err := contenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "contender:", err)
				os.Exit(1)
			}
			return
		case "factory":
			if err := factoryMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "factory:", err)
				os.Exit(1)
			}
			return
		case "factory-contender":
			if err := factoryContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "factory-contender:", err)
				os.Exit(1)
			}
			return
		case "restart":
			if err := restartMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "restart:", err)
				os.Exit(1)
			}
			return
		case "restart-contender":
			if err := restartContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "restart-contender:", err)
				os.Exit(1)
			}
			return
		case "crd":
			if err := crdMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "crd:", err)
				os.Exit(1)
			}
			return
		case "crd-contender":
			if err := crdContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "crd-contender:", err)
				os.Exit(1)
			}
			return
		case "shard":
			if err := shardMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "shard:", err)
				os.Exit(1)
			}
			return
		case "shard-replica":
			if err := shardReplicaMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "shard-replica:", err)
				os.Exit(1)
			}
			return
		case "cr":
			if err := crMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "cr:", err)
				os.Exit(1)
			}
			return
		case "cr-contender":
			if err := crContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "cr-contender:", err)
				os.Exit(1)
			}
			return
		case "compact":
			if err := compactMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "compact:", err)
				os.Exit(1)
			}
			return
		case "compact-contender":
			if err := compactContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "compact-contender:", err)
				os.Exit(1)
			}
			return
		case "micro":
			if err := microMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "micro:", err)
				os.Exit(1)
			}
			return
		}
	}
	if err := benchMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
}

// repoRoot finds the kinformer repository root above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "tools", "localapi", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no kinformer repository (tools/localapi/go.mod) above %s", dir)
		}
	}
}

type config struct {
	rounds, configMaps, pods, updates, writers int
	contenders                                 []string
	out, dataDir, localapi                     string
	keep, verbose                              bool
	profileDir                                 string
	rev                                        string
	noCompression                              bool
	distinct                                   bool
	args                                       []string
}

func benchMain(args []string) error {
	var c config
	fs := flag.NewFlagSet("bench", flag.ExitOnError)
	fs.IntVar(&c.rounds, "rounds", 3, "rounds; each runs every contender once, the order rotating")
	fs.IntVar(&c.configMaps, "configmaps", 20000, "ConfigMaps in the workload (about 1 KiB each)")
	fs.IntVar(&c.pods, "pods", 5000, "Pods in the workload (0: skip the pod benchmark)")
	fs.IntVar(&c.updates, "updates", 20000, "ConfigMap updates in the burst after each contender's sync (0: none)")
	fs.IntVar(&c.writers, "writers", 32, "concurrent writers of the update burst")
	contenders := fs.String("contenders", strings.Join([]string{kClientGo, kKinformer, kCompact, kClientGoStrip, kFloor}, ","), "contenders, comma-separated")
	fs.StringVar(&c.out, "out", "docs/benchmarks.md", "the report, relative to the repository root ('' for none)")
	fs.StringVar(&c.dataDir, "data-dir", "", "localapi data dir (default: a new temporary one); reuse one to skip creating the workload")
	fs.StringVar(&c.localapi, "localapi", "", "localapi binary (default: where `make localapi` puts it; built if missing)")
	fs.BoolVar(&c.keep, "keep", false, "keep the temporary data dir")
	fs.BoolVar(&c.verbose, "v", false, "show localapi's logs")
	fs.StringVar(&c.profileDir, "profile", "", "if set, also write CPU and allocation profiles of one extra kinformer and client-go sync of ConfigMaps here, and CPU profiles of their update bursts (*.burst.cpu.pprof)")
	fs.BoolVar(&c.noCompression, "no-compression", false, "contenders set rest.Config.DisableCompression (no gzip responses)")
	fs.BoolVar(&c.distinct, "distinct", false, "ConfigMaps that share little (issue 13): no two with equal labels, most label values unique, in namespace bench-cm-distinct")
	fs.StringVar(&c.rev, "rev", "", "the kinformer revision measured, for the report (default: git describe --always --dirty of the repository)")
	fs.Parse(args)
	c.contenders = strings.Split(*contenders, ",")
	c.args = args
	setDistinct(c.distinct)

	root, err := repoRoot()
	if err != nil {
		return err
	}
	if c.rev == "" {
		out, _ := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
		c.rev = strings.TrimSpace(string(out))
	}
	bin, err := localapiPath(c.localapi, root)
	if err != nil {
		return err
	}
	if c.dataDir == "" {
		if c.dataDir, err = os.MkdirTemp("", "kinformer-bench-"); err != nil {
			return err
		}
		if !c.keep {
			defer os.RemoveAll(c.dataDir)
		}
	} else if err := os.MkdirAll(c.dataDir, 0o755); err != nil {
		return err
	}
	machine := describeMachine()
	srv, cs, err := serveWorkload(bin, c.dataDir, c.verbose, c.configMaps, c.pods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()

	self, err := os.Executable()
	if err != nil {
		return err
	}
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
		if _, _, err := runContender(ctx, cs, self, srv.Kubeconfig, kFloor, j.resource, 0, j.objects, 0, c.configMaps, c.writers, c.contenderFlags()); err != nil {
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
				res, b, err := runContender(ctx, cs, self, srv.Kubeconfig, kind, j.resource, r, j.objects, upd, c.configMaps, c.writers, c.contenderFlags())
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", kind, j.resource, r, err)
				}
				results = append(results, res)
				if b != nil {
					bursts = append(bursts, *b)
				}
				logf("%-17s %-10s round %d: synced %.3fs cpu %.3fs peak heap %.1fMB heap after %.1fMB rss %.1fMB; updates %d/%d cpu/event %.1fµs p50 %.1fms p99 %.1fms",
					kind, j.resource, r, res.SyncSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.HeapAfterSyncMB, res.PeakRSSMB,
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
				if _, _, err := runContender(ctx, cs, self, srv.Kubeconfig, kind, "configmaps", 0, c.configMaps, updates, c.configMaps, c.writers, append(c.contenderFlags(), "-"+p+"profile", file)); err != nil {
					return err
				}
				logf("wrote %s", file)
			}
		}
	}
	rep := buildReport(c, machine, results, bursts)
	fmt.Println(rep.text)
	if c.out != "" {
		if err := rep.write(root, c.out); err != nil {
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
	return out
}

func rotate(xs []string, n int) []string {
	n %= len(xs)
	return append(append([]string(nil), xs[n:]...), xs[:n]...)
}

type burstStat struct {
	Contender string
	Writes    int
	Seconds   float64
}

// runContender runs one contender in its own process; after its sync it
// runs the update burst (if updates > 0) and sends the writes' response
// times to the contender, which reports its result.
func runContender(ctx context.Context, cs kubernetes.Interface, self, kubeconfig, kind, resource string, round, objects, updates, nObjects, writers int, extra []string) (result, *burstStat, error) {
	burstID := fmt.Sprintf("%d-%s-%d", round, kind, time.Now().UnixNano())
	args := []string{"contender", "-kind", kind, "-resource", resource, "-kubeconfig", kubeconfig,
		"-round", fmt.Sprint(round), "-burst-id", burstID, "-objects", fmt.Sprint(objects), "-updates", fmt.Sprint(updates)}
	cmd := exec.CommandContext(ctx, self, append(args, extra...)...)
	return driveContender[result](ctx, cs, cmd, kind, burstID, updates, nObjects, writers)
}

// driveContender runs cmd, a contender process that prints "synced" once
// synced, then reads the update writes' response times (a JSON array) on
// its stdin and prints its result (JSON). After the sync it runs the update
// burst (if updates > 0) and sends the writes.
func driveContender[R any](ctx context.Context, cs kubernetes.Interface, cmd *exec.Cmd, kind, burstID string, updates, nObjects, writers int) (R, *burstStat, error) {
	return driveContenderWith[R](cmd, kind, updates, func() ([]write, time.Duration, error) {
		return updateBurst(ctx, cs, burstID, updates, nObjects, writers)
	})
}

// driveContenderWith is driveContender with the update burst given as a
// function (the crd benchmark patches custom resources).
func driveContenderWith[R any](cmd *exec.Cmd, kind string, updates int, burst func() ([]write, time.Duration, error)) (R, *burstStat, error) {
	var res R
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, nil, err
	}
	if err := cmd.Start(); err != nil {
		return res, nil, err
	}
	defer cmd.Wait()
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "synced" {
		cmd.Process.Kill()
		return res, nil, fmt.Errorf("contender did not sync (%q, %v)", line, err)
	}
	var b *burstStat
	writes := []write{}
	if updates > 0 {
		var d time.Duration
		writes, d, err = burst()
		if err != nil {
			cmd.Process.Kill()
			return res, nil, err
		}
		b = &burstStat{Contender: kind, Writes: updates, Seconds: d.Seconds()}
	}
	if err := json.NewEncoder(stdin).Encode(writes); err != nil {
		return res, nil, err
	}
	stdin.Close()
	rest, err := io.ReadAll(br)
	if err != nil {
		return res, nil, err
	}
	if err := json.Unmarshal(rest, &res); err != nil {
		return res, nil, fmt.Errorf("contender result %q: %w", truncate(string(rest), 200), err)
	}
	return res, b, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}
