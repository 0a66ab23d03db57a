package main

// The kubeapi benchmark (issue 48): N client-go informers of ConfigMaps
// reading the API server directly, against the same N reading through one
// `kinformer serve --kube-api`: what each costs the API server (CPU,
// watches, memory) and serve, and how late the clients see updates.
//
//	cd tools/bench && go run . kubeapi

import (
	"bufio"
	"context"
	"flag"
	"fmt"
	"io"
	"math"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
)

const (
	kDirect = "direct" // N informers against the API server
	kServe  = "serve"  // N informers against kinformer serve --kube-api, which watches the API server once

	kubeapiBegin = "<!-- kubeapi: begin -->"
	kubeapiEnd   = "<!-- kubeapi: end -->"
)

// kubeapiClientsResult is what a kubeapi-clients process reports.
type kubeapiClientsResult struct {
	Clients     int     `json:"clients"`
	Objects     int     `json:"objects"`     // in every client's cache, summed
	SyncSeconds float64 `json:"syncSeconds"` // start -> every informer synced and its initial Added handled
	CPUSeconds  float64 `json:"cpuSeconds"`  // the clients' user+sys, start -> the burst seen by all
	Updates     int     `json:"updates"`     // update events seen, summed over the clients
	// ms from a write's response to its event at the client: over every
	// (client, update); and, per update, at the last client to see it.
	P50, P99, AllP50, AllP99 float64
}

// kubeapiResult is one contender's run, as the parent measures it.
type kubeapiResult struct {
	Contender string
	Round     int
	kubeapiClientsResult

	SyncWallSeconds   float64 // from before serve starts (direct: the clients) to every client synced
	ServeReadySeconds float64 // serve: start -> /readyz
	APICPUSync        float64 // the API server's CPU over the sync
	APICPUBurst       float64 // ... from the burst's start to every client having seen it
	APIWatches        float64 // the API server's ConfigMap watches once synced (apiserver_longrunning_requests)
	APIRSSMB          float64 // the API server's RSS once synced
	ServeCPU          float64 // serve's CPU over the whole run
	ServeHeapMB       float64 // serve's heap in use once synced (its /metrics)
	ServeRSSMB        float64 // serve's peak RSS (VmHWM)
	BurstSeconds      float64
}

// ---- the kubeapi-clients subcommand (a child process) ----

func kubeapiClientsMain(args []string) error {
	fs := flag.NewFlagSet("kubeapi-clients", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "the API server's kubeconfig (direct)")
	host := fs.String("host", "", "serve's URL (through serve)")
	clients := fs.Int("clients", 20, "informers, each with its own clientset")
	nCM := fs.Int("configmaps", 0, "ConfigMaps expected")
	updates := fs.Int("updates", 0, "updates of the parent's burst")
	round := fs.String("round", "", "the burst's id")
	fs.Parse(args)

	var cfg *rest.Config
	if *host != "" {
		cfg = &rest.Config{Host: *host, UserAgent: "kinformer-bench"}
		cfg.ContentType = "application/vnd.kubernetes.protobuf"
		cfg.AcceptContentTypes = "application/vnd.kubernetes.protobuf,application/json"
		cfg.QPS, cfg.Burst = 1000, 1000
	} else {
		var err error
		if cfg, err = restConfig(*kubeconfig, 1000); err != nil {
			return err
		}
	}
	res := kubeapiClientsResult{Clients: *clients}
	cpu0 := cpuSeconds()
	t0 := time.Now()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	infs := make([]cache.SharedIndexInformer, *clients)
	recs := make([]*recorder, *clients)
	for i := range infs {
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return err
		}
		cms := cs.CoreV1().ConfigMaps(cmNamespace)
		infs[i] = cache.NewSharedIndexInformer(&cache.ListWatch{
			ListWithContextFunc: func(ctx context.Context, o metav1.ListOptions) (runtime.Object, error) { return cms.List(ctx, o) },
			WatchFuncWithContext: func(ctx context.Context, o metav1.ListOptions) (watch.Interface, error) {
				return cms.Watch(ctx, o)
			},
		}, &corev1.ConfigMap{}, 0, cache.Indexers{})
		rec := newRecorder(*round, *nCM, *updates)
		recs[i] = rec
		if _, err := infs[i].AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { rec.added() },
			UpdateFunc: func(_, obj any) { rec.updated(obj.(*corev1.ConfigMap)) },
		}); err != nil {
			return err
		}
		go infs[i].RunWithContext(ctx)
	}
	for i, inf := range infs {
		if !cache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
			return fmt.Errorf("client %d did not sync", i)
		}
		select {
		case <-recs[i].addsDone:
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("client %d: not every initial Added after 2 minutes", i)
		}
		res.Objects += len(inf.GetStore().ListKeys())
	}
	res.SyncSeconds = time.Since(t0).Seconds()
	writes, err := childSynced()
	if err != nil {
		return err
	}
	resp := make(map[string]int64, len(writes))
	for _, w := range writes {
		resp[w.Name+"@"+w.RV] = w.Resp
	}
	var lat []float64
	last := map[string]int64{} // per update, when the last client saw it
	seenBy := map[string]int{}
	for i, rec := range recs {
		got, _ := rec.wait(fmt.Sprintf("client %d", i), "updates", 2*time.Minute)
		res.Updates += len(got)
		for _, r := range got {
			k := r.name + "@" + r.rv
			if t, ok := resp[k]; ok {
				lat = append(lat, float64(r.at-t)/1e6)
				last[k] = max(last[k], r.at)
				seenBy[k]++
			}
		}
	}
	res.CPUSeconds = cpuSeconds() - cpu0
	var all []float64
	for k, at := range last {
		if seenBy[k] == *clients {
			all = append(all, float64(at-resp[k])/1e6)
		}
	}
	res.P50, res.P99 = percentile(lat, 50), percentile(lat, 99)
	res.AllP50, res.AllP99 = percentile(all, 50), percentile(all, 99)
	return childResult(res)
}

// ---- the kubeapi subcommand (the parent) ----

func kubeapiFlags(fs *flag.FlagSet) func(*bench) error {
	clients := fs.Int("clients", 20, "client-go informers of the ConfigMaps, each with its own clientset")
	nCM := fs.Int("configmaps", 5000, "ConfigMaps in the workload (about 1 KiB each)")
	updates := fs.Int("updates", 1000, "updates of the burst, once every client has synced")
	writers := fs.Int("writers", 8, "concurrent writers of the burst")
	return func(b *bench) error { return kubeapi(b, *clients, *nCM, *updates, *writers) }
}

func kubeapi(b *bench, clients, nCM, updates, writers int) error {
	if err := b.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	dir, err := b.tempDir("bin")
	if err != nil {
		return err
	}
	kinformerBin := filepath.Join(dir, "kinformer")
	logf("building kinformer into %s", kinformerBin)
	build := exec.Command("go", "build", "-o", kinformerBin, ".")
	build.Dir = filepath.Join(b.root, "cmd", "kinformer")
	build.Stdout, build.Stderr = os.Stderr, os.Stderr
	if err := build.Run(); err != nil {
		return fmt.Errorf("building kinformer: %w", err)
	}
	srv, cs, err := b.serveWorkload(nCM, 0)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	if _, err := cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{}); err != nil { // a warm-up, not recorded
		return err
	}

	var results []kubeapiResult
	for r := 1; r <= b.rounds; r++ {
		for _, kind := range rotate([]string{kDirect, kServe}, r-1) {
			time.Sleep(2 * time.Second) // let the server settle
			res, err := kubeapiRun(ctx, kind, r, srv, cs, kinformerBin, clients, nCM, updates, writers)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			if res.Objects != clients*nCM || res.Updates != clients*updates {
				return fmt.Errorf("%s round %d: the clients hold %d objects and saw %d updates, want %d and %d", kind, r, res.Objects, res.Updates, clients*nCM, clients*updates)
			}
			results = append(results, res)
			logf("%-6s round %d: synced %.3fs (serve ready %.3fs), API server CPU %.2fs sync %.2fs burst, %0.f watches, rss %.0fMB; serve CPU %.2fs heap %.1fMB rss %.1fMB; clients CPU %.2fs; update p50 %.1fms p99 %.1fms, at all clients p50 %.1fms p99 %.1fms",
				kind, r, res.SyncWallSeconds, res.ServeReadySeconds, res.APICPUSync, res.APICPUBurst, res.APIWatches, res.APIRSSMB,
				res.ServeCPU, res.ServeHeapMB, res.ServeRSSMB, res.CPUSeconds, res.P50, res.P99, res.AllP50, res.AllP99)
		}
	}
	return b.section(kubeapiReport(m, b.rev, b.args, b.rounds, clients, nCM, updates, writers, results))
}

var servingLine = regexp.MustCompile(`serving .* on (http://\S+)/\n`)

// kubeapiRun runs one contender: for serve, a kinformer serve process
// first, ready before its clients start.
func kubeapiRun(ctx context.Context, kind string, round int, srv *server, cs *kubernetes.Clientset, kinformerBin string, clients, nCM, updates, writers int) (kubeapiResult, error) {
	res := kubeapiResult{Contender: kind, Round: round}
	api0 := processCPUSeconds(srv.Pid)
	t0 := time.Now()
	args := []string{"kubeapi-clients", "-kubeconfig", srv.Kubeconfig}
	var serve *exec.Cmd
	var host string
	if kind == kServe {
		serve = exec.Command(kinformerBin, "serve", "configmaps", "-n", cmNamespace, "--kube-api", "--listen", "127.0.0.1:0", "--kubeconfig", srv.Kubeconfig)
		stderr, err := serve.StderrPipe()
		if err != nil {
			return res, err
		}
		if err := serve.Start(); err != nil {
			return res, err
		}
		defer func() {
			serve.Process.Signal(syscall.SIGINT)
			serve.Wait()
		}()
		if host, err = servingAddress(stderr); err != nil {
			return res, err
		}
		for {
			resp, err := http.Get(host + "/readyz")
			if err == nil {
				resp.Body.Close()
				if resp.StatusCode == 200 {
					break
				}
			}
			if time.Since(t0) > 2*time.Minute {
				return res, fmt.Errorf("serve not ready after 2 minutes")
			}
			time.Sleep(5 * time.Millisecond)
		}
		res.ServeReadySeconds = time.Since(t0).Seconds()
		args = []string{"kubeapi-clients", "-host", host}
	}
	serveCPU := func() float64 {
		if serve == nil {
			return 0
		}
		return processCPUSeconds(serve.Process.Pid)
	}
	var apiAtSync float64
	burst := configMapBurst(ctx, cs, fmt.Sprintf("kubeapi-%s-%d", kind, round), updates, nCM, writers)
	measured := func() ([]write, time.Duration, error) {
		apiAtSync = processCPUSeconds(srv.Pid)
		res.SyncWallSeconds = time.Since(t0).Seconds()
		res.APICPUSync = apiAtSync - api0
		res.APIRSSMB = pidStatusMB(srv.Pid, "VmRSS:")
		metrics, err := cs.CoreV1().RESTClient().Get().AbsPath("/metrics").DoRaw(ctx)
		if err != nil {
			return nil, 0, fmt.Errorf("the API server's metrics: %w", err)
		}
		res.APIWatches = promSum(string(metrics), "apiserver_longrunning_requests", `resource="configmaps"`, `verb="WATCH"`)
		if serve != nil {
			res.ServeHeapMB = serveHeapMB(host)
		}
		return burst()
	}
	args = append(args, "-clients", fmt.Sprint(clients), "-configmaps", fmt.Sprint(nCM), "-updates", fmt.Sprint(updates),
		"-round", fmt.Sprintf("kubeapi-%s-%d", kind, round))
	cr, bs, err := runChild[kubeapiClientsResult](ctx, kind, measured, args...)
	if err != nil {
		return res, err
	}
	res.kubeapiClientsResult = cr
	res.APICPUBurst = processCPUSeconds(srv.Pid) - apiAtSync
	if bs != nil {
		res.BurstSeconds = bs.Seconds
	}
	if serve != nil {
		res.ServeCPU = serveCPU()
		res.ServeRSSMB = pidStatusMB(serve.Process.Pid, "VmHWM:")
	}
	return res, nil
}

// servingAddress reads serve's stderr until it says where it serves, and
// drains the rest.
func servingAddress(stderr io.Reader) (string, error) {
	br := bufio.NewReader(stderr)
	var seen strings.Builder
	for {
		line, err := br.ReadString('\n')
		seen.WriteString(line)
		if m := servingLine.FindStringSubmatch(line); m != nil {
			go io.Copy(io.Discard, br)
			return m[1], nil
		}
		if err != nil {
			return "", fmt.Errorf("serve did not say where it serves: %q", truncate(seen.String(), 500))
		}
	}
}

// serveHeapMB is serve's heap in use, from its /metrics.
func serveHeapMB(host string) float64 {
	resp, err := http.Get(host + "/metrics")
	if err != nil {
		return math.NaN()
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return promSum(string(b), "go_memstats_heap_inuse_bytes") / (1 << 20)
}

// promSum sums the samples of metric (Prometheus text) whose line has
// every one of labels.
func promSum(text, metric string, labels ...string) float64 {
	var n float64
	for _, line := range strings.Split(text, "\n") {
		if !strings.HasPrefix(line, metric+"{") && !strings.HasPrefix(line, metric+" ") ||
			slices.ContainsFunc(labels, func(l string) bool { return !strings.Contains(line, l) }) {
			continue
		}
		v, _ := strconv.ParseFloat(line[strings.LastIndexByte(line, ' ')+1:], 64)
		n += v
	}
	return n
}

// pidStatusMB is procStatusMB of process pid; NaN if it cannot.
func pidStatusMB(pid int, field string) float64 {
	if mb, ok := procStatusMB(fmt.Sprintf("/proc/%d/status", pid), field); ok {
		return mb
	}
	return math.NaN()
}

// kubeapiReport is the kubeapi section of docs/benchmarks.md, markers included.
func kubeapiReport(m machine, rev string, args []string, rounds, clients, nCM, updates, writers int, rs []kubeapiResult) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	p("%s\n## Many clients through `kinformer serve --kube-api`\n\n", kubeapiBegin)
	p("%d client-go informers (`cache.NewSharedIndexInformer`, each with its own clientset, protobuf) of %d ConfigMaps of about 1 KiB in `%s`, then a burst of %d updates by %d writers. Made on %s with `%s`, %d cores **shared with other engineers' builds** (load %s at the start, %s at the end), kinformer at revision `%s`, by:\n\n    %s\n\n",
		clients, nCM, cmNamespace, updates, writers, m.Date, m.GoVersion, m.NProc, m.LoadStart, loadavg(), rev, benchCommand("kubeapi", args))
	p("- `direct`: the informers list and watch the API server.\n")
	p("- `serve`: `kinformer serve configmaps -n %s --kube-api` is started first (its start is in the figures: its list, its watch), then the same informers list and watch it.\n", cmNamespace)
	p("- The clients in one process (this program re-executed), serve in its own; the two contenders alternate over %d rounds; figures are medians. **Synced**: from before serve starts (direct: before the clients start) to every client synced and its initial Added handled. **API server CPU**: user+sys of the localapi process (kube-apiserver and etcd) over the sync, and from the burst's start to every client having seen every update. **Watches**: the API server's `apiserver_longrunning_requests` for ConfigMap WATCHes once synced (the API server's own included, the same in both). **Update latency**: from a write's response to the client's handler, over every (client, update); *at all clients*: per update, to the last client to see it.\n\n", rounds)
	col := func(kind string, f func(kubeapiResult) float64) float64 {
		var xs []float64
		for _, r := range rs {
			if r.Contender == kind {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	p("| metric | direct | serve | serve ÷ direct |\n|---|---:|---:|---:|\n")
	for _, row := range []struct {
		name, format string
		get          func(kubeapiResult) float64
		serveOnly    bool
	}{
		{"time to every client synced (s)", "%.2f", func(r kubeapiResult) float64 { return r.SyncWallSeconds }, false},
		{"API server CPU over the sync (s)", "%.2f", func(r kubeapiResult) float64 { return r.APICPUSync }, false},
		{"API server CPU over the burst (s)", "%.2f", func(r kubeapiResult) float64 { return r.APICPUBurst }, false},
		{"API server ConfigMap watches", "%.0f", func(r kubeapiResult) float64 { return r.APIWatches }, false},
		{"serve's start to ready (s)", "%.2f", func(r kubeapiResult) float64 { return r.ServeReadySeconds }, true},
		{"serve CPU, whole run (s)", "%.2f", func(r kubeapiResult) float64 { return r.ServeCPU }, true},
		{"serve heap in use once synced (MB)", "%.1f", func(r kubeapiResult) float64 { return r.ServeHeapMB }, true},
		{"serve peak RSS (MB)", "%.1f", func(r kubeapiResult) float64 { return r.ServeRSSMB }, true},
		{"clients' CPU (s)", "%.2f", func(r kubeapiResult) float64 { return r.CPUSeconds }, false},
		{"API server + serve CPU (s)", "%.2f", func(r kubeapiResult) float64 { return r.APICPUSync + r.APICPUBurst + r.ServeCPU }, false},
		{"update latency p50 (ms)", "%.1f", func(r kubeapiResult) float64 { return r.P50 }, false},
		{"update latency p99 (ms)", "%.1f", func(r kubeapiResult) float64 { return r.P99 }, false},
		{"at all clients p50 (ms)", "%.1f", func(r kubeapiResult) float64 { return r.AllP50 }, false},
		{"at all clients p99 (ms)", "%.1f", func(r kubeapiResult) float64 { return r.AllP99 }, false},
	} {
		d, s := col(kDirect, row.get), col(kServe, row.get)
		if row.serveOnly {
			p("| %s | – | "+row.format+" | – |\n", row.name, s)
			continue
		}
		ratio := "–"
		if d != 0 && s != 0 && !math.IsNaN(d) && !math.IsNaN(s) {
			ratio = fmt.Sprintf("%.2f", s/d)
		}
		p("| %s | "+row.format+" | "+row.format+" | %s |\n", row.name, d, s, ratio)
	}
	p("\nThe API server's RSS is in every run's table below: it rises over the rounds whichever contender runs, so it does not compare them. The clients' CPU is lower through serve mostly because they speak plain HTTP to it on loopback, and TLS to the API server.\n")
	p("\n<details><summary>Every run</summary>\n\n| round | contender | synced (s) | API CPU sync (s) | API CPU burst (s) | watches | API RSS (MB) | serve ready (s) | serve CPU (s) | serve heap (MB) | serve RSS (MB) | clients CPU (s) | p50 (ms) | p99 (ms) | all p50 (ms) | all p99 (ms) |\n|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n")
	for _, r := range rs {
		serveCols := "– | – | – | –"
		if r.Contender == kServe {
			serveCols = fmt.Sprintf("%.2f | %.2f | %.1f | %.1f", r.ServeReadySeconds, r.ServeCPU, r.ServeHeapMB, r.ServeRSSMB)
		}
		p("| %d | %s | %.2f | %.2f | %.2f | %.0f | %.0f | %s | %.2f | %.1f | %.1f | %.1f | %.1f |\n", r.Round, r.Contender, r.SyncWallSeconds, r.APICPUSync, r.APICPUBurst,
			r.APIWatches, r.APIRSSMB, serveCols, r.CPUSeconds, r.P50, r.P99, r.AllP50, r.AllP99)
	}
	p("\n</details>\n%s\n", kubeapiEnd)
	return b.String()
}
