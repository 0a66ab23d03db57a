package main

// The scale benchmark's contender (a child process): one manager, two
// controllers (Secrets, Services) whose reconcilers do a cached Get, timed
// from the parent's exec to the caches synced and to every object of the
// workload reconciled once.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"
)

// scaleResult is what a scale-contender process reports, as one JSON
// line. Times are from the parent's exec of the process; CPU is the
// process's user+sys (getrusage) since its start.
type scaleResult struct {
	Contender string `json:"contender"`
	Round     int    `json:"round"`

	MainSeconds float64 `json:"mainSeconds"` // exec -> main
	SyncSeconds float64 `json:"syncSeconds"` // exec -> both informers HasSynced (polled every 1 ms) and WaitForCacheSync true
	// StartedSeconds is exec -> both controllers' first reconcile: a
	// controller starts its workers once its sources are synced and (since
	// controller-runtime v0.23) their handlers were given every initial
	// object, the wait its CacheSyncTimeout (2 minutes) bounds: synced and
	// handled.
	StartedSeconds    float64 `json:"startedSeconds"`
	ReconciledSeconds float64 `json:"reconciledSeconds"` // exec -> every object of the workload reconciled once

	SyncCPUSeconds       float64 `json:"syncCPUSeconds"`
	StartedCPUSeconds    float64 `json:"startedCPUSeconds"` // at the later controller's first reconcile
	ReconciledCPUSeconds float64 `json:"reconciledCPUSeconds"`
	PeakHeapStartedMB    float64 `json:"peakHeapStartedMB"` // highest heap sample (every 2 ms) up to started
	PeakHeapMB           float64 `json:"peakHeapMB"`        // highest heap sample up to reconciled
	HeapAfterMB          float64 `json:"heapAfterMB"`       // once reconciled, runtime.GC() twice
	PeakRSSMB            float64 `json:"peakRSSMB"`         // VmHWM once reconciled
	ServerCPUSeconds     float64 `json:"serverCPUSeconds"`  // the API server's user+sys over the whole run (set by the parent)

	SecretReconciles  int64 `json:"secretReconciles"` // up to handled, every namespace
	ServiceReconciles int64 `json:"serviceReconciles"`
	Errors            int64 `json:"errors"` // failed cached Gets

	CachedSecrets  int `json:"cachedSecrets"` // in the workload's namespaces, at the end
	CachedServices int `json:"cachedServices"`
}

// firstSeen counts the objects named prefix + a number in [0, want)
// reconciled at least once (a bit each) and closes done when all were.
type firstSeen struct {
	prefix string
	bits   []atomic.Uint64
	n      atomic.Int64
	want   int64
	done   chan struct{}
}

func newFirstSeen(prefix string, want int) *firstSeen {
	f := &firstSeen{prefix: prefix, bits: make([]atomic.Uint64, (want+63)/64), want: int64(want), done: make(chan struct{})}
	if want == 0 {
		close(f.done)
	}
	return f
}

// see records a reconcile of name; false if it is not of the workload.
func (f *firstSeen) see(name string) bool {
	s, ok := strings.CutPrefix(name, f.prefix)
	if !ok {
		return false
	}
	i, err := strconv.Atoi(s)
	if err != nil || i < 0 || int64(i) >= f.want {
		return false
	}
	m := uint64(1) << (i % 64)
	if f.bits[i/64].Or(m)&m == 0 && f.n.Add(1) == f.want {
		close(f.done)
	}
	return true
}

// started is when a controller first reconciled: its workers started.
type started struct {
	once sync.Once
	at   time.Time
	cpu  float64
	done chan struct{}
}

func newStarted() *started { return &started{done: make(chan struct{})} }

func (s *started) mark() {
	s.once.Do(func() {
		s.at, s.cpu = time.Now(), cpuSeconds()
		close(s.done)
	})
}

// firstReconciles is a reconciler of one kind: a cached Get (a failure
// counts as an error), every reconcile counted in n, the first reconcile
// marked in st, and the first of each object of the workload's namespace
// told to seen (an object it does not know counts as an error).
func firstReconciles[T client.Object](cl client.Client, newObj func() T, namespace string, st *started, seen *firstSeen, n, errN *atomic.Int64) reconcile.Func {
	return func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
		st.mark()
		obj := newObj()
		if err := cl.Get(ctx, req.NamespacedName, obj); err != nil {
			errN.Add(1)
			return reconcile.Result{}, client.IgnoreNotFound(err)
		}
		n.Add(1)
		if obj.GetNamespace() == namespace && !seen.see(obj.GetName()) {
			errN.Add(1)
		}
		return reconcile.Result{}, nil
	}
}

func scaleContenderMain(args []string) error {
	t0 := time.Now()
	smp := startSampler(t0)
	fs := flag.NewFlagSet("scale-contender", flag.ExitOnError)
	kind := fs.String("kind", kCR, "cr | cr+kcr | cr+kcr-drop (any controller-runtime contender of the cr benchmark)")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	execNs := fs.Int64("exec-ns", 0, "when the parent started this process (UnixNano; 0: main's start)")
	nSecrets := fs.Int("secrets", 0, "Secrets of the workload (in "+secretNamespace+")")
	nServices := fs.Int("services", 0, "Services of the workload (in "+serviceNamespace+")")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile, process start to handled, to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile once handled to this file (inuse_space: what is live then; alloc_space: since the start)")
	fs.Parse(args)
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	stopCPU, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	start := t0
	if *execNs != 0 {
		start = time.Unix(0, *execNs)
	}
	since := func() float64 { return time.Since(start).Seconds() }
	res := scaleResult{Contender: *kind, Round: *round, MainSeconds: t0.Sub(start).Seconds()}
	ctrl.SetLogger(klog.NewKlogr())

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := crManager(*kind, cfg, func(o *ctrl.Options) {
		// Measure past controller-runtime's 2-minute deadline rather
		// than fail at it: the report says who met it.
		o.Controller.CacheSyncTimeout = scaleTimeout
	})
	if err != nil {
		return err
	}
	secrets, services := newFirstSeen("secret-", *nSecrets), newFirstSeen("svc-", *nServices)
	secretsStarted, servicesStarted := newStarted(), newStarted()
	var secretN, serviceN, errN atomic.Int64
	cl := mgr.GetClient()

	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Secret{}).Named("bench-secrets").Complete(
		firstReconciles(cl, func() *corev1.Secret { return &corev1.Secret{} }, secretNamespace, secretsStarted, secrets, &secretN, &errN)); err != nil {
		return err
	}
	if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Service{}).Named("bench-services").Complete(
		firstReconciles(cl, func() *corev1.Service { return &corev1.Service{} }, serviceNamespace, servicesStarted, services, &serviceN, &errN)); err != nil {
		return err
	}
	var infs []cache.Informer
	for _, obj := range []client.Object{&corev1.Secret{}, &corev1.Service{}} {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		infs = append(infs, inf)
	}

	// ---- start, sync, reconcile ----
	mgrErr := make(chan error, 1)
	go func() { mgrErr <- mgr.Start(ctx) }()
	deadline := time.After(scaleTimeout - time.Since(start))
	for slices.ContainsFunc(infs, func(i cache.Informer) bool { return !i.HasSynced() }) {
		select {
		case err := <-mgrErr:
			return fmt.Errorf("manager: %w", err)
		case <-deadline:
			return fmt.Errorf("%s: caches not synced after %v", *kind, scaleTimeout)
		case <-time.After(time.Millisecond):
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("WaitForCacheSync returned false")
	}
	res.SyncSeconds, res.SyncCPUSeconds = since(), cpuSeconds()
	for _, f := range []*firstSeen{secrets, services} {
		select {
		case <-f.done:
		case err := <-mgrErr:
			return fmt.Errorf("manager: %w", err)
		case <-deadline:
			return fmt.Errorf("%s: %d of %d Secrets and %d of %d Services reconciled after %v", *kind,
				secrets.n.Load(), *nSecrets, services.n.Load(), *nServices, scaleTimeout)
		}
	}
	res.ReconciledSeconds, res.ReconciledCPUSeconds = since(), cpuSeconds()
	stopCPU()
	<-secretsStarted.done // both closed: every object was reconciled
	<-servicesStarted.done
	last := secretsStarted
	if servicesStarted.at.After(last.at) {
		last = servicesStarted
	}
	res.StartedSeconds, res.StartedCPUSeconds = last.at.Sub(start).Seconds(), last.cpu
	if *memProfile != "" {
		runtime.GC() // inuse_space is as of the last GC
		if err := writeHeapProfile(*memProfile); err != nil {
			return err
		}
	}
	res.PeakRSSMB = vmHWM()
	res.SecretReconciles, res.ServiceReconciles = secretN.Load(), serviceN.Load()
	smp.sample()
	res.PeakHeapMB = smp.peakUntil(float64(time.Since(t0).Microseconds()) / 1000)
	res.PeakHeapStartedMB = smp.peakUntil(float64(last.at.Sub(t0).Microseconds()) / 1000)
	smp.finish()
	res.HeapAfterMB = gcHeapMB()
	if _, err := childSynced(); err != nil {
		return err
	}
	res.Errors = errN.Load()

	// What the cache holds, for the parent to check (no copies).
	var sl corev1.SecretList
	if err := cl.List(ctx, &sl, client.InNamespace(secretNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var svl corev1.ServiceList
	if err := cl.List(ctx, &svl, client.InNamespace(serviceNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	res.CachedSecrets, res.CachedServices = len(sl.Items), len(svl.Items)
	return childResult(res)
}
