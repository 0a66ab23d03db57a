package main

// What the contender processes measure: CPU, heap, RSS, events, requests.

import (
	"fmt"
	"io"
	"net/http"
	"net/url"
	"os"
	"runtime"
	"runtime/metrics"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/kinformer/kinformer"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// ---- measurement helpers ----

func cpuSeconds() float64 {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return float64(ru.Utime.Nano()+ru.Stime.Nano()) / 1e9
}

// processCPUSeconds returns the user+sys CPU seconds of process pid and
// of its live children (from /proc; 0 where it cannot read them).
func processCPUSeconds(pid int) float64 {
	ticks := func(stat string) (ppid int, t float64) {
		// After the command's ")": state ppid ... utime(14) stime(15).
		i := strings.LastIndexByte(stat, ')')
		if i < 0 {
			return 0, 0
		}
		f := strings.Fields(stat[i+1:])
		if len(f) < 13 {
			return 0, 0
		}
		ppid, _ = strconv.Atoi(f[1])
		u, _ := strconv.ParseFloat(f[11], 64)
		s, _ := strconv.ParseFloat(f[12], 64)
		return ppid, u + s
	}
	const hz = 100 // USER_HZ on Linux
	total := 0.0
	dirs, _ := os.ReadDir("/proc")
	for _, d := range dirs {
		n, err := strconv.Atoi(d.Name())
		if err != nil {
			continue
		}
		b, err := os.ReadFile("/proc/" + d.Name() + "/stat")
		if err != nil {
			continue
		}
		if ppid, t := ticks(string(b)); n == pid || ppid == pid {
			total += t
		}
	}
	return total / hz
}

// vmHWM returns the process's peak RSS (VmHWM) in MB (0 if unknown).
func vmHWM() float64 {
	mb, _ := procStatusMB("/proc/self/status", "VmHWM:")
	return mb
}

// procStatusMB reads a field of a /proc/PID/status file given in kB
// (VmRSS:, VmHWM:), in MB; false if it cannot.
func procStatusMB(path, field string) (float64, bool) {
	b, err := os.ReadFile(path)
	if err != nil {
		return 0, false
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, field); ok {
			kb, err := strconv.ParseFloat(strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(rest), "kB")), 64)
			return kb / 1024, err == nil
		}
	}
	return 0, false
}

const heapMetric = "/memory/classes/heap/objects:bytes" // = MemStats.HeapAlloc, without a stop-the-world

func heapMB() float64 {
	s := []metrics.Sample{{Name: heapMetric}}
	metrics.Read(s)
	return float64(s[0].Value.Uint64()) / (1 << 20)
}

// sampler records the heap every 2 ms.
type sampler struct {
	t0     time.Time
	mu     sync.Mutex
	series [][2]float64
	stop   chan struct{}
	done   chan struct{}
}

func startSampler(t0 time.Time) *sampler {
	s := &sampler{t0: t0, stop: make(chan struct{}), done: make(chan struct{})}
	s.sample()
	go func() {
		defer close(s.done)
		t := time.NewTicker(2 * time.Millisecond)
		defer t.Stop()
		for {
			select {
			case <-s.stop:
				return
			case <-t.C:
				s.sample()
			}
		}
	}()
	return s
}

func (s *sampler) sample() {
	v := heapMB()
	s.mu.Lock()
	s.series = append(s.series, [2]float64{float64(time.Since(s.t0).Microseconds()) / 1000, v})
	s.mu.Unlock()
}

// peakUntil returns the highest sample taken up to ms.
func (s *sampler) peakUntil(ms float64) float64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	p := 0.0
	for _, x := range s.series {
		if x[0] <= ms {
			p = max(p, x[1])
		}
	}
	return p
}

func (s *sampler) finish() [][2]float64 {
	close(s.stop)
	<-s.done
	s.sample()
	return s.series
}

func gcHeapMB() float64 {
	runtime.GC()
	runtime.GC()
	return heapMB()
}

// ---- event recording ----

type record struct {
	name, rv string
	at, ts   int64 // handler time, annotation bench/ts (request start)
}

// recorder is shared by the handlers of every contender: it counts initial
// Added events and records update events of this round's burst.
type recorder struct {
	round    string
	expected int
	adds     atomic.Int64
	addsWant int64
	addsDone chan struct{}

	mu      sync.Mutex
	records []record
	cpuEnd  float64
	done    chan struct{}
}

func newRecorder(round string, objects, updates int) *recorder {
	r := &recorder{round: round, expected: updates, addsWant: int64(objects),
		addsDone: make(chan struct{}), done: make(chan struct{})}
	if objects == 0 {
		close(r.addsDone)
	}
	if updates == 0 {
		close(r.done)
	}
	return r
}

func (r *recorder) added() {
	if r.adds.Add(1) == r.addsWant {
		close(r.addsDone)
	}
}

func (r *recorder) updated(obj metav1.Object) {
	now := time.Now().UnixNano()
	ann := obj.GetAnnotations()
	if ann[annRound] != r.round || r.expected == 0 {
		return
	}
	ts, _ := strconv.ParseInt(ann[annTS], 10, 64)
	r.mu.Lock()
	defer r.mu.Unlock()
	if len(r.records) >= r.expected {
		return
	}
	if r.records == nil { // allocated at the first update, not counted in the heap after sync
		r.records = make([]record, 0, r.expected)
	}
	r.records = append(r.records, record{name: obj.GetName(), rv: obj.GetResourceVersion(), at: now, ts: ts})
	if len(r.records) == r.expected {
		r.cpuEnd = cpuSeconds()
		close(r.done)
	}
}

// wait waits, at most timeout, for the update events of the parent's
// burst (who names the contender and what the events in the message if
// some are missing), and returns them with the CPU time at the last
// expected one (now, if some are missing).
func (r *recorder) wait(who, what string, timeout time.Duration) ([]record, float64) {
	select {
	case <-r.done:
	case <-time.After(timeout):
		fmt.Fprintf(os.Stderr, "%s: only %d of %d %s after %v\n", who, len(r.records), r.expected, what, timeout)
	}
	r.mu.Lock()
	recs := slices.Clone(r.records)
	cpuEnd := r.cpuEnd
	r.mu.Unlock()
	if cpuEnd == 0 {
		cpuEnd = cpuSeconds()
	}
	return recs, cpuEnd
}

// burstFigures are what a contender measures of the parent's update burst.
type burstFigures struct {
	updates        int     // update events handled
	cpuMicros      float64 // CPU from the burst's start to the last event, per event
	p50, p99       float64 // ms from the write's response to the handler (matched by name and resourceVersion)
	reqP50, reqP99 float64 // ms from the write's request start (annotation bench/ts) to the handler
	heapAfterMB    float64 // after the burst and runtime.GC()
}

// burst waits for the update events of the parent's burst, whose writes
// are writes (see wait), and measures them; cpu0 is the CPU time at the
// burst's start.
func (r *recorder) burst(who, what string, timeout time.Duration, cpu0 float64, writes []write) burstFigures {
	recs, cpuEnd := r.wait(who, what, timeout)
	f := burstFigures{updates: len(recs)}
	if len(recs) > 0 {
		f.cpuMicros = (cpuEnd - cpu0) / float64(len(recs)) * 1e6
	}
	resp := make(map[string]int64, len(writes))
	for _, w := range writes {
		resp[w.Name+"@"+w.RV] = w.Resp
	}
	var lat, latReq []float64
	for _, r := range recs {
		if t, ok := resp[r.name+"@"+r.rv]; ok {
			lat = append(lat, float64(r.at-t)/1e6)
		}
		if r.ts > 0 {
			latReq = append(latReq, float64(r.at-r.ts)/1e6)
		}
	}
	f.p50, f.p99 = percentile(lat, 50), percentile(lat, 99)
	f.reqP50, f.reqP99 = percentile(latReq, 50), percentile(latReq, 99)
	f.heapAfterMB = gcHeapMB()
	return f
}

type informerUnderTest struct {
	start     func()
	hasSynced func() bool
	length    func() int
}

// syncStats is what measureSync measures.
type syncStats struct {
	seconds, cpu       float64 // start -> HasSynced (polled every 1 ms); user+sys CPU over it
	peakHeap, peakRSS  float64 // MB: the highest heap sample up to synced; VmHWM at synced
	objects            int     // in the cache when synced
	handled, heapAfter float64 // start -> every initial Added handled (at most 60 s more); heap MB then, after runtime.GC() twice
	// cpuHandled is user+sys CPU to handled: an informer that delivers the
	// initial Added while the list streams (kinformer since its pipelined
	// list) spends its handlers' part before synced, one that delivers
	// after the list, after it: only this figure compares them.
	cpuHandled float64
	series     [][2]float64
}

// measureSync starts iut and measures its sync; synced is called as soon
// as it has synced (to stop a CPU profile).
func measureSync(iut informerUnderTest, rec *recorder, who string, objects int, synced func()) syncStats {
	var st syncStats
	cpu0 := cpuSeconds()
	t0 := time.Now()
	smp := startSampler(t0)
	iut.start()
	for !iut.hasSynced() {
		time.Sleep(time.Millisecond)
	}
	syncDur := time.Since(t0)
	cpuSync := cpuSeconds()
	smp.sample()
	st.peakRSS = vmHWM()
	synced()
	st.seconds = syncDur.Seconds()
	st.cpu = cpuSync - cpu0
	st.peakHeap = smp.peakUntil(float64(syncDur.Microseconds()) / 1000)
	st.objects = iut.length()
	select {
	case <-rec.addsDone:
	case <-time.After(60 * time.Second):
		fmt.Fprintf(os.Stderr, "contender %s: only %d of %d initial Added handled after 60s\n", who, rec.adds.Load(), objects)
	}
	st.handled = time.Since(t0).Seconds()
	st.cpuHandled = cpuSeconds() - cpu0
	st.series = smp.finish()
	st.heapAfter = gcHeapMB()
	return st
}

// compactOn returns inf, whose options asked for Compact, once its cache
// says it is compact; a contender that would measure a plain cache under
// the compact name exits instead.
func compactOn[T kinformer.Object](inf *kinformer.Informer[T]) *kinformer.Informer[T] {
	if !inf.Cache().Compact() {
		fmt.Fprintln(os.Stderr, "contender: Options.Compact set, but the cache is not compact")
		os.Exit(1)
	}
	return inf
}

// startCPUProfile starts a CPU profile into path ("" for none) and returns
// what stops it (and closes the file).
func startCPUProfile(path string) (stop func(), err error) {
	if path == "" {
		return func() {}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, err
	}
	return func() { pprof.StopCPUProfile(); f.Close() }, nil
}

// describeRequest is a LIST or WATCH of a collection as the reports list
// them, with the parameters that tell a warm start from a cold one, a
// paged list from a streaming one: "WATCH rv=N,sendInitialEvents". With
// withContinue, a page after the first says "continue".
func describeRequest(q url.Values, withContinue bool) string {
	what := "LIST"
	if q.Get("watch") == "true" || q.Get("watch") == "1" {
		what = "WATCH"
	}
	var ps []string
	if v := q.Get("limit"); v != "" {
		ps = append(ps, "limit="+v)
	}
	if v := q.Get("continue"); v != "" && withContinue {
		ps = append(ps, "continue")
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
	return what
}

// burstProfile is the CPU profile of an update burst next to the sync's
// cpuProfile (X.cpu.pprof: X.burst.cpu.pprof); none without either.
func burstProfile(cpuProfile string, updates int) string {
	if cpuProfile == "" || updates == 0 {
		return ""
	}
	return strings.TrimSuffix(cpuProfile, ".cpu.pprof") + ".burst.cpu.pprof"
}

// writeHeapProfile writes the allocs profile into path ("" for none).
func writeHeapProfile(path string) error {
	if path == "" {
		return nil
	}
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	defer f.Close()
	return pprof.Lookup("allocs").WriteTo(f, 0)
}

// handlerCost is how long each contender's handler spends on every Added
// and Modified (-handler-cost): busy, as a mapper reading the cache is.
var handlerCost time.Duration

// work spends handlerCost.
func work() {
	for t := time.Now(); time.Since(t) < handlerCost; {
	}
}

func kinformerUnderTest[T kinformer.Object](inf *kinformer.Informer[T], rec *recorder, read bool) informerUnderTest {
	c := inf.Cache()
	// One handler for every type, like client-go's one ResourceEventHandler.
	inf.AddHandler(func(e kinformer.Event[T]) {
		if read && (e.Type == kinformer.Added || e.Type == kinformer.Modified) {
			if _, ok := c.GetNamespaced(e.Object.GetNamespace(), e.Object.GetName()); !ok {
				readMisses.Add(1)
			}
		}
		if e.Type == kinformer.Added || e.Type == kinformer.Modified {
			work()
		}
		switch e.Type {
		case kinformer.Added:
			rec.added()
		case kinformer.Modified:
			rec.updated(e.Object)
		}
	})
	return informerUnderTest{start: inf.Start, hasSynced: inf.HasSynced, length: inf.Cache().Len}
}

// percentile of xs (sorted in place), nearest rank.
func percentile(xs []float64, p float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	slices.Sort(xs)
	i := int(float64(len(xs))*p/100+0.5) - 1
	return xs[max(0, min(i, len(xs)-1))]
}

// reqCounter counts the requests of a rest.Config (its WrapTransport).
type reqCounter struct {
	lists, watches, watchLists, other, body atomic.Int64
	mu                                      sync.Mutex
	otherPaths                              []string
}

func (c *reqCounter) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		q := req.URL.Query()
		p := req.URL.Path
		last := p[strings.LastIndex(p, "/")+1:]
		switch {
		case req.Method != http.MethodGet:
			c.addOther(req.Method + " " + p)
		case q.Get("watch") == "true" || q.Get("watch") == "1" || strings.Contains(p, "/watch/"):
			if q.Get("sendInitialEvents") == "true" {
				c.watchLists.Add(1)
			} else {
				c.watches.Add(1)
			}
		case last == "pods" || last == "configmaps":
			c.lists.Add(1)
		default:
			c.addOther(p)
		}
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: &c.body}
		}
		return resp, err
	})
}

func (c *reqCounter) addOther(what string) {
	c.other.Add(1)
	c.mu.Lock()
	c.otherPaths = append(c.otherPaths, what)
	c.mu.Unlock()
}

type roundTripper func(*http.Request) (*http.Response, error)

func (f roundTripper) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b *countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}
