package main

import (
	"context"
	"flag"
	"fmt"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// The contenders. Each runs in its own process (this program re-executed
// with the "contender" subcommand), so that heap, RSS and CPU are its own.
const (
	kClientGo      = "client-go"                 // SharedInformerFactory, defaults
	kClientGoStrip = "client-go+strip"           // the same, with a transform dropping managedFields
	kKinformer     = "kinformer"                 // kinformer.New with nil options
	kKinformerCG   = "kinformer+client-decoding" // kinformer with DisableDirectDecoding: client-go decodes its watches (diagnostic)
	kCompact       = "kinformer+compact"         // kinformer.New with Options.Compact: a cache of bytes (issue 22)
	kFloor         = "floor"                     // one LIST + decode, no cache
)

// result is what a contender process reports, as one JSON line.
type result struct {
	Contender string `json:"contender"`
	Resource  string `json:"resource"`
	Round     int    `json:"round"`
	Objects   int    `json:"objects"` // in the cache (or the list) when synced

	SyncSeconds    float64 `json:"syncSeconds"`    // start -> HasSynced true (polled every 1 ms)
	HandledSeconds float64 `json:"handledSeconds"` // start -> every initial Added handled
	SyncCPUSeconds float64 `json:"syncCPUSeconds"` // user+sys, start -> synced
	// HandledCPUSeconds is user+sys, start -> every initial Added handled.
	HandledCPUSeconds float64 `json:"handledCPUSeconds"`
	PeakHeapMB        float64 `json:"peakHeapMB"`      // max live+unswept heap objects, start -> synced
	PeakRSSMB         float64 `json:"peakRSSMB"`       // VmHWM at synced
	HeapAfterSyncMB   float64 `json:"heapAfterSyncMB"` // heap objects after handlers drained and runtime.GC()

	Updates          int     `json:"updates"`          // update events handled
	UpdatesExpected  int     `json:"updatesExpected"`  // writes made
	UpdateCPUMicros  float64 `json:"updateCPUMicros"`  // CPU per update event, µs
	LatencyP50Ms     float64 `json:"latencyP50Ms"`     // handler time - write response time
	LatencyP99Ms     float64 `json:"latencyP99Ms"`     //
	LatencyReqP50Ms  float64 `json:"latencyReqP50Ms"`  // handler time - write request start (annotation)
	LatencyReqP99Ms  float64 `json:"latencyReqP99Ms"`  //
	HeapAfterBurstMB float64 `json:"heapAfterBurstMB"` // after the burst and runtime.GC()
	ReadMisses       int64   `json:"readMisses"`       // -lister: reads that did not find the handled object

	Series [][2]float64 `json:"series"` // (ms since start, heap MB), every 2 ms until handled
}

// ---- the contender subcommand ----

func contenderMain(args []string) error {
	fs := flag.NewFlagSet("contender", flag.ExitOnError)
	kind := fs.String("kind", kKinformer, "client-go | client-go+strip | kinformer | kinformer+compact | kinformer+client-decoding | floor | kclientgo | kclientgo-wrap")
	resource := fs.String("resource", "configmaps", "configmaps | pods")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	round := fs.Int("round", 0, "round number")
	burstID := fs.String("burst-id", "", "value of the bench/round annotation of this contender's update burst")
	objects := fs.Int("objects", 0, "objects expected in the collection")
	updates := fs.Int("updates", 0, "update events to expect after sync (writes come from the parent)")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sync to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile of the sync to this file (alloc_space: the sync; inuse_space: the heap after sync)")
	noCompression := fs.Bool("no-compression", false, "set rest.Config.DisableCompression")
	distinct := fs.Bool("distinct", false, "watch the -distinct ConfigMaps (namespace bench-cm-distinct)")
	fs.DurationVar(&handlerCost, "handler-cost", 0, "the handler spends this long on every Added and Modified (busy)")
	lister := fs.Bool("lister", false, "each Added and Modified handled reads its object back from the cache (a client-go lister; kinformer's Cache for kinformer)")
	fs.Parse(args)
	setDistinct(*distinct)

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	cfg.DisableCompression = *noCompression
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ns := map[string]string{"configmaps": cmNamespace, "pods": podNamespace}[*resource]
	if ns == "" {
		return fmt.Errorf("unknown resource %q", *resource)
	}
	rec := newRecorder(*burstID, *objects, *updates)
	res := result{Contender: *kind, Resource: *resource, Round: *round, UpdatesExpected: *updates}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()

	var iut informerUnderTest
	switch *kind {
	case kClientGo, kClientGoStrip, kKClientGo, kKClientGoWrap:
		inf, start, err := newSharedIndexInformer(ctx, *kind, cs, *resource, ns)
		if err != nil {
			return err
		}
		if iut, err = sharedInformerUnderTest(inf, start, *resource, rec, *lister); err != nil {
			return err
		}
	case kKinformer:
		if *resource == "pods" {
			iut = kinformerUnderTest(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), nil), rec, *lister)
		} else {
			iut = kinformerUnderTest(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), nil), rec, *lister)
		}
	case kCompact:
		if *resource == "pods" {
			iut = kinformerUnderTest(compactOn(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{Compact: true})), rec, *lister)
		} else {
			iut = kinformerUnderTest(compactOn(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{Compact: true})), rec, *lister)
		}
	case kKinformerCG:
		if *resource == "pods" {
			iut = kinformerUnderTest(kinformer.New[*corev1.Pod](cs.CoreV1().Pods(ns), &kinformer.Options[*corev1.Pod]{DisableDirectDecoding: true}), rec, *lister)
		} else {
			iut = kinformerUnderTest(kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{DisableDirectDecoding: true}), rec, *lister)
		}
	case kFloor:
		var keep any
		done := atomic.Bool{}
		iut = informerUnderTest{
			start: func() {
				go func() {
					defer done.Store(true)
					var n int
					var err error
					if *resource == "pods" {
						var l *corev1.PodList
						l, err = cs.CoreV1().Pods(ns).List(ctx, metav1.ListOptions{})
						if err == nil {
							n, keep = len(l.Items), l
						}
					} else {
						var l *corev1.ConfigMapList
						l, err = cs.CoreV1().ConfigMaps(ns).List(ctx, metav1.ListOptions{})
						if err == nil {
							n, keep = len(l.Items), l
						}
					}
					if err != nil {
						fmt.Fprintln(os.Stderr, "floor list:", err)
						os.Exit(1)
					}
					res.Objects = n
					for range n {
						rec.added()
					}
				}()
			},
			hasSynced: done.Load,
			length:    func() int { return res.Objects },
		}
		defer runtime.KeepAlive(&keep)
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}

	// Warm up the connection (TLS handshake, discovery-free) so that every
	// contender starts from an open HTTP/2 connection.
	if _, err := cs.CoreV1().Namespaces().Get(ctx, ns, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		pprof.StartCPUProfile(f)
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	runtime.GC()
	debug.FreeOSMemory()

	// ---- sync ----
	st := measureSync(iut, rec, *kind, *objects, func() {
		if *cpuProfile != "" {
			pprof.StopCPUProfile()
		}
	})
	res.SyncSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.PeakRSSMB = st.seconds, st.cpu, st.peakHeap, st.peakRSS
	res.Objects, res.HandledSeconds, res.Series, res.HeapAfterSyncMB = st.objects, st.handled, st.series, st.heapAfter
	res.HandledCPUSeconds = st.cpuHandled
	// After the GCs: inuse_space is then the heap after sync, by type
	// and allocation site; alloc_space is the whole sync's.
	if err := writeHeapProfile(*memProfile); err != nil {
		return err
	}

	// ---- update burst ----
	stopBurstProfile, err := startCPUProfile(burstProfile(*cpuProfile, *updates))
	if err != nil {
		return err
	}
	defer stopBurstProfile()
	cpuBurst0 := cpuSeconds()
	writes, err := childSynced()
	if err != nil {
		return err
	}
	if *updates > 0 {
		f := rec.burst("contender "+*kind, "update events", 60*time.Second, cpuBurst0, writes)
		res.Updates, res.UpdateCPUMicros, res.HeapAfterBurstMB = f.updates, f.cpuMicros, f.heapAfterMB
		res.LatencyP50Ms, res.LatencyP99Ms, res.LatencyReqP50Ms, res.LatencyReqP99Ms = f.p50, f.p99, f.reqP50, f.reqP99
	}
	res.ReadMisses = readMisses.Load()
	return childResult(res)
}
