package main

// The crd benchmark's child process (`bench crd-contender -kind K`), and
// the custom resource it watches: Widget, as unstructured objects and as a
// typed Go struct registered in a scheme of its own.

import (
	"context"
	"flag"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/fields"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/dynamic/dynamicinformer"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/cache"
	"k8s.io/client-go/tools/clientcmd"
)

// The contenders of the crd benchmark, each in its own process.
const (
	cClientGo      = "client-go"         // dynamicinformer factory, defaults
	cClientGoStrip = "client-go+strip"   // the same, with a transform dropping managedFields
	cKinformer     = "kinformer"         // kinformer.New over dyn.Resource(gvr).Namespace(ns)
	cKinFactory    = "kinformer-factory" // kinformer.NewFactory(cfg, nil).Dynamic(gvr, ns, nil)
	cKinCompact    = "kinformer+compact" // kinformer.New over dyn.Resource(gvr).Namespace(ns) with Options.Compact (the compact benchmark)
	cClientGoTyped = "client-go-typed"   // SharedIndexInformer over a REST client with Widget's scheme (JSON)
	cKinTyped      = "kinformer-typed"   // kinformer.Shared[*Widget] of a factory with Widget's scheme

	crdNamespace = "bench-crd"
	crdGroup     = "bench.kinformer.io"
	crdResource  = "widgets"
	crdKind      = "Widget"
)

var (
	widgetGV  = schema.GroupVersion{Group: crdGroup, Version: "v1"}
	widgetGVR = widgetGV.WithResource(crdResource)
)

// ---- the typed Widget ----

type Widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              WidgetSpec   `json:"spec"`
	Status            WidgetStatus `json:"status,omitempty"`
}

type WidgetSpec struct {
	Image     string           `json:"image"`
	Replicas  int64            `json:"replicas"`
	Paused    bool             `json:"paused"`
	Weight    float64          `json:"weight"`
	Tags      []string         `json:"tags,omitempty"`
	Owner     WidgetOwner      `json:"owner"`
	Endpoints []WidgetEndpoint `json:"endpoints,omitempty"`
	Limits    WidgetLimits     `json:"limits"`
	Env       []WidgetEnv      `json:"env,omitempty"`
	Payload   string           `json:"payload"`
}

type WidgetOwner struct {
	Team    string        `json:"team"`
	Contact WidgetContact `json:"contact"`
}

type WidgetContact struct {
	Email string `json:"email"`
	Pager bool   `json:"pager"`
}

type WidgetEndpoint struct {
	Name     string  `json:"name"`
	Port     int64   `json:"port"`
	Protocol string  `json:"protocol"`
	TLS      bool    `json:"tls"`
	Weight   float64 `json:"weight"`
}

type WidgetLimits struct {
	CPU      float64     `json:"cpu"`
	MemoryMB int64       `json:"memoryMB"`
	Burst    WidgetBurst `json:"burst"`
}

type WidgetBurst struct {
	Factor        float64 `json:"factor"`
	WindowSeconds int64   `json:"windowSeconds"`
}

type WidgetEnv struct {
	Name  string `json:"name"`
	Value string `json:"value"`
}

type WidgetStatus struct {
	Phase              string            `json:"phase,omitempty"`
	ObservedGeneration int64             `json:"observedGeneration,omitempty"`
	ReadyReplicas      int64             `json:"readyReplicas,omitempty"`
	Score              float64           `json:"score,omitempty"`
	Conditions         []WidgetCondition `json:"conditions,omitempty"`
}

type WidgetCondition struct {
	Type               string      `json:"type"`
	Status             string      `json:"status"`
	Reason             string      `json:"reason,omitempty"`
	Message            string      `json:"message,omitempty"`
	LastTransitionTime metav1.Time `json:"lastTransitionTime"`
}

type WidgetList struct {
	metav1.TypeMeta `json:",inline"`
	metav1.ListMeta `json:"metadata,omitempty"`
	Items           []Widget `json:"items"`
}

// DeepCopy copies w: every field but the slices is a value.
func (w *Widget) DeepCopy() *Widget {
	if w == nil {
		return nil
	}
	out := *w
	w.ObjectMeta.DeepCopyInto(&out.ObjectMeta)
	out.Spec.Tags = slices.Clone(w.Spec.Tags)
	out.Spec.Endpoints = slices.Clone(w.Spec.Endpoints)
	out.Spec.Env = slices.Clone(w.Spec.Env)
	out.Status.Conditions = slices.Clone(w.Status.Conditions)
	return &out
}

func (w *Widget) DeepCopyObject() k8sruntime.Object { return w.DeepCopy() }

func (l *WidgetList) DeepCopyObject() k8sruntime.Object {
	if l == nil {
		return nil
	}
	out := *l
	l.ListMeta.DeepCopyInto(&out.ListMeta)
	if l.Items != nil {
		out.Items = make([]Widget, len(l.Items))
		for i := range l.Items {
			out.Items[i] = *l.Items[i].DeepCopy()
		}
	}
	return &out
}

// widgetScheme registers Widget and WidgetList (and the meta types a client
// needs: ListOptions, WatchEvent, Status) in a scheme of their own.
func widgetScheme() *k8sruntime.Scheme {
	s := k8sruntime.NewScheme()
	s.AddKnownTypes(widgetGV, &Widget{}, &WidgetList{})
	metav1.AddToGroupVersion(s, widgetGV)
	return s
}

func widgetName(i int) string { return fmt.Sprintf("w-%05d", i) }

// eighths returns a number with a fraction (k + j/8, j in 1..7): a JSON
// float that never prints as an integer.
func eighths(r *rand.Rand, k int) float64 {
	return float64(r.IntN(k)) + float64(1+r.IntN(7))/8
}

// widget returns Widget i: about 1 KiB of JSON as created (managedFields
// aside), distinct content, nested objects, lists, both kinds of numbers.
func widget(i int) *Widget {
	r := rand.New(rand.NewPCG(uint64(i), 0x77696467657473))
	team := fmt.Sprintf("team-%02d", i%40)
	eps := make([]WidgetEndpoint, 2)
	for k := range eps {
		eps[k] = WidgetEndpoint{Name: "ep-" + strconv.Itoa(k), Port: int64(8000 + r.IntN(2000)),
			Protocol: []string{"TCP", "UDP"}[r.IntN(2)], TLS: r.IntN(2) == 0, Weight: eighths(r, 10)}
	}
	env := make([]WidgetEnv, 2)
	for k := range env {
		env[k] = WidgetEnv{Name: "KEY_" + strconv.Itoa(k), Value: randHex(r, 12)}
	}
	t := metav1.NewTime(time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC).Add(time.Duration(r.IntN(86400)) * time.Second))
	return &Widget{
		TypeMeta: metav1.TypeMeta{APIVersion: widgetGV.String(), Kind: crdKind},
		ObjectMeta: metav1.ObjectMeta{
			Name:      widgetName(i),
			Namespace: crdNamespace,
			Labels: map[string]string{
				"app.kubernetes.io/name":       "widget",      // shared
				"app.kubernetes.io/managed-by": "tools-bench", // shared
				"bench/team":                   team,
				"bench/id":                     strconv.Itoa(i),
				"bench/hash":                   randHex(r, 10),
			},
			Annotations: map[string]string{"bench/created-by": "tools/bench crd"},
		},
		Spec: WidgetSpec{
			Image:     fmt.Sprintf("registry.example/%s/widget-%s:v1.%d.%d", team, randHex(r, 6), i%9, r.IntN(20)),
			Replicas:  int64(1 + r.IntN(20)),
			Paused:    r.IntN(4) == 0,
			Weight:    eighths(r, 100),
			Tags:      []string{"tier-" + []string{"a", "b", "c"}[i%3], "zone-" + strconv.Itoa(r.IntN(6)), randHex(r, 8)},
			Owner:     WidgetOwner{Team: team, Contact: WidgetContact{Email: randHex(r, 8) + "@example.com", Pager: r.IntN(2) == 0}},
			Endpoints: eps,
			Limits: WidgetLimits{CPU: eighths(r, 8), MemoryMB: int64(128 * (1 + r.IntN(32))),
				Burst: WidgetBurst{Factor: eighths(r, 4), WindowSeconds: int64(10 + r.IntN(600))}},
			Env:     env,
			Payload: randHex(r, 48),
		},
		Status: WidgetStatus{
			Phase:              []string{"Ready", "Pending", "Degraded"}[r.IntN(3)],
			ObservedGeneration: int64(1 + r.IntN(50)),
			ReadyReplicas:      int64(r.IntN(20)),
			Score:              eighths(r, 1000),
			Conditions: []WidgetCondition{
				{Type: "Available", Status: "True", Reason: "MinimumReplicasAvailable", Message: "ready " + randHex(r, 8), LastTransitionTime: t},
			},
		},
	}
}

// unstructuredWidget is widget(i) as the dynamic client sends it.
func unstructuredWidget(i int) (*unstructured.Unstructured, error) {
	m, err := k8sruntime.DefaultUnstructuredConverter.ToUnstructured(widget(i))
	if err != nil {
		return nil, err
	}
	return &unstructured.Unstructured{Object: m}, nil
}

// crdRestConfig is every crd contender's rest.Config: JSON (what custom
// resources are served as), 1000 QPS, never reached.
func crdRestConfig(kubeconfig string, qps float32) (*rest.Config, error) {
	cfg, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return nil, err
	}
	cfg.QPS, cfg.Burst = qps, int(qps)
	cfg.UserAgent = "kinformer-bench"
	return cfg, nil
}

// ---- the crd-contender subcommand ----

// crdResult is what a crd-contender process reports, as one JSON line.
type crdResult struct {
	Contender string `json:"contender"`
	Size      int    `json:"size"` // objects in the namespace
	Round     int    `json:"round"`
	Objects   int    `json:"objects"` // in the cache when synced

	SyncSeconds     float64 `json:"syncSeconds"`     // just before the informer (or factory) is made -> HasSynced (polled every 1 ms)
	HandledSeconds  float64 `json:"handledSeconds"`  // the same -> every initial Added handled
	SyncCPUSeconds  float64 `json:"syncCPUSeconds"`  // user+sys over SyncSeconds
	PeakHeapMB      float64 `json:"peakHeapMB"`      // highest heap sample up to synced
	PeakRSSMB       float64 `json:"peakRSSMB"`       // VmHWM at synced
	HeapAfterSyncMB float64 `json:"heapAfterSyncMB"` // once handled, runtime.GC() twice

	Updates          int     `json:"updates"`
	UpdatesExpected  int     `json:"updatesExpected"`
	UpdateCPUMicros  float64 `json:"updateCPUMicros"` // CPU from synced to the last update event, per event
	LatencyP50Ms     float64 `json:"latencyP50Ms"`    // handler time - write response time
	LatencyP99Ms     float64 `json:"latencyP99Ms"`
	HeapAfterBurstMB float64 `json:"heapAfterBurstMB"`

	Requests []string `json:"requests"` // each LIST and WATCH of the collection up to synced, with its parameters
	Other    int      `json:"other"`    // other requests up to synced (discovery)
	BodyMB   float64  `json:"bodyMB"`   // response bytes of the collection's requests up to synced, after gunzip

	Errors []string `json:"errors,omitempty"` // kinformer Error events
}

// crdReqLog records each GET of the custom resources' collection with the
// parameters that tell a streaming list from a paged one, counts the other
// requests, and the collection's response bytes.
type crdReqLog struct {
	mu    sync.Mutex
	on    bool
	reqs  []string
	other int
	body  atomic.Int64
}

func (l *crdReqLog) start() {
	l.mu.Lock()
	l.on = true
	l.mu.Unlock()
}

// stop returns what was recorded since start.
func (l *crdReqLog) stop() (reqs []string, other int, bodyMB float64) {
	l.mu.Lock()
	defer l.mu.Unlock()
	l.on = false
	return slices.Clone(l.reqs), l.other, float64(l.body.Load()) / (1 << 20)
}

func (l *crdReqLog) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		l.mu.Lock()
		on := l.on
		l.mu.Unlock()
		if !on {
			return rt.RoundTrip(req)
		}
		p := req.URL.Path
		if req.Method != http.MethodGet || !strings.HasSuffix(p, "/"+crdResource) {
			l.mu.Lock()
			l.other++
			l.mu.Unlock()
			return rt.RoundTrip(req)
		}
		what := describeRequest(req.URL.Query(), true)
		l.mu.Lock()
		l.reqs = append(l.reqs, what)
		l.mu.Unlock()
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &l.body}
		}
		return resp, err
	})
}

// errorLog keeps the first Error events of a kinformer informer.
type errorLog struct {
	mu   sync.Mutex
	errs []string
}

func (l *errorLog) add(err error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.errs) < 10 {
		l.errs = append(l.errs, errString(err))
	}
}

func (l *errorLog) list() []string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return slices.Clone(l.errs)
}

func kinformerCRD[T kinformer.Object](inf *kinformer.Informer[T], rec *recorder, errs *errorLog) informerUnderTest {
	inf.AddHandler(func(e kinformer.Event[T]) {
		switch e.Type {
		case kinformer.Added:
			rec.added()
		case kinformer.Modified:
			rec.updated(e.Object)
		case kinformer.Error:
			errs.add(e.Err)
		}
	})
	return informerUnderTest{start: inf.Start, hasSynced: inf.HasSynced, length: inf.Cache().Len}
}

func clientGoCRD(inf cache.SharedIndexInformer, start func(), rec *recorder) (informerUnderTest, error) {
	_, err := inf.AddEventHandler(cache.ResourceEventHandlerFuncs{
		AddFunc:    func(any) { rec.added() },
		UpdateFunc: func(_, obj any) { rec.updated(obj.(metav1.Object)) },
		DeleteFunc: func(any) {},
	})
	return informerUnderTest{start: start, hasSynced: inf.HasSynced, length: func() int { return len(inf.GetStore().ListKeys()) }}, err
}

func crdContenderMain(args []string) error {
	fs := flag.NewFlagSet("crd-contender", flag.ExitOnError)
	kind := fs.String("kind", cKinformer, "client-go | client-go+strip | kinformer | kinformer+compact | kinformer-factory | client-go-typed | kinformer-typed")
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	ns := fs.String("namespace", crdNamespace, "namespace of the custom resources")
	round := fs.Int("round", 0, "round number")
	burstID := fs.String("burst-id", "", "value of the bench/round annotation of this contender's update burst")
	objects := fs.Int("objects", 0, "objects expected in the namespace")
	updates := fs.Int("updates", 0, "update events to expect after sync (writes come from the parent)")
	syncTimeout := fs.Duration("sync-timeout", 5*time.Minute, "give up if not synced by then")
	cpuProfile := fs.String("cpuprofile", "", "write a CPU profile of the sync to this file (and of the update burst to *.burst.cpu.pprof)")
	fs.Parse(args)

	cfg, err := crdRestConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	rl := &crdReqLog{}
	cfg.WrapTransport = rl.wrap
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	rec := newRecorder(*burstID, *objects, *updates)
	errs := &errorLog{}
	res := crdResult{Contender: *kind, Size: *objects, Round: *round, UpdatesExpected: *updates}

	// Open the connection: every client below made from cfg shares
	// client-go's cached transport, so each contender starts from an open
	// HTTP/2 connection (the factories still make their own discovery
	// requests, inside the clock).
	if _, err := dyn.Resource(schema.GroupVersionResource{Version: "v1", Resource: "namespaces"}).Get(ctx, *ns, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	if *cpuProfile != "" {
		f, err := os.Create(*cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		pprof.StartCPUProfile(f)
	}
	runtime.GC()
	debug.FreeOSMemory()

	// ---- sync: the clock starts just before the informer (or factory) is made ----
	rl.start()
	cpu0 := cpuSeconds()
	t0 := time.Now()
	smp := startSampler(t0)
	var iut informerUnderTest
	switch *kind {
	case cClientGo, cClientGoStrip:
		f := dynamicinformer.NewFilteredDynamicSharedInformerFactory(dyn, 0, *ns, nil)
		inf := f.ForResource(widgetGVR).Informer()
		if *kind == cClientGoStrip {
			if err := inf.SetTransform(func(obj any) (any, error) {
				if u, ok := obj.(*unstructured.Unstructured); ok {
					u.SetManagedFields(nil)
				}
				return obj, nil
			}); err != nil {
				return err
			}
		}
		if iut, err = clientGoCRD(inf, func() { f.Start(ctx.Done()) }, rec); err != nil {
			return err
		}
	case cKinformer:
		iut = kinformerCRD(kinformer.New[*unstructured.Unstructured](dyn.Resource(widgetGVR).Namespace(*ns), nil), rec, errs)
	case cKinCompact:
		iut = kinformerCRD(compactOn(kinformer.New[*unstructured.Unstructured](dyn.Resource(widgetGVR).Namespace(*ns), &kinformer.Options[*unstructured.Unstructured]{Compact: true})), rec, errs)
	case cKinFactory:
		f := kinformer.NewFactory(cfg, nil)
		inf, err := f.Dynamic(widgetGVR, *ns, nil)
		if err != nil {
			return err
		}
		iut = kinformerCRD(inf, rec, errs)
		iut.start = f.Start
	case cClientGoTyped:
		c := rest.CopyConfig(cfg)
		c.GroupVersion = &widgetGV
		c.APIPath = "/apis"
		c.ContentType = k8sruntime.ContentTypeJSON
		c.AcceptContentTypes = k8sruntime.ContentTypeJSON
		c.NegotiatedSerializer = serializer.NewCodecFactory(widgetScheme()).WithoutConversion()
		rc, err := rest.RESTClientFor(c)
		if err != nil {
			return err
		}
		lw := cache.NewListWatchFromClient(rc, crdResource, *ns, fields.Everything())
		inf := cache.NewSharedIndexInformer(lw, &Widget{}, 0, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
		if iut, err = clientGoCRD(inf, func() { go inf.Run(ctx.Done()) }, rec); err != nil {
			return err
		}
	case cKinTyped:
		f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Scheme: widgetScheme()})
		inf, err := kinformer.Shared[*Widget](f, *ns, nil)
		if err != nil {
			return err
		}
		iut = kinformerCRD(inf, rec, errs)
		iut.start = f.Start
	default:
		return fmt.Errorf("unknown contender %q", *kind)
	}
	iut.start()
	deadline := time.Now().Add(*syncTimeout)
	for !iut.hasSynced() {
		if time.Now().After(deadline) {
			// The first line is the parent's: it reports why.
			fmt.Printf("not synced after %s: %d of %d objects cached; errors: %q\n", *syncTimeout, iut.length(), *objects, errs.list())
			return fmt.Errorf("%s: not synced after %s", *kind, *syncTimeout)
		}
		time.Sleep(time.Millisecond)
	}
	syncDur := time.Since(t0)
	res.SyncCPUSeconds = cpuSeconds() - cpu0
	res.Requests, res.Other, res.BodyMB = rl.stop()
	res.SyncSeconds = syncDur.Seconds()
	smp.sample()
	res.PeakRSSMB = vmHWM()
	if *cpuProfile != "" {
		pprof.StopCPUProfile()
	}
	res.PeakHeapMB = smp.peakUntil(float64(syncDur.Microseconds()) / 1000)
	res.Objects = iut.length()
	select {
	case <-rec.addsDone:
	case <-time.After(60 * time.Second):
		fmt.Fprintf(os.Stderr, "crd-contender %s: only %d of %d initial Added handled after 60s\n", *kind, rec.adds.Load(), *objects)
	}
	res.HandledSeconds = time.Since(t0).Seconds()
	smp.finish()
	res.HeapAfterSyncMB = gcHeapMB()

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
		f := rec.burst("crd-contender "+*kind, "update events", 60*time.Second, cpuBurst0, writes)
		res.Updates, res.UpdateCPUMicros, res.HeapAfterBurstMB = f.updates, f.cpuMicros, f.heapAfterMB
		res.LatencyP50Ms, res.LatencyP99Ms = f.p50, f.p99
	}
	res.Errors = errs.list()
	return childResult(res)
}
