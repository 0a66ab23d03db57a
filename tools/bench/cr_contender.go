package main

// The controller-runtime benchmark's contender (a child process): one
// manager with two reconcilers over the main workload, each contender
// differing only in the manager's cache.

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"
	"slices"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/util/workqueue"
	"k8s.io/klog/v2"
	ctrl "sigs.k8s.io/controller-runtime"
	"sigs.k8s.io/controller-runtime/pkg/cache"
	"sigs.k8s.io/controller-runtime/pkg/client"
	"sigs.k8s.io/controller-runtime/pkg/event"
	"sigs.k8s.io/controller-runtime/pkg/handler"
	metricsserver "sigs.k8s.io/controller-runtime/pkg/metrics/server"
	"sigs.k8s.io/controller-runtime/pkg/reconcile"

	"github.com/kinformer/kinformer/clientgo"
	kcr "github.com/kinformer/kinformer/controllerruntime"
)

// The controller-runtime contenders: the same manager and reconcilers,
// another cache.
const (
	kCR            = "cr"             // controller-runtime's own cache, ctrl.Options{} defaults
	kCRNewInformer = "cr+newinformer" // its own cache, with Options.Cache.NewInformer = clientgo.NewSharedIndexInformer
	kCRStrip       = "cr+strip"       // its own cache, with DefaultTransform: cache.TransformStripManagedFields()
	kCRKCR         = "cr+kcr"         // kinformer's controller-runtime cache (controllerruntime/, kcr.NewCache): compressed bytes
	kCRKCRDrop     = "cr+kcr-drop"    // kcr.With(kcr.Options{DropManagedFields: true})
	kCRKCRDecoded  = "cr+kcr-decoded" // kcr.With(kcr.Options{Decoded: true}): decoded objects, as before compressed bytes were kcr's default
	// kCRKCRFields is kcr.NewCache with each kind projected to what its
	// reconciler reads (kcr.Options.ByObject).
	kCRKCRFields = "cr+kcr-fields"

	// podConfigMapIndex indexes Pods by the ConfigMaps their volumes mount
	// (20 Pods each in the workload: spec.nodeName would be one value for
	// all, the Pods being unscheduled).
	podConfigMapIndex = "spec.volumes.configMap.name"
)

// crNewCache is each controller-runtime contender's
// manager.Options.NewCache (nil: controller-runtime's own cache.New). A
// contender without an entry cannot run.
var crNewCache = map[string]cache.NewCacheFunc{
	kCR:            nil,
	kCRNewInformer: nil, // cache.New, with Options.Cache.NewInformer set (see crManager)
	kCRStrip:       nil, // cache.New, with Options.Cache.DefaultTransform set (see crManager)
	kCRKCR:         kcr.NewCache,
	kCRKCRDrop:     kcr.With(kcr.Options{DropManagedFields: true}),
	kCRKCRDecoded:  kcr.With(kcr.Options{Decoded: true}),
	kCRKCRFields: kcr.With(kcr.Options{ByObject: map[client.Object]kcr.ByObject{
		&corev1.ConfigMap{}: {Fields: []string{"metadata.annotations"}},   // the burst's round annotation
		&corev1.Pod{}:       {Fields: []string{"spec.volumes.configMap"}}, // the field index and the List by it
	}}),
}

// crResult is what a cr-contender process reports, as one JSON line. Times
// are from the parent's exec of the process; CPU is the process's whole
// user+sys (getrusage) since its start.
type crResult struct {
	Contender string `json:"contender"`
	Round     int    `json:"round"`

	MainSeconds       float64 `json:"mainSeconds"`       // exec -> main (the binary's init)
	SyncSeconds       float64 `json:"syncSeconds"`       // exec -> both informers HasSynced (polled every 1 ms) and WaitForCacheSync true
	ReconciledSeconds float64 `json:"reconciledSeconds"` // exec -> each reconciler has reconciled every object of the workload once
	// MappedSeconds (-handler-cost): exec -> the ConfigMaps' mapper (the
	// informer's event handler) has been called for every initial object.
	MappedSeconds    float64 `json:"mappedSeconds"`
	MappedCPUSeconds float64 `json:"mappedCPUSeconds"`

	SyncCPUSeconds       float64 `json:"syncCPUSeconds"`
	ReconciledCPUSeconds float64 `json:"reconciledCPUSeconds"`
	PeakHeapMB           float64 `json:"peakHeapMB"`           // highest heap sample (every 2 ms) up to synced
	PeakHeapReconciledMB float64 `json:"peakHeapReconciledMB"` // ... up to reconciled
	HeapAfterSyncMB      float64 `json:"heapAfterSyncMB"`      // once reconciled, runtime.GC() twice
	PeakRSSMB            float64 `json:"peakRSSMB"`            // VmHWM once reconciled

	CMReconciles  int64 `json:"cmReconciles"`  // up to reconciled, every namespace
	PodReconciles int64 `json:"podReconciles"` //
	Errors        int64 `json:"errors"`        // failed Get or List, or a Pod missing from its own index's List

	Updates          int     `json:"updates"`         // reconciles of an update of the burst
	UpdatesExpected  int     `json:"updatesExpected"` // writes made
	UpdateCPUMicros  float64 `json:"updateCPUMicros"` // CPU from synced to the last update reconciled, per update
	LatencyP50Ms     float64 `json:"latencyP50Ms"`    // reconcile time - write response time
	LatencyP99Ms     float64 `json:"latencyP99Ms"`
	HeapAfterBurstMB float64 `json:"heapAfterBurstMB"`

	CachedConfigMaps int `json:"cachedConfigMaps"` // in the workload's namespaces, at the end
	CachedPods       int `json:"cachedPods"`
}

// countTo closes done when inc has been called want times.
type countTo struct {
	n    atomic.Int64
	want int64
	done chan struct{}
}

func newCountTo(want int) *countTo {
	c := &countTo{want: int64(want), done: make(chan struct{})}
	if want == 0 {
		close(c.done)
	}
	return c
}

func (c *countTo) inc() {
	if c.n.Add(1) == c.want {
		close(c.done)
	}
}

// crManager makes the contender's manager: metrics and health probes off,
// no leader election; the cache crNewCache names; then the changes of
// more, in order.
func crManager(kind string, cfg *rest.Config, more ...func(*ctrl.Options)) (ctrl.Manager, error) {
	newCache, ok := crNewCache[kind]
	if !ok {
		return nil, fmt.Errorf("unknown controller-runtime contender %q", kind)
	}
	opts := ctrl.Options{
		Metrics:                metricsserver.Options{BindAddress: "0"},
		HealthProbeBindAddress: "0",
		LeaderElection:         false,
		NewCache:               newCache,
	}
	switch kind {
	case kCRNewInformer:
		opts.Cache.NewInformer = clientgo.NewSharedIndexInformer
	case kCRStrip:
		opts.Cache.DefaultTransform = cache.TransformStripManagedFields()
	}
	for _, f := range more {
		f(&opts)
	}
	return ctrl.NewManager(cfg, opts)
}

func crContenderMain(args []string) error {
	t0 := time.Now()
	smp := startSampler(t0)
	fs := flag.NewFlagSet("cr-contender", flag.ExitOnError)
	kind := fs.String("kind", kCR, "cr | cr+newinformer | cr+strip | cr+kcr | cr+kcr-drop | cr+kcr-decoded | cr+kcr-fields")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	execNs := fs.Int64("exec-ns", 0, "when the parent started this process (UnixNano; 0: main's start)")
	burstID := fs.String("burst-id", "", "value of the bench/round annotation of this contender's update burst")
	nCM := fs.Int("configmaps", 0, "ConfigMaps of the workload (in bench-cm)")
	nPods := fs.Int("pods", 0, "Pods of the workload (in bench-pods)")
	updates := fs.Int("updates", 0, "update reconciles to expect after sync (writes come from the parent; at most one per ConfigMap)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile, process start to reconciled, to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile once reconciled to this file (alloc_space: the start; inuse_space: the heap after sync)")
	fs.DurationVar(&handlerCost, "handler-cost", 0, "ConfigMaps go through a mapper (handler.EnqueueRequestsFromMapFunc, called by the informer's event handler) that spends this long on each Create and Update (busy); 0: For, no mapper")
	fs.Parse(args)
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
	}
	start := t0
	if *execNs != 0 {
		start = time.Unix(0, *execNs)
	}
	since := func() float64 { return time.Since(start).Seconds() }
	res := crResult{Contender: *kind, Round: *round, MainSeconds: t0.Sub(start).Seconds(), UpdatesExpected: *updates}
	ctrl.SetLogger(klog.NewKlogr())

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	mgr, err := crManager(*kind, cfg)
	if err != nil {
		return err
	}
	rec := newRecorder(*burstID, 0, *updates)
	cms, pods := newCountTo(*nCM), newCountTo(*nPods)
	var cmN, podN, errN atomic.Int64
	cl := mgr.GetClient()

	if err := mgr.GetFieldIndexer().IndexField(ctx, &corev1.Pod{}, podConfigMapIndex, func(o client.Object) []string {
		var out []string
		for _, v := range o.(*corev1.Pod).Spec.Volumes {
			if v.ConfigMap != nil {
				out = append(out, v.ConfigMap.Name)
			}
		}
		return out
	}); err != nil {
		return err
	}
	// ConfigMaps: a cached Get; counts the first reconcile of each, and
	// records those of an update of the burst. With -handler-cost, a
	// mapper in front of it (a mapper that reads the cache, issue 45).
	mapped := newCountTo(0)
	b := ctrl.NewControllerManagedBy(mgr).Named("bench-configmaps")
	if handlerCost > 0 {
		mapped = newCountTo(*nCM)
		b = b.Watches(&corev1.ConfigMap{}, handler.Funcs{
			CreateFunc: func(_ context.Context, e event.CreateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				work()
				if e.Object.GetNamespace() == cmNamespace {
					mapped.inc()
				}
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
			},
			UpdateFunc: func(_ context.Context, e event.UpdateEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				work()
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.ObjectNew)})
			},
			DeleteFunc: func(_ context.Context, e event.DeleteEvent, q workqueue.TypedRateLimitingInterface[reconcile.Request]) {
				q.Add(reconcile.Request{NamespacedName: client.ObjectKeyFromObject(e.Object)})
			},
		})
	} else {
		b = b.For(&corev1.ConfigMap{})
	}
	if err := b.Complete(
		reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var cm corev1.ConfigMap
			if err := cl.Get(ctx, req.NamespacedName, &cm); err != nil {
				errN.Add(1)
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			cmN.Add(1)
			if cm.Namespace != cmNamespace {
				return reconcile.Result{}, nil
			}
			if *burstID != "" && cm.Annotations[annRound] == *burstID {
				rec.updated(&cm)
			} else {
				cms.inc()
			}
			return reconcile.Result{}, nil
		})); err != nil {
		return err
	}
	// Pods (none with -pods 0): a cached Get, and a List of the Pods that
	// mount the same ConfigMap (the field index), which must hold the Pod
	// itself.
	if *nPods == 0 {
		// no Pod controller, no Pod informer
	} else if err := ctrl.NewControllerManagedBy(mgr).For(&corev1.Pod{}).Named("bench-pods").Complete(
		reconcile.Func(func(ctx context.Context, req reconcile.Request) (reconcile.Result, error) {
			var pod corev1.Pod
			if err := cl.Get(ctx, req.NamespacedName, &pod); err != nil {
				errN.Add(1)
				return reconcile.Result{}, client.IgnoreNotFound(err)
			}
			podN.Add(1)
			for _, v := range pod.Spec.Volumes {
				if v.ConfigMap == nil {
					continue
				}
				var l corev1.PodList
				if err := cl.List(ctx, &l, client.InNamespace(pod.Namespace), client.MatchingFields{podConfigMapIndex: v.ConfigMap.Name}); err != nil {
					errN.Add(1)
					return reconcile.Result{}, err
				}
				if !slices.ContainsFunc(l.Items, func(p corev1.Pod) bool { return p.Name == pod.Name }) {
					errN.Add(1)
				}
				break
			}
			if pod.Namespace == podNamespace {
				pods.inc()
			}
			return reconcile.Result{}, nil
		})); err != nil {
		return err
	}
	// The informers (made now, started by the manager), to poll.
	var infs []cache.Informer
	objs := []client.Object{&corev1.ConfigMap{}, &corev1.Pod{}}
	if *nPods == 0 {
		objs = objs[:1]
	}
	for _, obj := range objs {
		inf, err := mgr.GetCache().GetInformer(ctx, obj)
		if err != nil {
			return err
		}
		infs = append(infs, inf)
	}

	// ---- start, sync, reconcile ----
	mgrErr := make(chan error, 1)
	go func() { mgrErr <- mgr.Start(ctx) }()
	for slices.ContainsFunc(infs, func(i cache.Informer) bool { return !i.HasSynced() }) {
		select {
		case err := <-mgrErr:
			return fmt.Errorf("manager: %w", err)
		case <-time.After(time.Millisecond):
		}
	}
	if !mgr.GetCache().WaitForCacheSync(ctx) {
		return errors.New("WaitForCacheSync returned false")
	}
	res.SyncSeconds, res.SyncCPUSeconds = since(), cpuSeconds()
	smp.sample()
	res.PeakHeapMB = smp.peakUntil(float64(time.Since(t0).Microseconds()) / 1000)
	select {
	case <-mapped.done:
		if handlerCost > 0 {
			res.MappedSeconds, res.MappedCPUSeconds = since(), cpuSeconds()
		}
	case err := <-mgrErr:
		return fmt.Errorf("manager: %w", err)
	case <-time.After(2 * time.Minute):
		return fmt.Errorf("%s: %d ConfigMaps of the workload mapped after 2 minutes, want %d", *kind, mapped.n.Load(), *nCM)
	}
	for _, c := range []*countTo{cms, pods} {
		select {
		case <-c.done:
		case err := <-mgrErr:
			return fmt.Errorf("manager: %w", err)
		case <-time.After(2 * time.Minute):
			return fmt.Errorf("%s: %d ConfigMaps and %d Pods of the workload reconciled after 2 minutes, want %d and %d",
				*kind, cms.n.Load(), pods.n.Load(), *nCM, *nPods)
		}
	}
	res.ReconciledSeconds, res.ReconciledCPUSeconds = since(), cpuSeconds()
	res.PeakRSSMB = vmHWM()
	res.CMReconciles, res.PodReconciles = cmN.Load(), podN.Load()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	smp.sample()
	res.PeakHeapReconciledMB = smp.peakUntil(float64(time.Since(t0).Microseconds()) / 1000)
	smp.finish()
	res.HeapAfterSyncMB = gcHeapMB()
	if *memProfile != "" {
		f, err := os.Create(*memProfile)
		if err != nil {
			return err
		}
		pprof.Lookup("allocs").WriteTo(f, 0)
		f.Close()
	}

	// ---- update burst ----
	cpuBurst0 := cpuSeconds()
	writes, err := childSynced()
	if err != nil {
		return err
	}
	if *updates > 0 {
		f := rec.burst("cr-contender "+*kind, "update reconciles", 2*time.Minute, cpuBurst0, writes)
		res.Updates, res.UpdateCPUMicros, res.HeapAfterBurstMB = f.updates, f.cpuMicros, f.heapAfterMB
		res.LatencyP50Ms, res.LatencyP99Ms = f.p50, f.p99
	}
	res.Errors = errN.Load()

	// What the cache holds, for the parent to check (no copies).
	var cml corev1.ConfigMapList
	if err := cl.List(ctx, &cml, client.InNamespace(cmNamespace), client.UnsafeDisableDeepCopy); err != nil {
		return err
	}
	var pl corev1.PodList
	if *nPods > 0 {
		if err := cl.List(ctx, &pl, client.InNamespace(podNamespace), client.UnsafeDisableDeepCopy); err != nil {
			return err
		}
	}
	res.CachedConfigMaps, res.CachedPods = len(cml.Items), len(pl.Items)
	return childResult(res)
}
