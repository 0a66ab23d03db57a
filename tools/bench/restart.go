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
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/http"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/kinformer/kinformer"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	rClientGoCold  = "client-go cold"              // SharedInformerFactory, as the main benchmark's client-go
	rKinformerCold = "kinformer cold"              // kinformer.New with StateDir on an empty directory
	rKinformerWarm = "kinformer warm"              // the same StateDir after the cold process stopped, and changes
	rKinformerBusy = "kinformer warm, busy server" // the same after the warm one stopped, changes, then one write elsewhere

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
			q := req.URL.Query()
			what := "LIST"
			if q.Get("watch") == "true" || q.Get("watch") == "1" {
				what = "WATCH"
			}
			var ps []string
			if v := q.Get("limit"); v != "" {
				ps = append(ps, "limit="+v)
			}
			switch rv := q.Get("resourceVersion"); rv {
			case "":
			case "0":
				ps = append(ps, "rv=0")
			default:
				ps = append(ps, "rv=N")
			}
			if q.Get("sendInitialEvents") == "true" {
				ps = append(ps, "sendInitialEvents")
			}
			if len(ps) > 0 {
				what += " " + strings.Join(ps, ",")
			}
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

// restartUnderTest is one informer of either library.
type restartUnderTest struct {
	start    func()
	waitSync func(context.Context) error
	handled  func() bool // the handler has had every event up to sync
	stop     func()
	length   func() int
	versions func() map[string]string // name -> resourceVersion in the cache
}

func kinformerRestart[T kinformer.Object](inf *kinformer.Informer[T], rec *recorder, causes *causeCounter) restartUnderTest {
	reg := inf.AddHandler(func(e kinformer.Event[T]) {
		causes.add(e)
		switch e.Type {
		case kinformer.Added:
			rec.added()
		case kinformer.Modified:
			rec.updated(e.Object)
		}
	})
	return restartUnderTest{start: inf.Start, waitSync: inf.WaitForSync, stop: inf.Stop, length: inf.Cache().Len,
		handled: func() bool { return reg.HasSynced() && reg.Pending() == 0 },
		versions: func() map[string]string {
			m := map[string]string{}
			for _, o := range inf.Cache().List() {
				m[o.GetName()] = o.GetResourceVersion()
			}
			return m
		}}
}

type causeCounter struct {
	mu     sync.Mutex
	n      map[string]int64
	errors []string
}

func (c *causeCounter) add(e any) {
	var key, errText string
	switch e := e.(type) {
	case kinformer.Event[*corev1.ConfigMap]:
		key, errText = string(e.Type)+" "+e.Cause.String(), errString(e.Err)
	case kinformer.Event[*corev1.Pod]:
		key, errText = string(e.Type)+" "+e.Cause.String(), errString(e.Err)
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if strings.HasPrefix(key, string(kinformer.Error)) {
		c.errors = append(c.errors, errText)
		return
	}
	if strings.HasPrefix(key, string(kinformer.Bookmark)) {
		return
	}
	c.n[key]++
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func restartContenderMain(args []string) error {
	fs := flag.NewFlagSet("restart-contender", flag.ExitOnError)
	kind := fs.String("kind", rKinformerCold, "client-go cold | kinformer cold | kinformer warm | kinformer | kinformer+state | kinformer+state-nosync")
	resource := fs.String("resource", "configmaps", "configmaps | pods")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	stateDir := fs.String("state-dir", "", "Options.StateDir (kinformer contenders but plain kinformer)")
	execNs := fs.Int64("exec-ns", 0, "when the parent started this process (UnixNano)")
	burstID := fs.String("burst-id", "", "value of the bench/round annotation of the update burst")
	updates := fs.Int("updates", 0, "update events to expect after sync (writes come from the parent); 0: restart mode (stop at sync)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile from just before New to synced to this file")
	logInfo := fs.Bool("log", false, "kinformer's informational logs to stderr")
	fs.Parse(args)
	var logger *slog.Logger
	if *logInfo {
		logger = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})).With("contender", *kind, "resource", *resource)
	}

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	counter, rl := &reqCounter{}, &reqLog{}
	cfg.WrapTransport = func(rt http.RoundTripper) http.RoundTripper { return rl.wrap(counter.wrap(rt)) }
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := map[string]string{"configmaps": cmNamespace, "pods": podNamespace}[*resource]
	if ns == "" {
		return fmt.Errorf("unknown resource %q", *resource)
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder(*burstID, 0, *updates)
	causes := &causeCounter{n: map[string]int64{}}
	res := restartResult{Contender: *kind, Resource: *resource, Round: *round, UpdatesExpected: *updates}

	// Open the connection (as the main benchmark does), then count from zero.
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	base := [5]int64{counter.lists.Load(), counter.watches.Load(), counter.watchLists.Load(), counter.other.Load(), counter.body.Load()}
	runtime.GC()
	debug.FreeOSMemory()

	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
	}

	// ---- sync: the clock starts just before the informer is made ----
	cpu0 := cpuSeconds()
	t0 := time.Now()
	smp := startSampler(t0)
	var iut restartUnderTest
	switch *kind {
	case rClientGoCold:
		factory := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
		var inf cache.SharedIndexInformer
		if *resource == "pods" {
			inf = factory.Core().V1().Pods().Informer()
		} else {
			inf = factory.Core().V1().ConfigMaps().Informer()
		}
		reg, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
			AddFunc:    func(any) { rec.added() },
			UpdateFunc: func(_, obj any) { rec.updated(obj.(metav1.Object)) },
			DeleteFunc: func(any) {},
		})
		if err != nil {
			return err
		}
		stopCh := make(chan struct{})
		iut = restartUnderTest{
			start: func() { factory.Start(stopCh) },
			waitSync: func(ctx context.Context) error {
				for !inf.HasSynced() {
					if ctx.Err() != nil {
						return ctx.Err()
					}
					time.Sleep(time.Millisecond)
				}
				return nil
			},
			handled: reg.HasSynced,
			stop:    func() { close(stopCh); factory.Shutdown() },
			length:  func() int { return len(inf.GetStore().ListKeys()) },
			versions: func() map[string]string {
				m := map[string]string{}
				for _, o := range inf.GetStore().List() {
					a := o.(metav1.Object)
					m[a.GetName()] = a.GetResourceVersion()
				}
				return m
			},
		}
	case rKinformerCold, rKinformerWarm, rKinformerBusy, uPlain, uState, uStateNoSync:
		dir := *stateDir
		if *kind == uPlain {
			dir = ""
		} else if dir == "" {
			return fmt.Errorf("%s needs -state-dir", *kind)
		}
		nosync := *kind == uStateNoSync
		if *resource == "pods" {
			iut = kinformerRestart(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns),
				&kinformer.Options[*corev1.Pod]{StateDir: dir, StateNoSync: nosync, Logger: logger}), rec, causes)
		} else {
			iut = kinformerRestart(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns),
				&kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateNoSync: nosync, Logger: logger}), rec, causes)
		}
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}
	iut.start()
	sctx, scancel := context.WithTimeout(ctx, 5*time.Minute)
	err = iut.waitSync(sctx)
	scancel()
	if err != nil {
		return fmt.Errorf("%s: WaitForSync: %w", *kind, err)
	}
	syncDur := time.Since(t0)
	res.SyncCPUSeconds = cpuSeconds() - cpu0
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	res.SyncSeconds = syncDur.Seconds()
	if *execNs > 0 {
		res.ExecSeconds = time.Since(time.Unix(0, *execNs)).Seconds()
	}
	res.Lists, res.Watches, res.WatchLists, res.Other = counter.lists.Load()-base[0], counter.watches.Load()-base[1], counter.watchLists.Load()-base[2], counter.other.Load()-base[3]
	res.BodyMB = float64(counter.body.Load()-base[4]) / (1 << 20)
	rl.mu.Lock()
	res.Requests = slices.Clone(rl.reqs)
	rl.mu.Unlock()
	smp.sample()
	res.PeakRSSMB = vmHWM()
	res.PeakHeapMB = smp.peakUntil(float64(syncDur.Microseconds()) / 1000)
	smp.finish()
	res.Objects = iut.length()
	for t := time.Now(); !iut.handled() && time.Since(t) < time.Minute; {
		time.Sleep(time.Millisecond)
	}
	res.HandledSeconds = time.Since(t0).Seconds()

	finish := func() error {
		// Synced means caught up: the cache must be the server's state
		// (nothing changes the collection while a restart contender runs).
		server := map[string]string{}
		if *resource == "pods" {
			l, err := cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, o := range l.Items {
				server[o.Name] = o.ResourceVersion
			}
		} else {
			l, err := cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, o := range l.Items {
				server[o.Name] = o.ResourceVersion
			}
		}
		if *updates == 0 {
			for k, rv := range iut.versions() {
				if server[k] != rv {
					res.Differ++
				}
				delete(server, k)
			}
			res.Differ += len(server)
		}
		causes.mu.Lock()
		res.Causes, res.Errors = causes.n, causes.errors
		causes.mu.Unlock()
		if *stateDir != "" && *kind != uPlain && *kind != rClientGoCold {
			res.FileMB = dirMB(*stateDir)
		}
		b, err := json.Marshal(res)
		if err != nil {
			return err
		}
		fmt.Println(string(b))
		return nil
	}

	if *updates == 0 {
		// Restart mode: stop once handled; for kinformer, Stop returns
		// once the file holds the whole cache.
		iut.stop()
		res.DurableSeconds = time.Since(t0).Seconds()
		res.DurableCPU = cpuSeconds() - cpu0
		res.HeapAfterSyncMB = gcHeapMB()
		runtime.KeepAlive(iut)
		fmt.Println("synced")
		return finish()
	}

	// ---- update path ----
	// Wait until the state file stops changing (a warm start commits what
	// it caught up with), so that the burst's CPU is the burst's own: no
	// change for 1 s (4 commit intervals), at most 60 s.
	q0 := time.Now()
	for last, quietSince := dirMtime(*stateDir), time.Now(); time.Since(quietSince) < time.Second && time.Since(q0) < 60*time.Second; {
		time.Sleep(50 * time.Millisecond)
		if w := dirMtime(*stateDir); !w.Equal(last) {
			last, quietSince = w, time.Now()
		}
	}
	res.QuietSeconds = time.Since(q0).Seconds()
	res.HeapAfterSyncMB = gcHeapMB()
	cpuBurst0, wchar0 := cpuSeconds(), procWchar()
	fmt.Println("synced")
	var writes []write
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&writes); err != nil && !errors.Is(err, io.EOF) {
		return fmt.Errorf("reading writes: %w", err)
	}
	select {
	case <-rec.done:
	case <-time.After(60 * time.Second):
		fmt.Fprintf(os.Stderr, "restart-contender %s: only %d of %d update events after 60s\n", *kind, len(rec.records), *updates)
	}
	rec.mu.Lock()
	recs := slices.Clone(rec.records)
	cpuEnd := rec.cpuEnd
	rec.mu.Unlock()
	if cpuEnd == 0 {
		cpuEnd = cpuSeconds()
	}
	ts := time.Now()
	iut.stop()
	stopped := time.Now()
	cpuStopped, wchar1 := cpuSeconds(), procWchar()
	res.StopMs = float64(stopped.Sub(ts).Microseconds()) / 1000
	res.Updates = len(recs)
	if n := len(recs); n > 0 {
		res.UpdateCPUMicros = (cpuEnd - cpuBurst0) / float64(n) * 1e6
		res.CommitCPUMicros = (cpuStopped - cpuBurst0) / float64(n) * 1e6
		first, last := recs[0].at, recs[n-1].at
		if last > first {
			res.EventsPerSec = float64(n-1) / (float64(last-first) / 1e9)
		}
		res.CommittedPerSec = float64(n) / (float64(stopped.UnixNano()-first) / 1e9)
		res.WrittenKBPerEvt = float64(wchar1-wchar0) / 1024 / float64(n)
	}
	res.HeapAfterBurstMB = gcHeapMB()
	runtime.KeepAlive(iut)
	return finish()
}

// ---- the restart subcommand (the parent) ----

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
func runRestartContender(ctx context.Context, cs kubernetes.Interface, self, kubeconfig, kind, resource, stateDir string, round, updates, nObjects, writers int, extra ...string) (restartResult, *burstStat, error) {
	burstID := fmt.Sprintf("restart-%d-%s-%d", round, kind, time.Now().UnixNano())
	args := []string{"restart-contender", "-kind", kind, "-resource", resource, "-kubeconfig", kubeconfig, "-round", fmt.Sprint(round),
		"-state-dir", stateDir, "-burst-id", burstID, "-updates", fmt.Sprint(updates)}
	args = append(args, extra...)
	args = append(args, "-exec-ns", fmt.Sprint(time.Now().UnixNano()))
	cmd := exec.CommandContext(ctx, self, args...)
	return driveContender[restartResult](ctx, cs, cmd, kind, burstID, updates, nObjects, writers)
}

func restartMain(args []string) error {
	fs := flag.NewFlagSet("restart", flag.ExitOnError)
	rounds := fs.Int("rounds", 3, "rounds; each runs every contender once, the order alternating")
	nCM := fs.Int("configmaps", 20000, "ConfigMaps in the workload (about 1 KiB each)")
	nPods := fs.Int("pods", 5000, "Pods in the workload (0: skip them)")
	updates := fs.Int("updates", -1, "ConfigMap updates in each update-path burst (-1: as many as -configmaps; 0: no update-path figures)")
	writers := fs.Int("writers", 32, "concurrent writers of the update burst")
	churn := fs.Float64("churn", 0.02, "fraction of the objects changed between the cold and the warm start: half modified, a quarter deleted, a quarter created")
	out := fs.String("out", "docs/benchmarks.md", "report whose restart section to update, relative to the repository root ('' for none)")
	dataDir := fs.String("data-dir", "", "localapi data dir (default: a new temporary one); reuse one to skip creating the workload")
	localapi := fs.String("localapi", "", "localapi binary (default: where `make localapi` puts it; built if missing)")
	keep := fs.Bool("keep", false, "keep the temporary data dir and state files")
	verbose := fs.Bool("v", false, "show localapi's logs")
	rev := fs.String("rev", "", "the kinformer revision measured (default: git describe --always --dirty of the repository)")
	profile := fs.String("profile", "", "if set, write CPU profiles (New to synced) of the first round's contenders here, as RESOURCE-KIND.cpu.pprof")
	logInfo := fs.Bool("log", false, "contenders write kinformer's informational logs to stderr")
	save := fs.String("save", filepath.Join(os.TempDir(), "kinformer-bench-restart.json"), "write the results here ('' for nowhere)")
	replay := fs.String("replay", "", "run nothing: make the report from results saved by -save")
	fs.Parse(args)
	if *updates < 0 {
		*updates = *nCM
	}

	root, err := repoRoot()
	if err != nil {
		return err
	}
	if *replay != "" {
		b, err := os.ReadFile(*replay)
		if err != nil {
			return err
		}
		var rr restartRun
		if err := json.Unmarshal(b, &rr); err != nil {
			return fmt.Errorf("%s: %w", *replay, err)
		}
		return writeRestartReport(root, *out, rr)
	}
	if *rev == "" {
		o, _ := exec.Command("git", "-C", root, "describe", "--always", "--dirty").Output()
		*rev = strings.TrimSpace(string(o))
	}
	bin, err := localapiPath(*localapi, root)
	if err != nil {
		return err
	}
	if *dataDir == "" {
		if *dataDir, err = os.MkdirTemp("", "kinformer-bench-restart-"); err != nil {
			return err
		}
		if !*keep {
			defer os.RemoveAll(*dataDir)
		}
	} else if err := os.MkdirAll(*dataDir, 0o755); err != nil {
		return err
	}
	stateRoot, err := os.MkdirTemp("", "kinformer-bench-state-")
	if err != nil {
		return err
	}
	if !*keep {
		defer os.RemoveAll(stateRoot)
	}
	m := describeMachine()
	srv, cs, err := serveWorkload(bin, *dataDir, *verbose, *nCM, *nPods)
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	self, err := os.Executable()
	if err != nil {
		return err
	}

	// The objects there now (a warm-up LIST, not recorded): the update
	// burst and the modifications touch the first 90% of the workload's
	// names, deletions start with the last 10%.
	type job struct {
		resource string
		n        int
		ch       *churner
	}
	run := strconv.FormatInt(time.Now().Unix()%1_000_000, 36)
	var jobs []job
	for _, j := range []struct {
		resource string
		n        int
		name     func(int) string
	}{{"configmaps", *nCM, cmName}, {"pods", *nPods, podName}} {
		if j.n == 0 {
			continue
		}
		var names []string
		if j.resource == "configmaps" {
			l, err := cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
			}
			for _, o := range l.Items {
				names = append(names, o.Name)
			}
		} else {
			l, err := cs.CoreV1().Pods(podNamespace).List(ctx, metav1.ListOptions{})
			if err != nil {
				return err
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
		jobs = append(jobs, job{j.resource, len(names), ch})
	}

	var results []restartResult
	logRes := func(r restartResult) {
		logf("%-22s %-10s round %d: objects %d (differing %d) synced %.3fs (exec %.3fs, handled %.3fs, durable %.3fs) cpu %.3fs (durable %.3fs) read %.2fMB requests %v peak heap %.1fMB after %.1fMB rss %.1fMB file %.1fMB causes %v errors %v",
			r.Contender, r.Resource, r.Round, r.Objects, r.Differ, r.SyncSeconds, r.ExecSeconds, r.HandledSeconds, r.DurableSeconds, r.SyncCPUSeconds, r.DurableCPU, r.BodyMB, r.Requests,
			r.PeakHeapMB, r.HeapAfterSyncMB, r.PeakRSSMB, r.FileMB, r.Causes, r.Errors)
	}
	var churnSecs []float64
	for _, j := range jobs {
		modify := int(float64(j.n) * *churn / 2)
		del := int(float64(j.n) * *churn / 4)
		for r := 1; r <= *rounds; r++ {
			dir := filepath.Join(stateRoot, fmt.Sprintf("%s-%d", j.resource, r))
			order := []string{rClientGoCold, rKinformerCold, rKinformerWarm, rKinformerBusy}
			if r%2 == 0 {
				order = []string{rKinformerCold, rKinformerWarm, rKinformerBusy, rClientGoCold}
			}
			for _, kind := range order {
				if kind == rKinformerWarm || kind == rKinformerBusy {
					d, err := j.ch.churn(ctx, cs, modify, del)
					if err != nil {
						return fmt.Errorf("churn: %w", err)
					}
					churnSecs = append(churnSecs, d.Seconds())
					logf("changed %s: %d modified, %d deleted, %d created in %.1fs", j.resource, modify, del, del, d.Seconds())
				}
				if kind == rKinformerBusy {
					// What a live cluster does all the time (leases, events):
					// a write elsewhere, after the collection's last change.
					if err := touchElsewhere(ctx, cs); err != nil {
						return err
					}
				}
				time.Sleep(time.Second) // let the server settle
				var extra []string
				if *logInfo {
					extra = append(extra, "-log")
				}
				if *profile != "" && r == 1 {
					if err := os.MkdirAll(*profile, 0o755); err != nil {
						return err
					}
					extra = append(extra, "-cpuprofile", filepath.Join(*profile, j.resource+"-"+strings.NewReplacer(" ", "-", ",", "").Replace(kind)+".cpu.pprof"))
				}
				res, _, err := runRestartContender(ctx, cs, self, srv.Kubeconfig, kind, j.resource, dir, r, 0, 0, 0, extra...)
				if err != nil {
					return fmt.Errorf("%s %s round %d: %w", kind, j.resource, r, err)
				}
				logRes(res)
				if res.Differ > 0 {
					logf("WARNING: %s %s round %d: %d objects differ from the server's once synced", kind, j.resource, r, res.Differ)
				}
				if res.Objects != j.n {
					return fmt.Errorf("%s %s round %d: %d objects in the cache at sync, the server has %d", kind, j.resource, r, res.Objects, j.n)
				}
				results = append(results, res)
			}
		}
	}

	var ups []restartResult
	var bursts []burstStat
	if *updates > 0 && *nCM > 0 {
		dir := filepath.Join(stateRoot, "updates")
		// Fill the state file once (not recorded), so that each state
		// contender starts warm and its sync commits little.
		res, _, err := runRestartContender(ctx, cs, self, srv.Kubeconfig, uState, "configmaps", dir, 0, 0, 0, 0)
		if err != nil {
			return fmt.Errorf("filling the state file: %w", err)
		}
		logRes(res)
		burstObjects := *nCM * 9 / 10
		for r := 1; r <= *rounds; r++ {
			for _, kind := range rotate([]string{uPlain, uState, uStateNoSync}, r-1) {
				time.Sleep(time.Second)
				res, b, err := runRestartContender(ctx, cs, self, srv.Kubeconfig, kind, "configmaps", dir, r, *updates, burstObjects, *writers)
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

	rr := restartRun{Machine: m, LoadEnd: loadavg(), Rev: *rev, Args: args, Rounds: *rounds, Churn: *churn, Updates: *updates, Writers: *writers,
		Results: results, Ups: ups, Bursts: bursts, ChurnSec: median(churnSecs)}
	for _, j := range jobs {
		if j.resource == "configmaps" {
			rr.NCM = j.n
		} else {
			rr.NPods = j.n
		}
	}
	if *save != "" {
		b, err := json.MarshalIndent(rr, "", " ")
		if err != nil {
			return err
		}
		if err := os.WriteFile(*save, b, 0o644); err != nil {
			return err
		}
		logf("results in %s (re-render with -replay)", *save)
	}
	return writeRestartReport(root, *out, rr)
}

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

// writeRestartReport prints the restart section and puts it between its
// markers in root/out (appended if they are missing).
func writeRestartReport(root, out string, rr restartRun) error {
	text := restartReport(rr)
	fmt.Println(text)
	if out == "" {
		return nil
	}
	path := filepath.Join(root, out)
	old, err := os.ReadFile(path)
	if err != nil {
		old = []byte("# Benchmarks: kinformer vs client-go\n")
	}
	var doc string
	if i, j := bytes.Index(old, []byte(restartBegin)), bytes.Index(old, []byte(restartEnd)); i >= 0 && j > i {
		doc = string(old[:i]) + text + strings.TrimPrefix(string(old[j+len(restartEnd):]), "\n")
	} else {
		doc = string(old) + text
	}
	if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
		return err
	}
	logf("updated %s", path)
	return nil
}

// restartReport is the restart section of docs/benchmarks.md, markers included.
func restartReport(rr restartRun) string {
	m, rev, args, rounds, nCM, nPods, churn, updates, writers, rs, ups, bursts, churnSec := rr.Machine, rr.Rev, rr.Args, rr.Rounds, rr.NCM, rr.NPods, rr.Churn, rr.Updates, rr.Writers, rr.Results, rr.Ups, rr.Bursts, rr.ChurnSec
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	cmd := "cd tools/bench && go run . restart"
	for _, a := range args {
		if a == "" || strings.ContainsAny(a, " '\"$") {
			a = "'" + a + "'"
		}
		cmd += " " + a
	}
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
