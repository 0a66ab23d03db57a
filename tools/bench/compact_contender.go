package main

// The compact benchmark's Pod contender (issue 22, `bench compact-contender`):
// one informer of the Pods of a namespace, measured as the main benchmark's
// contender measures its sync, then what a read costs: random Gets, ByIndex
// of an index whose values each hold -per-index Pods, and List, next to a
// plain protobuf decode of the same objects.

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"runtime"
	"runtime/debug"
	"strconv"
	"strings"
	"time"

	"github.com/kinformer/kinformer"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/cache"
)

const (
	compactNamespace = "bench-compact" // the compact benchmark's Pods, pod-00000...
	groupIndex       = "group"         // Pods pod-00000 to pod-00079 share a value, and so on
)

// podGroup is the group index's value for the Pod named name: the number in
// its name divided by per.
func podGroup(name string, per int) string {
	n, err := strconv.Atoi(strings.TrimPrefix(name, "pod-"))
	if err != nil {
		return "other"
	}
	return strconv.Itoa(n / per)
}

// compactResult is what a compact-contender process reports, as one JSON line.
type compactResult struct {
	Contender string `json:"contender"`
	Size      int    `json:"size"` // Pods in the namespace
	Round     int    `json:"round"`
	Objects   int    `json:"objects"` // in the cache when synced

	SyncSeconds    float64 `json:"syncSeconds"`    // start -> HasSynced
	HandledSeconds float64 `json:"handledSeconds"` // start -> every initial Added handled
	SyncCPUSeconds float64 `json:"syncCPUSeconds"` // user+sys over SyncSeconds
	// HandledCPUSeconds is user+sys over HandledSeconds.
	HandledCPUSeconds float64 `json:"handledCPUSeconds"`
	PeakHeapMB        float64 `json:"peakHeapMB"`      // highest heap sample up to synced
	PeakRSSMB         float64 `json:"peakRSSMB"`       // VmHWM at synced
	HeapBaseMB        float64 `json:"heapBaseMB"`      // before the informer was made, after runtime.GC()
	HeapAfterSyncMB   float64 `json:"heapAfterSyncMB"` // once handled, runtime.GC() twice

	// ProtoMB is the protobuf (Marshal) of every cached object, as List
	// returns them, with ManagedFields nil.
	ProtoMB float64 `json:"protoMB"`

	Reads        int     `json:"reads"`        // random keys read
	Misses       int     `json:"misses"`       // Gets that found nothing
	GetNs        float64 `json:"getNs"`        // median Get of a random key
	GetDecodeNs  float64 `json:"getDecodeNs"`  // median (&corev1.Pod{}).Unmarshal of the same objects' protobuf
	IndexReads   int     `json:"indexReads"`   // ByIndex calls
	IndexObjects float64 `json:"indexObjects"` // median objects per ByIndex
	ByIndexNs    float64 `json:"byIndexNs"`    // median ByIndex of a random value, per object returned
	IndexDecNs   float64 `json:"indexDecNs"`   // median Unmarshal of the objects of one value, per object
	ListNs       float64 `json:"listNs"`       // median of 3 Lists of the whole cache, per object
}

// podReader reads an informer's cache as a controller would.
type podReader struct {
	get     func(ns, name string) (*corev1.Pod, bool)
	byIndex func(value string) ([]*corev1.Pod, error)
	list    func() []*corev1.Pod
}

// sink keeps what the timed reads return from being optimized away.
var sink any

func compactContenderMain(args []string) error {
	fs := flag.NewFlagSet("compact-contender", flag.ExitOnError)
	kind := fs.String("kind", kCompact, "client-go | kinformer | kinformer+compact | kinformer+compact+raw | kinformer+fields | kinformer+compact+fields | client-go+transform")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	ns := fs.String("namespace", compactNamespace, "namespace of the Pods")
	round := fs.Int("round", 0, "round number")
	objects := fs.Int("objects", 0, "Pods expected in the namespace")
	reads := fs.Int("reads", 10000, "random Gets timed")
	indexReads := fs.Int("index-reads", 500, "random ByIndex calls timed")
	perIndex := fs.Int("per-index", 80, "Pods per value of the group index")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sync to this file")
	memProfile := fs.String("memprofile", "", "write a heap profile once synced to this file (inuse_space: the heap after sync)")
	readProfile := fs.String("readprofile", "", "write a CPU profile of the timed Gets and ByIndex calls to this file")
	fs.Parse(args)

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder("", *objects, 0)
	res := compactResult{Contender: *kind, Size: *objects, Round: *round}
	per := *perIndex

	var iut informerUnderTest
	var rd podReader
	switch *kind {
	case kClientGo, kClientGoAllow:
		inf, start, err := newSharedIndexInformer(ctx, kClientGo, cs, "pods", *ns)
		if err != nil {
			return err
		}
		if *kind == kClientGoAllow {
			if err := inf.SetTransform(allowlistPod); err != nil {
				return err
			}
		}
		if err := inf.AddIndexers(cache.Indexers{groupIndex: func(obj any) ([]string, error) {
			return []string{podGroup(obj.(*corev1.Pod).Name, per)}, nil
		}}); err != nil {
			return err
		}
		if iut, err = sharedInformerUnderTest(inf, start, "pods", rec, false); err != nil {
			return err
		}
		idx := inf.GetIndexer()
		pods := func(objs []any) []*corev1.Pod {
			out := make([]*corev1.Pod, len(objs))
			for i, o := range objs {
				out[i] = o.(*corev1.Pod)
			}
			return out
		}
		rd = podReader{
			get: func(ns, name string) (*corev1.Pod, bool) {
				o, ok, _ := idx.GetByKey(ns + "/" + name)
				if !ok {
					return nil, false
				}
				return o.(*corev1.Pod), true
			},
			byIndex: func(v string) ([]*corev1.Pod, error) {
				objs, err := idx.ByIndex(groupIndex, v)
				return pods(objs), err
			},
			list: func() []*corev1.Pod { return pods(idx.List()) },
		}
	case kKinformer, kCompact, kCompactRaw, kFields, kCompactFields:
		var fields []string
		if *kind == kFields || *kind == kCompactFields {
			fields = projectedPodFields
		}
		compact := *kind == kCompact || *kind == kCompactRaw || *kind == kCompactFields
		inf := kinformer.New[*corev1.Pod](cs.CoreV1().Pods(*ns), &kinformer.Options[*corev1.Pod]{
			Compact:             compact,
			CompactUncompressed: *kind == kCompactRaw,
			Fields:              fields,
			Indexers: map[string]kinformer.IndexFunc[*corev1.Pod]{groupIndex: func(p *corev1.Pod) []string {
				return []string{podGroup(p.Name, per)}
			}},
		})
		if inf.Cache().Compact() != compact {
			return fmt.Errorf("%s: the cache's Compact is %v", *kind, inf.Cache().Compact())
		}
		iut = kinformerUnderTest(inf, rec, false)
		c := inf.Cache()
		rd = podReader{
			get:     c.GetNamespaced,
			byIndex: func(v string) ([]*corev1.Pod, error) { return c.ByIndex(groupIndex, v) },
			list:    c.List,
		}
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}

	// Open the connection, as every contender does.
	if _, err := cs.CoreV1().Namespaces().Get(ctx, *ns, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	stopSyncProfile, err := startCPUProfile(*cpuProfile)
	if err != nil {
		return err
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 4096
	}
	runtime.GC()
	debug.FreeOSMemory()
	res.HeapBaseMB = gcHeapMB()

	st := measureSync(iut, rec, *kind, *objects, stopSyncProfile)
	res.SyncSeconds, res.SyncCPUSeconds, res.PeakHeapMB, res.PeakRSSMB = st.seconds, st.cpu, st.peakHeap, st.peakRSS
	res.Objects, res.HandledSeconds, res.HeapAfterSyncMB = st.objects, st.handled, st.heapAfter
	res.HandledCPUSeconds = st.cpuHandled
	if err := writeHeapProfile(*memProfile); err != nil {
		return err
	}
	if *memProfile != "" {
		runtime.MemProfileRate = 512 * 1024 // the default again: the reads' CPU profile is not to be the sampler's
	}
	// The parent has nothing to write (no update burst): the protocol of
	// the other contenders, an empty list.
	if _, err := childSynced(); err != nil {
		return err
	}

	// ---- reads ----
	stopReadProfile, err := startCPUProfile(*readProfile)
	if err != nil {
		return err
	}
	n := res.Objects
	r := rand.New(rand.NewPCG(uint64(*round)+1, 22))
	keys := make([]string, *reads)
	for i := range keys {
		keys[i] = podName(r.IntN(max(n, 1)))
	}
	res.Reads = len(keys)
	var getNs []float64
	for _, k := range keys {
		t := time.Now()
		p, ok := rd.get(*ns, k)
		getNs = append(getNs, float64(time.Since(t).Nanoseconds()))
		if !ok {
			res.Misses++
		}
		sink = p
	}
	res.GetNs = median(getNs)

	groups := n / per // values holding per Pods each
	values := make([]string, 0, *indexReads)
	for range *indexReads {
		if groups > 0 {
			values = append(values, strconv.Itoa(r.IntN(groups)))
		}
	}
	var idxNs, idxObjs []float64
	for _, v := range values {
		t := time.Now()
		ps, err := rd.byIndex(v)
		d := float64(time.Since(t).Nanoseconds())
		if err != nil {
			return fmt.Errorf("ByIndex: %w", err)
		}
		if len(ps) > 0 {
			idxNs = append(idxNs, d/float64(len(ps)))
		}
		idxObjs = append(idxObjs, float64(len(ps)))
		sink = ps
	}
	stopReadProfile()
	res.IndexReads, res.ByIndexNs, res.IndexObjects = len(values), median(idxNs), median(idxObjs)

	// The plain decode of the same objects: each one's protobuf (without
	// managedFields), made first, then decoded under the clock.
	marshal := func(p *corev1.Pod) []byte {
		c := *p
		c.ManagedFields = nil
		b, err := c.Marshal()
		if err != nil {
			panic(err)
		}
		return b
	}
	raw := make([][]byte, 0, len(keys))
	for _, k := range keys {
		if p, ok := rd.get(*ns, k); ok {
			raw = append(raw, marshal(p))
		}
	}
	var decNs []float64
	for _, b := range raw {
		t := time.Now()
		var p corev1.Pod
		err := p.Unmarshal(b)
		decNs = append(decNs, float64(time.Since(t).Nanoseconds()))
		if err != nil {
			return err
		}
	}
	raw = nil
	res.GetDecodeNs = median(decNs)
	var idxDecNs []float64
	for _, v := range values {
		ps, _ := rd.byIndex(v)
		bs := make([][]byte, len(ps))
		for i, p := range ps {
			bs[i] = marshal(p)
		}
		if len(bs) == 0 {
			continue
		}
		t := time.Now()
		for _, b := range bs {
			var p corev1.Pod
			if err := p.Unmarshal(b); err != nil {
				return err
			}
		}
		idxDecNs = append(idxDecNs, float64(time.Since(t).Nanoseconds())/float64(len(bs)))
	}
	res.IndexDecNs = median(idxDecNs)

	// List, and the protobuf size of what it returns.
	var listNs []float64
	var all []*corev1.Pod
	for range 3 {
		all = nil
		runtime.GC()
		t := time.Now()
		all = rd.list()
		if len(all) > 0 {
			listNs = append(listNs, float64(time.Since(t).Nanoseconds())/float64(len(all)))
		}
	}
	res.ListNs = median(listNs)
	var proto int
	for _, p := range all {
		c := *p
		c.ManagedFields = nil
		proto += c.Size() // = len(c.Marshal())
	}
	res.ProtoMB = float64(proto) / (1 << 20)
	runtime.KeepAlive(iut)
	return childResult(res)
}

// The projection benchmark's contenders (issue 30): the same Pods keeping
// only the fields a typical Pod controller reads.
const (
	kClientGoAllow = "client-go+transform"      // client-go with a hand-written allowlist Transform of projectedPodFields
	kFields        = "kinformer+fields"         // kinformer.New with Options.Fields: projectedPodFields
	kCompactFields = "kinformer+compact+fields" // the same with Compact
	// kCompactRaw is kinformer+compact holding its bytes as they came
	// (Options.CompactUncompressed): what Compact held before it compressed.
	kCompactRaw = "kinformer+compact+raw"
)

// projectedPodFields are what the projected contenders keep.
var projectedPodFields = []string{"metadata.labels", "metadata.ownerReferences", "spec.nodeName", "status.phase", "status.conditions"}

// allowlistPod is the best client-go users do today: a Transform that
// copies the fields kept into a new Pod (after the whole object was
// decoded), as openkruise and NVSentinel do.
func allowlistPod(obj any) (any, error) {
	p, ok := obj.(*corev1.Pod)
	if !ok {
		return obj, nil // a tombstone
	}
	return &corev1.Pod{
		ObjectMeta: metav1.ObjectMeta{Name: p.Name, Namespace: p.Namespace, UID: p.UID, ResourceVersion: p.ResourceVersion,
			Labels: p.Labels, OwnerReferences: p.OwnerReferences},
		Spec:   corev1.PodSpec{NodeName: p.Spec.NodeName},
		Status: corev1.PodStatus{Phase: p.Status.Phase, Conditions: p.Status.Conditions},
	}, nil
}
