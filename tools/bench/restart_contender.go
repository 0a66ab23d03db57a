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
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

// restartUnderTest is one informer of either library.
type restartUnderTest struct {
	start    func()
	waitSync func(context.Context) error
	handled  func() bool // the handler has had every event up to sync
	stop     func()
	length   func() int
	versions func() map[string]string // name -> resourceVersion in the cache
	rv       func() string            // the informer's resourceVersion ("" for client-go)
}

func kinformerRestart[T kinformer.Object](inf *kinformer.Informer[T], rec *recorder, causes *causeCounter) restartUnderTest {
	reg := inf.AddHandler(func(e kinformer.Event[T]) {
		causes.add(e)
		switch e.Type {
		case kinformer.Added:
			work()
			rec.added()
		case kinformer.Modified:
			work()
			rec.updated(e.Object)
		}
	})
	return restartUnderTest{start: inf.Start, waitSync: inf.WaitForSync, stop: inf.Stop, length: inf.Cache().Len,
		handled: func() bool { return reg.HasSynced() && reg.Pending() == 0 },
		rv:      inf.ResourceVersion,
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

	firstRestore atomic.Int64 // UnixNano of the first Added with CauseRestore handled
}

func (c *causeCounter) add(e any) {
	var key, errText string
	switch e := e.(type) {
	case kinformer.Event[*corev1.ConfigMap]:
		key, errText = string(e.Type)+" "+e.Cause.String(), errString(e.Err)
	case kinformer.Event[*corev1.Pod]:
		key, errText = string(e.Type)+" "+e.Cause.String(), errString(e.Err)
	}
	if key == string(kinformer.Added)+" "+kinformer.CauseRestore.String() && c.firstRestore.Load() == 0 {
		c.firstRestore.CompareAndSwap(0, time.Now().UnixNano())
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

// relistLog is the contenders' kinformer Logger: it keeps the reason of
// each re-list the informer logs (a 410 on the catch-up watch of a warm
// start is one), and passes records on to next (-log), if any, else, as
// without a Logger, only errors to slog.Default().
type relistLog struct {
	next    slog.Handler
	mu      *sync.Mutex
	reasons *[]string
}

func newRelistLog(next slog.Handler) relistLog {
	if next == nil {
		next = errorsOnly{slog.Default().Handler()}
	}
	return relistLog{next: next, mu: &sync.Mutex{}, reasons: &[]string{}}
}

type errorsOnly struct{ slog.Handler }

func (h errorsOnly) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelError && h.Handler.Enabled(ctx, l)
}
func (h errorsOnly) WithAttrs(as []slog.Attr) slog.Handler {
	return errorsOnly{h.Handler.WithAttrs(as)}
}
func (h errorsOnly) WithGroup(name string) slog.Handler { return errorsOnly{h.Handler.WithGroup(name)} }

func (h relistLog) Enabled(ctx context.Context, l slog.Level) bool {
	return l >= slog.LevelInfo || h.next.Enabled(ctx, l)
}

func (h relistLog) Handle(ctx context.Context, r slog.Record) error {
	if r.Message == "kinformer: re-listing" {
		reason := "?"
		r.Attrs(func(a slog.Attr) bool {
			if a.Key == "reason" {
				reason = a.Value.String()
				return false
			}
			return true
		})
		h.mu.Lock()
		*h.reasons = append(*h.reasons, reason)
		h.mu.Unlock()
	}
	if h.next.Enabled(ctx, r.Level) {
		return h.next.Handle(ctx, r)
	}
	return nil
}

func (h relistLog) WithAttrs(as []slog.Attr) slog.Handler {
	h.next = h.next.WithAttrs(as)
	return h
}

func (h relistLog) WithGroup(name string) slog.Handler {
	h.next = h.next.WithGroup(name)
	return h
}

func (h relistLog) list() []string {
	h.mu.Lock()
	defer h.mu.Unlock()
	return slices.Clone(*h.reasons)
}

func errString(err error) string {
	if err == nil {
		return ""
	}
	return err.Error()
}

func restartContenderMain(args []string) error {
	fs := flag.NewFlagSet("restart-contender", flag.ExitOnError)
	kind := fs.String("kind", rKinformerCold, "client-go cold | kinformer cold | kinformer warm | kinformer cold compact | kinformer warm compact | kinformer | kinformer+state | kinformer+state-nosync")
	resource := fs.String("resource", "configmaps", "configmaps | pods")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	stateDir := fs.String("state-dir", "", "Options.StateDir (kinformer contenders but plain kinformer)")
	execNs := fs.Int64("exec-ns", 0, "when the parent started this process (UnixNano)")
	burstID := fs.String("burst-id", "", "value of the bench/round annotation of the update burst")
	updates := fs.Int("updates", 0, "update events to expect after sync (writes come from the parent); 0: restart mode (stop at sync)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile from just before New to synced to this file")
	logInfo := fs.Bool("log", false, "kinformer's informational logs to stderr")
	fs.DurationVar(&handlerCost, "handler-cost", 0, "the handler spends this long on every Added and Modified (busy)")
	fs.Parse(args)
	// Always a logger: the re-lists it records say whether a warm start
	// caught up by watch or had to list (410 Gone).
	var next slog.Handler
	if *logInfo {
		next = slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo})
	}
	relists := newRelistLog(next)
	logger := slog.New(relists).With("contender", *kind, "resource", *resource)

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
			AddFunc:    func(any) { work(); rec.added() },
			UpdateFunc: func(_, obj any) { work(); rec.updated(obj.(metav1.Object)) },
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
			rv:      func() string { return "" },
			versions: func() map[string]string {
				m := map[string]string{}
				for _, o := range inf.GetStore().List() {
					a := o.(metav1.Object)
					m[a.GetName()] = a.GetResourceVersion()
				}
				return m
			},
		}
	case rKinformerCold, rKinformerWarm, rKinformerBusy, rCompactCold, rCompactWarm, uPlain, uState, uStateNoSync:
		dir := *stateDir
		if *kind == uPlain {
			dir = ""
		} else if dir == "" {
			return fmt.Errorf("%s needs -state-dir", *kind)
		}
		nosync := *kind == uStateNoSync
		compact := *kind == rCompactCold || *kind == rCompactWarm
		if *resource == "pods" {
			inf := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns),
				&kinformer.Options[*corev1.Pod]{StateDir: dir, StateNoSync: nosync, Compact: compact, Logger: logger})
			if compact {
				compactOn(inf)
			}
			iut = kinformerRestart(inf, rec, causes)
		} else {
			inf := kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns),
				&kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateNoSync: nosync, Compact: compact, Logger: logger})
			if compact {
				compactOn(inf)
			}
			iut = kinformerRestart(inf, rec, causes)
		}
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}
	// The first read: poll until the cache holds an object (cheap while
	// empty; client-go's ListKeys copies the keys only once there are some).
	var firstRead atomic.Int64
	pollDone := make(chan struct{})
	go func() {
		defer close(pollDone)
		for firstRead.Load() == 0 && ctx.Err() == nil {
			if iut.length() > 0 {
				firstRead.Store(time.Now().UnixNano())
				return
			}
			time.Sleep(time.Millisecond)
		}
	}()
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
	res.Relists = relists.list()
	for t := time.Now(); !iut.handled() && time.Since(t) < time.Minute; {
		time.Sleep(time.Millisecond)
	}
	res.HandledSeconds = time.Since(t0).Seconds()
	if res.Objects > 0 {
		<-pollDone
	}
	if n := firstRead.Load(); n > 0 {
		res.FirstReadSeconds = time.Unix(0, n).Sub(t0).Seconds()
	}
	if n := causes.firstRestore.Load(); n > 0 {
		res.FirstRestoreSeconds = time.Unix(0, n).Sub(t0).Seconds()
	}

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
		return childResult(res)
	}

	if *updates == 0 {
		// Restart mode: stop once handled; for kinformer, Stop returns
		// once the file holds the whole cache.
		iut.stop()
		res.DurableSeconds = time.Since(t0).Seconds()
		res.DurableCPU = cpuSeconds() - cpu0
		res.ResourceVersion = iut.rv()
		res.HeapAfterSyncMB = gcHeapMB()
		runtime.KeepAlive(iut)
		if _, err := childSynced(); err != nil {
			return err
		}
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
	if _, err := childSynced(); err != nil {
		return err
	}
	recs, cpuEnd := rec.wait("restart-contender "+*kind, "update events", 60*time.Second)
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
