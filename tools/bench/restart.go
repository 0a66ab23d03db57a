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
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	rClientGoCold  = "client-go cold"              // SharedInformerFactory, as the main benchmark's client-go
	rKinformerCold = "kinformer cold"              // kinformer.New with StateDir on an empty directory
	rKinformerWarm = "kinformer warm"              // the same StateDir after the cold process stopped, and changes
	rKinformerBusy = "kinformer warm, busy server" // the same after the warm one stopped, changes, then one write elsewhere
	rCompactCold   = "kinformer cold compact"      // kinformer cold with Options.Compact (the compact benchmark)
	rCompactWarm   = "kinformer warm compact"      // kinformer warm with Options.Compact, from a compact cold start's StateDir

	uPlain       = "kinformer"              // no StateDir
	uState       = "kinformer+state"        // StateDir, fsync after each commit (the default)
	uStateNoSync = "kinformer+state-nosync" // StateDir and StateNoSync

	restartBegin = "<!-- restart: begin -->"
	restartEnd   = "<!-- restart: end -->"
)

// restartResult is what a restart-contender process reports, as one JSON line.
type restartResult struct {
	Contender string `json:"contender"`
	Resource  string `json:"resource"`
	Round     int    `json:"round"`
	Objects   int    `json:"objects"` // in the cache when synced
	Differ    int    `json:"differ"`  // objects whose presence or resourceVersion differs from a LIST made once stopped

	ExecSeconds     float64 `json:"execSeconds"`     // the parent's exec -> synced
	SyncSeconds     float64 `json:"syncSeconds"`     // just before New (or the factory) -> synced
	HandledSeconds  float64 `json:"handledSeconds"`  // just before New -> the handler has had every event up to sync
	DurableSeconds  float64 `json:"durableSeconds"`  // just before New -> Stop returned once handled (final commit done)
	SyncCPUSeconds  float64 `json:"syncCPUSeconds"`  // user+sys, just before New -> synced
	DurableCPU      float64 `json:"durableCPU"`      // user+sys, just before New -> Stop returned
	PeakHeapMB      float64 `json:"peakHeapMB"`      // highest heap sample up to synced
	HeapAfterSyncMB float64 `json:"heapAfterSyncMB"` // after sync (and, in restart mode, Stop) and runtime.GC() twice
	PeakRSSMB       float64 `json:"peakRSSMB"`       // VmHWM when synced
	FileMB          float64 `json:"fileMB"`          // the state file's size once stopped

	// Requests up to synced (the connection-opening GET excluded).
	Lists      int64    `json:"lists"`
	Watches    int64    `json:"watches"`
	WatchLists int64    `json:"watchLists"`
	Other      int64    `json:"other"`
	Requests   []string `json:"requests"` // each LIST and WATCH, with its parameters
	BodyMB     float64  `json:"bodyMB"`   // response bytes read, after gunzip

	Causes map[string]int64 `json:"causes"` // object events handled by the end, by type and cause
	Errors []string         `json:"errors"` // Error events

	// First read: the cache non-empty (polled every 1 ms from New), and,
	// for kinformer, the first Added with CauseRestore handled. A warm
	// start answers reads from the file by then; a cold one from its list.
	FirstReadSeconds    float64 `json:"firstReadSeconds"`
	FirstRestoreSeconds float64 `json:"firstRestoreSeconds"`
	// Re-lists up to synced, with the reason kinformer logged (410 Gone:
	// "too old resource version"), and the informer's resourceVersion
	// once stopped (the state file's, for kinformer).
	Relists         []string `json:"relists"`
	ResourceVersion string   `json:"resourceVersion"`

	// The update path (-updates > 0).
	Updates          int     `json:"updates"`
	UpdatesExpected  int     `json:"updatesExpected"`
	QuietSeconds     float64 `json:"quietSeconds"`     // waited after sync for the process's writes to stop
	UpdateCPUMicros  float64 `json:"updateCPUMicros"`  // CPU from the burst's start to the last event, per event
	CommitCPUMicros  float64 `json:"commitCPUMicros"`  // CPU from the burst's start to Stop returned, per event
	EventsPerSec     float64 `json:"eventsPerSec"`     // update events handled / (last - first)
	CommittedPerSec  float64 `json:"committedPerSec"`  // update events / (first event -> Stop returned)
	StopMs           float64 `json:"stopMs"`           // Stop after the last event (the final commit)
	WrittenKBPerEvt  float64 `json:"writtenKBPerEvt"`  // write(2) bytes (/proc/self/io wchar) per update event
	HeapAfterBurstMB float64 `json:"heapAfterBurstMB"` //
}

// reqLog records each LIST and WATCH of the collection with the parameters
// that tell a warm start from a cold one.
type reqLog struct {
	mu   sync.Mutex
	reqs []string
}

func (l *reqLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		p := req.URL.Path
		last := p[strings.LastIndex(p, "/")+1:]
		if req.Method == http.MethodGet && (last == "pods" || last == "configmaps") {
			what := describeRequest(req.URL.Query(), false)
			l.mu.Lock()
			l.reqs = append(l.reqs, what)
			l.mu.Unlock()
		}
		return rt.RoundTrip(req)
	})
}

// procWchar is the bytes this process has passed to write(2) and friends.
func procWchar() int64 {
	b, err := os.ReadFile("/proc/self/io")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if v, ok := strings.CutPrefix(line, "wchar:"); ok {
			n, _ := strconv.ParseInt(strings.TrimSpace(v), 10, 64)
			return n
		}
	}
	return 0
}

// dirMtime is the latest modification time of the files in dir.
func dirMtime(dir string) time.Time {
	var t time.Time
	if dir == "" {
		return t
	}
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil && fi.ModTime().After(t) {
				t = fi.ModTime()
			}
		}
		return nil
	})
	return t
}

// dirMB is the size of the files in dir.
func dirMB(dir string) float64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return float64(n) / (1 << 20)
}

// ---- the restart-contender subcommand (a child process) ----

// churner makes the changes between a cold and a warm start: it modifies,
// deletes and creates objects of one collection, keeping their number.
type churner struct {
	resource   string
	modifiable []string // never deleted; the update burst's objects are among them
	deletable  []string // deleted first-in first-out; created objects join at the end
	run        string   // distinguishes this run's created names
	created    int
}

func (c *churner) churn(ctx context.Context, cs kubernetes.Interface, modify, del int) (time.Duration, error) {
	start := time.Now()
	r := rand.New(rand.NewPCG(uint64(time.Now().UnixNano()), 7))
	mods := make([]string, modify)
	for i, j := range r.Perm(len(c.modifiable))[:modify] {
		mods[i] = c.modifiable[j]
	}
	gone := c.deletable[:del]
	c.deletable = c.deletable[del:]
	var names []string
	for range del {
		names = append(names, fmt.Sprintf("%s-x%s-%05d", map[string]string{"configmaps": "cm", "pods": "pod"}[c.resource], c.run, c.created))
		c.created++
	}
	c.deletable = append(c.deletable, names...)
	zero := int64(0)
	do := func(n int, fn func(i int) error) error { return parallel(n, 16, fn) }
	patch := func(i int) []byte {
		return fmt.Appendf(nil, `{"metadata":{"annotations":{"bench/churn":%q}}}`, strconv.FormatInt(time.Now().UnixNano()+int64(i), 10))
	}
	if c.resource == "configmaps" {
		api := cs.CoreV1().ConfigMaps(cmNamespace)
		if err := do(len(mods), func(i int) error {
			_, err := api.Patch(ctx, mods[i], types.MergePatchType, fmt.Appendf(nil, `{"data":{"payload":%q}}`, randHex(rand.New(rand.NewPCG(uint64(i), uint64(time.Now().UnixNano()))), 240)), metav1.PatchOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return 0, err
		}
		if err := do(len(gone), func(i int) error {
			if err := api.Delete(ctx, gone[i], metav1.DeleteOptions{}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		}); err != nil {
			return 0, err
		}
		if err := do(len(names), func(i int) error {
			cm := configMap(1_000_000 + i)
			cm.Name = names[i]
			_, err := api.Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return 0, err
		}
	} else {
		api := cs.CoreV1().Pods(podNamespace)
		if err := do(len(mods), func(i int) error {
			_, err := api.Patch(ctx, mods[i], types.MergePatchType, patch(i), metav1.PatchOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return 0, err
		}
		if err := do(len(gone), func(i int) error {
			if err := api.Delete(ctx, gone[i], metav1.DeleteOptions{GracePeriodSeconds: &zero}); err != nil && !apierrors.IsNotFound(err) {
				return err
			}
			return nil
		}); err != nil {
			return 0, err
		}
		if err := do(len(names), func(i int) error {
			p := pod(1_000_000 + i)
			p.Name = names[i]
			_, err := api.Create(ctx, p, metav1.CreateOptions{FieldManager: fieldManager})
			return err
		}); err != nil {
			return 0, err
		}
	}
	return time.Since(start), nil
}

// touchElsewhere writes a ConfigMap in the default namespace: the server's
// resourceVersion moves past the benchmark's collections' last change.
func touchElsewhere(ctx context.Context, cs kubernetes.Interface) error {
	api := cs.CoreV1().ConfigMaps("default")
	data := map[string]string{"at": time.Now().Format(time.RFC3339Nano)}
	cm, err := api.Get(ctx, "bench-elsewhere", metav1.GetOptions{})
	if apierrors.IsNotFound(err) {
		_, err = api.Create(ctx, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-elsewhere"}, Data: data}, metav1.CreateOptions{FieldManager: fieldManager})
		return err
	}
	if err != nil {
		return err
	}
	cm.Data = data
	_, err = api.Update(ctx, cm, metav1.UpdateOptions{FieldManager: fieldManager})
	return err
}

// runRestartContender runs one restart-contender process; with updates > 0
// it runs the update burst after the contender's sync.
func runRestartContender(ctx context.Context, cs kubernetes.Interface, kubeconfig, kind, resource, stateDir string, round, updates, nObjects, writers int, extra ...string) (restartResult, *burstStat, error) {
	burstID := fmt.Sprintf("restart-%d-%s-%d", round, kind, time.Now().UnixNano())
	args := []string{"restart-contender", "-kind", kind, "-resource", resource, "-kubeconfig", kubeconfig, "-round", fmt.Sprint(round),
		"-state-dir", stateDir, "-burst-id", burstID, "-updates", fmt.Sprint(updates)}
	args = append(args, extra...)
	if restartHandlerCost > 0 {
		args = append(args, "-handler-cost", restartHandlerCost.String())
	}
	args = append(args, "-exec-ns", fmt.Sprint(time.Now().UnixNano()))
	return runChild[restartResult](ctx, kind, configMapBurst(ctx, cs, burstID, updates, nObjects, writers), args...)
}

func restartFlags(fs *flag.FlagSet) func(*bench) error {
	var c restartConfig
	fs.IntVar(&c.nCM, "configmaps", 20000, "ConfigMaps in the workload (about 1 KiB each)")
	fs.IntVar(&c.nPods, "pods", 5000, "Pods in the workload (0: skip them)")
	fs.IntVar(&c.updates, "updates", -1, "ConfigMap updates in each update-path burst (-1: as many as -configmaps; 0: no update-path figures)")
	fs.IntVar(&c.writers, "writers", 32, "concurrent writers of the update burst")
	fs.Float64Var(&c.churn, "churn", 0.02, "fraction of the objects changed between the cold and the warm start: half modified, a quarter deleted, a quarter created")
	fs.StringVar(&c.profile, "profile", "", "if set, write CPU profiles (New to synced) of the first round's contenders here, as RESOURCE-KIND.cpu.pprof")
	fs.BoolVar(&c.logInfo, "log", false, "contenders write kinformer's informational logs to stderr")
	fs.DurationVar(&restartHandlerCost, "handler-cost", 0, "each contender's handler spends this long on every Added and Modified (a mapper that reads the cache: 50us), so that time to handled shows whether the handler's work overlaps the start (issue 45)")
	fs.StringVar(&c.save, "save", filepath.Join(os.TempDir(), "kinformer-bench-restart.json"), "write the results here ('' for nowhere; with -down, the default is kinformer-bench-restart-down.json beside it)")
	fs.StringVar(&c.replay, "replay", "", "run nothing: make the report (or, from a -down run's results, its subsection) from results saved by -save")
	fs.StringVar(&c.down, "down", "", "instead of the usual contenders, warm restarts of the ConfigMaps after this long down, e.g. 1m,10m: the collection changes -churn over the time down, the rest of the cluster writes all along, the API server compacts etcd every 5 minutes; against client-go cold, into their own subsection of the restart section")
	fs.StringVar(&c.downRounds, "down-rounds", "", "rounds for each -down, e.g. 3,1 (default: -rounds each)")
	return func(b *bench) error {
		c.bench = b
		return restart(c)
	}
}

// restartHandlerCost is -handler-cost, passed to each contender.
var restartHandlerCost time.Duration

// restartConfig is the restart benchmark's flags.
type restartConfig struct {
	*bench
	nCM, nPods, updates, writers int
	churn                        float64
	profile, save, replay        string
	down, downRounds             string
	logInfo                      bool
}

func restart(c restartConfig) error {
	nCM, nPods, writers, churn, profile, logInfo := c.nCM, c.nPods, c.writers, c.churn, c.profile, c.logInfo
	updates := c.updates
	if updates < 0 {
		updates = nCM
	}

	if c.replay != "" {
		// A -down run's results have its time down; the usual run's not.
		var kind struct{ Downs []downSpec }
		if err := readResults(c.replay, &kind); err != nil {
			return err
		}
		if len(kind.Downs) > 0 {
			var dr downRun
			if err := readResults(c.replay, &dr); err != nil {
				return err
			}
			return c.downSection(downReport(dr))
		}
		var rr restartRun
		if err := readResults(c.replay, &rr); err != nil {
			return err
		}
		return c.section(c.keepDownSection(restartReport(rr)))
	}
	if c.down != "" {
		specs, err := parseDowns(c.down, c.downRounds, c.rounds)
		if err != nil {
			return err
		}
		// Not over the usual run's results, which -replay makes the
		// whole section from.
		if c.save == filepath.Join(os.TempDir(), "kinformer-bench-restart.json") {
			c.save = filepath.Join(os.TempDir(), "kinformer-bench-restart-down.json")
		}
		return restartDown(c, specs)
	}
	if err := c.prepare(); err != nil {
		return err
	}
	stateRoot, err := c.tempDir("state")
	if err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := c.serveWorkload(nCM, nPods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()

	jobs, err := restartJobs(ctx, cs, nCM, nPods)
	if err != nil {
		return err
	}
	var results []restartResult
	var churnSecs []float64
	for _, j := range jobs {
		for r := 1; r <= c.rounds; r++ {
			dir := filepath.Join(stateRoot, fmt.Sprintf("%s-%d", j.resource, r))
			order := []string{rClientGoCold, rKinformerCold, rKinformerWarm, rKinformerBusy}
			if r%2 == 0 {
				order = []string{rKinformerCold, rKinformerWarm, rKinformerBusy, rClientGoCold}
			}
			rs, secs, err := restartSequence(ctx, cs, srv.Kubeconfig, j, r, order, func(string) string { return dir }, churn,
				func(kind string) ([]string, error) {
					var extra []string
					if logInfo {
						extra = append(extra, "-log")
					}
					if profile != "" && r == 1 {
						if err := os.MkdirAll(profile, 0o755); err != nil {
							return nil, err
						}
						extra = append(extra, "-cpuprofile", filepath.Join(profile, j.resource+"-"+strings.NewReplacer(" ", "-", ",", "").Replace(kind)+".cpu.pprof"))
					}
					return extra, nil
				})
			results, churnSecs = append(results, rs...), append(churnSecs, secs...)
			if err != nil {
				return err
			}
		}
	}

	var ups []restartResult
	var bursts []burstStat
	if updates > 0 && nCM > 0 {
		dir := filepath.Join(stateRoot, "updates")
		// Fill the state file once (not recorded), so that each state
		// contender starts warm and its sync commits little.
		res, _, err := runRestartContender(ctx, cs, srv.Kubeconfig, uState, "configmaps", dir, 0, 0, 0, 0)
		if err != nil {
			return fmt.Errorf("filling the state file: %w", err)
		}
		logRestart(res)
		burstObjects := nCM * 9 / 10
		for r := 1; r <= c.rounds; r++ {
			for _, kind := range rotate([]string{uPlain, uState, uStateNoSync}, r-1) {
				time.Sleep(time.Second)
				res, b, err := runRestartContender(ctx, cs, srv.Kubeconfig, kind, "configmaps", dir, r, updates, burstObjects, writers)
				if err != nil {
					return fmt.Errorf("%s update path round %d: %w", kind, r, err)
				}
				logf("%-22s updates    round %d: sync %.3fs quiet after %.1fs; updates %d/%d in %.1fs; cpu/event %.1fµs (with final commit %.1fµs); %.0f events/s, %.0f committed/s; stop %.1fms; written %.2fKB/event; errors %v",
					kind, r, res.SyncSeconds, res.QuietSeconds, res.Updates, res.UpdatesExpected, b.Seconds, res.UpdateCPUMicros, res.CommitCPUMicros,
					res.EventsPerSec, res.CommittedPerSec, res.StopMs, res.WrittenKBPerEvt, res.Errors)
				ups = append(ups, res)
				bursts = append(bursts, *b)
			}
		}
	}

	rr := restartRun{Machine: m, LoadEnd: loadavg(), Rev: c.rev, Args: c.args, Rounds: c.rounds, Churn: churn, Updates: updates, Writers: writers,
		Results: results, Ups: ups, Bursts: bursts, ChurnSec: median(churnSecs)}
	for _, j := range jobs {
		if j.resource == "configmaps" {
			rr.NCM = j.n
		} else {
			rr.NPods = j.n
		}
	}
	if err := saveResults(c.save, rr); err != nil {
		return err
	}
	return c.section(c.keepDownSection(restartReport(rr)))
}

// restartJob is one collection of the restart benchmarks: its objects when
// listed, and what changes them between a cold and a warm start.
type restartJob struct {
	resource string
	n        int
	ch       *churner
}

// restartJobs lists the main workload's ConfigMaps and Pods (nCM and nPods
// of them were created; 0 leaves a collection out). The objects there now
// (a warm-up LIST, not recorded): the update burst and the modifications
// touch the first 90% of the workload's names, deletions start with the
// last 10%.
func restartJobs(ctx context.Context, cs kubernetes.Interface, nCM, nPods int) ([]restartJob, error) {
	run := strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	var jobs []restartJob
	for _, j := range []struct {
		resource string
		n        int
		name     func(int) string
	}{{"configmaps", nCM, cmName}, {"pods", nPods, podName}} {
		if j.n == 0 {
			continue
		}
		var names []string
		if j.resource == "configmaps" {
			var l *corev1.ConfigMapList
			if err := retried(func() (err error) {
				l, err = cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{})
				return err
			}); err != nil {
				return nil, err
			}
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		} else {
			var l *corev1.PodList
			if err := retried(func() (err error) {
				l, err = cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{})
				return err
			}); err != nil {
				return nil, err
			}
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		}
		ch := &churner{resource: j.resource, run: run}
		fixed := map[string]bool{}
		for i := range j.n * 9 / 10 {
			ch.modifiable = append(ch.modifiable, j.name(i))
			fixed[j.name(i)] = true
		}
		for _, n := range names {
			if !fixed[n] {
				ch.deletable = append(ch.deletable, n)
			}
		}
		jobs = append(jobs, restartJob{j.resource, len(names), ch})
	}
	return jobs, nil
}

func logRestart(r restartResult) {
	logf("%-22s %-10s round %d: objects %d (differing %d) synced %.3fs (exec %.3fs, handled %.3fs, durable %.3fs) cpu %.3fs (durable %.3fs) read %.2fMB requests %v peak heap %.1fMB after %.1fMB rss %.1fMB file %.1fMB causes %v errors %v",
		r.Contender, r.Resource, r.Round, r.Objects, r.Differ, r.SyncSeconds, r.ExecSeconds, r.HandledSeconds, r.DurableSeconds, r.SyncCPUSeconds, r.DurableCPU, r.BodyMB, r.Requests,
		r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.FileMB, r.Causes, r.Errors)
}

// restartSequence runs one round of job j's restart contenders in order,
// each in its own process: before each warm one (a kind with "warm" in its
// name) it changes churn of the collection (half modified, a quarter
// deleted, a quarter created); before the busy one it also writes
// elsewhere. dir gives each kind its StateDir, extra its further flags.
// It returns the results and the changes' durations, as far as it got.
func restartSequence(ctx context.Context, cs kubernetes.Interface, kubeconfig string, j restartJob, round int, order []string,
	dir func(kind string) string, churn float64, extra func(kind string) ([]string, error)) ([]restartResult, []float64, error) {
	modify := int(float64(j.n) * churn / 2)
	del := int(float64(j.n) * churn / 4)
	var results []restartResult
	var churnSecs []float64
	for _, kind := range order {
		if strings.Contains(kind, "warm") {
			d, err := j.ch.churn(ctx, cs, modify, del)
			if err != nil {
				return results, churnSecs, fmt.Errorf("churn: %w", err)
			}
			churnSecs = append(churnSecs, d.Seconds())
			logf("changed %s: %d modified, %d deleted, %d created in %.1fs", j.resource, modify, del, del, d.Seconds())
		}
		if kind == rKinformerBusy {
			// What a live cluster does all the time (leases, events):
			// a write elsewhere, after the collection's last change.
			if err := touchElsewhere(ctx, cs); err != nil {
				return results, churnSecs, err
			}
		}
		time.Sleep(time.Second) // let the server settle
		ex, err := extra(kind)
		if err != nil {
			return results, churnSecs, err
		}
		res, _, err := runRestartContender(ctx, cs, kubeconfig, kind, j.resource, dir(kind), round, 0, 0, 0, ex...)
		if err != nil {
			return results, churnSecs, fmt.Errorf("%s %s round %d: %w", kind, j.resource, round, err)
		}
		logRestart(res)
		if res.Differ > 0 {
			logf("WARNING: %s %s round %d: %d objects differ from the server's once synced", kind, j.resource, round, res.Differ)
		}
		if res.Objects != j.n {
			return results, churnSecs, fmt.Errorf("%s %s round %d: %d objects in the cache at sync, the server has %d", kind, j.resource, round, res.Objects, j.n)
		}
		results = append(results, res)
	}
	return results, churnSecs, nil
}
