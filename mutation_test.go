package kinformer

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"os/exec"
	"reflect"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	k8sruntime "k8s.io/apimachinery/pkg/runtime"
)

// detecting is an informer over a fake server with the mutation detector
// on, whose periodic check runs when the test says (check, on the test's
// goroutine: the test's own changes of cached objects happen before it),
// and whose "panic" mode, if the environment asks for it, only records.
type detecting struct {
	t     *testing.T
	inf   *Informer[*corev1.ConfigMap]
	rec   *recorder
	log   *syncBuffer
	marks int
	mu    sync.Mutex // guards fails
	fails []string
}

func startDetecting(t *testing.T, s *fakeServer, opts *Options[*corev1.ConfigMap]) *detecting {
	t.Helper()
	if opts == nil {
		opts = &Options[*corev1.ConfigMap]{}
	}
	opts.DetectMutations = true
	if opts.Backoff == (Backoff{}) {
		opts.Backoff = fastBackoff
	}
	d := &detecting{t: t, rec: &recorder{}, log: &syncBuffer{}}
	opts.Logger = slog.New(slog.NewTextHandler(d.log, nil))
	d.inf = New[*corev1.ConfigMap](s, opts)
	det := d.inf.detector
	det.Tick = make(chan time.Time) // never: the test calls check
	det.Fail = func(msg string) {
		d.mu.Lock()
		defer d.mu.Unlock()
		d.fails = append(d.fails, msg)
	}
	d.inf.AddHandler(d.rec.handle)
	d.inf.Start()
	t.Cleanup(d.inf.Stop)
	if err := d.inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	n := d.inf.Cache().Len()
	eventually(t, "initial events", func() bool { return len(d.rec.lines(false, Added)) >= n })
	return d
}

// check runs the periodic check; one that fails ends the test.
func (d *detecting) check() {
	d.t.Helper()
	if !d.inf.detector.Check(context.Background()) {
		var said []string
		for line := range strings.Lines(d.log.String()) {
			if strings.Contains(line, "check panicked") {
				said = append(said, line)
			}
		}
		d.t.Fatalf("the periodic check failed: %s", strings.Join(said, ""))
	}
}

// delivered waits until the handler has been given every event queued so
// far: a marker queued after them has arrived.
func (d *detecting) delivered(t *testing.T) {
	t.Helper()
	d.marks++
	mark := fmt.Sprint("mark-", d.marks)
	d.inf.disp.emit(Event[*corev1.ConfigMap]{Type: Bookmark, ResourceVersion: mark})
	eventually(t, "the marker", func() bool {
		for _, e := range d.rec.all() {
			if e.Type == Bookmark && e.ResourceVersion == mark {
				return true
			}
		}
		return false
	})
}

func (d *detecting) failed() []string {
	d.mu.Lock()
	defer d.mu.Unlock()
	return append([]string(nil), d.fails...)
}

// mutations returns the ErrMutated events so far, as "key: message".
func (d *detecting) mutations(t *testing.T) []string {
	t.Helper()
	var out []string
	for _, e := range d.rec.all() {
		if e.Type == Error && errors.Is(e.Err, ErrMutated) {
			key, _, ok := strings.Cut(strings.TrimPrefix(e.Err.Error(), ErrMutated.Error()+": "), ": ")
			if !ok || e.Key != "" {
				t.Fatalf("the message %q does not name a key, or the event has one (%q)", e.Err, e.Key)
			}
			out = append(out, key+": "+e.Err.Error())
		}
	}
	return out
}

// waitMutations waits for n ErrMutated events, then checks that no more
// come with another check.
func (d *detecting) waitMutations(t *testing.T, n int) []string {
	t.Helper()
	eventually(t, fmt.Sprintf("%d mutations reported", n), func() bool { return len(d.mutations(t)) >= n })
	d.check()
	d.delivered(t)
	got := d.mutations(t)
	if len(got) != n {
		t.Fatalf("%d mutations reported, want %d: %q", len(got), n, got)
	}
	return got
}

func cached(t *testing.T, inf *Informer[*corev1.ConfigMap], key string) *corev1.ConfigMap {
	t.Helper()
	o, ok := inf.Cache().GetByKey(key)
	if !ok {
		t.Fatalf("%s not cached", key)
	}
	return o
}

// A cached object changed in place is reported as the writer replaces,
// deletes or re-lists it away (dropped, or replaced by a newer state):
// before the evidence is gone, and before the event of the change. The
// periodic check never runs here.
func TestMutationDetectedWhenReplaced(t *testing.T) {
	plainOnly(t)
	for _, how := range []string{"update", "delete", "relist", "relist update"} {
		t.Run(how, func(t *testing.T) {
			s := newFakeServer()
			s.put(cm("ns", "a", "app", "web"))
			s.put(cm("ns", "b", "app", "db"))
			d := startDetecting(t, s, nil)

			cached(t, d.inf, "ns/a").Labels["app"] = "evil"
			cached(t, d.inf, "ns/b").Data = map[string]string{"k": "v"} // kept by a re-list: left to the periodic check
			want := []string{"ERROR ns/a", "DELETED ns/a"}
			switch how {
			case "update":
				s.put(cm("ns", "a", "app", "web", "v", "2"))
				want[1] = "MODIFIED ns/a"
			case "delete":
				s.del("ns", "a")
			case "relist":
				d.inf.Stop()
				s.del("ns", "a")
				s.compact()
				d.inf.Start()
			case "relist update": // the re-list replaces the object with another instance
				d.inf.Stop()
				s.put(cm("ns", "a", "app", "web", "v", "2"))
				s.compact()
				d.inf.Start()
				want[1] = "MODIFIED ns/a"
			}
			eventually(t, "the change", func() bool { return len(d.rec.lines(false, Modified, Deleted)) == 1 })
			var got []string
			for _, e := range d.rec.all() {
				if e.Type == Error && errors.Is(e.Err, ErrExpired) {
					continue // the re-list's cause
				}
				switch {
				case e.Type == Error:
					got = append(got, "ERROR "+strings.Split(e.Err.Error(), ": ")[1])
				case e.Type != Added:
					got = append(got, string(e.Type)+" "+e.Key)
				}
			}
			if strings.Join(got, ",") != strings.Join(want, ",") {
				t.Fatalf("events %q, want %q", got, want)
			}
			msgs := d.mutations(t)
			if len(msgs) != 1 || !strings.Contains(msgs[0], `ns/a: metadata.labels["app"]: "evil", was "web"`) {
				t.Fatalf("report %q, want one naming ns/a and its label", msgs)
			}
			if log := d.log.String(); !strings.Contains(log, "level=ERROR") || !strings.Contains(log, "key=ns/a") || !strings.Contains(log, `\"evil\", was \"web\"`) {
				t.Fatalf("log: %s", log)
			}
			// b, still cached, is the periodic check's: once.
			d.check()
			d.waitMutations(t, 2)
			// "panic" mode's hook, called after each report with its message.
			if f := d.failed(); len(f) != 2 || !strings.HasPrefix(f[0], "cached object modified in place: ns/a: ") ||
				!strings.HasPrefix(f[1], "cached object modified in place: ns/b: ") {
				t.Fatalf("fail called with %q, want the two reports", f)
			}
		})
	}
}

// The periodic check finds a change of an object nothing replaces, reports
// it once, and the next change again; an object copied before it is
// changed, or replaced by the server, is never reported.
func TestMutationDetectedByPeriodicCheck(t *testing.T) {
	plainOnly(t)
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	s.put(cm("ns", "b"))
	d := startDetecting(t, s, nil)

	// No false alarm: updates, copies changed, checks.
	s.put(cm("ns", "b", "v", "2"))
	c := cached(t, d.inf, "ns/a").DeepCopy()
	c.Labels["app"] = "copy"
	d.check()
	d.check()
	if got := d.mutations(t); len(got) != 0 {
		t.Fatalf("reported without a mutation: %q", got)
	}

	a := cached(t, d.inf, "ns/a")
	a.Data["k"] = "1"
	d.check()
	got := d.waitMutations(t, 1)
	if !strings.Contains(got[0], `ns/a: cached object modified in place: ns/a: data["k"]: "1", was absent`) {
		t.Fatalf("report %q", got[0])
	}
	a.Data["k"] = "2"
	delete(a.Labels, "app")
	d.check()
	got = d.waitMutations(t, 2)
	if !strings.Contains(got[1], `metadata.labels["app"]: absent, was "web"; data["k"]: "2", was "1"`) {
		t.Fatalf("second report %q", got[1])
	}
	// The copy was refreshed: replacing the object reports nothing more.
	s.put(cm("ns", "a", "v", "3"))
	eventually(t, "the update", func() bool { return len(d.rec.lines(false, Modified)) == 2 })
	d.waitMutations(t, 2)
	if n := strings.Count(d.log.String(), "level=ERROR"); n != 2 {
		t.Fatalf("%d error lines, want 2: %s", n, d.log.String())
	}

	// The informer's own goroutine checks on its clock, while it runs
	// (changed while it was stopped: before the goroutine starts).
	d.inf.Stop()
	b := cached(t, d.inf, "ns/b")
	b.Labels["new"] = "x"
	det := d.inf.detector
	det.Tick, det.Period = nil, 5*time.Millisecond
	d.inf.Start()
	eventually(t, "the goroutine's report", func() bool { return len(d.mutations(t)) == 3 })
	time.Sleep(50 * time.Millisecond) // ten checks more
	d.delivered(t)
	if got = d.mutations(t); len(got) != 3 {
		t.Fatalf("reports %q, want 3", got)
	}
	if !strings.Contains(got[2], `ns/b: metadata.labels["new"]: "x", was absent`) {
		t.Fatalf("the goroutine's report %q", got[2])
	}
}

// Equal labels maps are shared between cached objects: one change of one
// map shows in every object holding it, and each is reported, once.
func TestMutationOfSharedMapReportedPerObject(t *testing.T) {
	plainOnly(t)
	s := newFakeServer()
	for _, n := range []string{"a", "b", "c"} {
		s.put(cm("ns", n, "app", "web"))
	}
	s.put(cm("ns", "other", "app", "db"))
	d := startDetecting(t, s, nil)
	m := cached(t, d.inf, "ns/a").Labels
	for _, k := range []string{"ns/b", "ns/c"} {
		if reflect.ValueOf(cached(t, d.inf, k).Labels).UnsafePointer() != reflect.ValueOf(m).UnsafePointer() {
			t.Fatalf("%s does not share ns/a's labels map: the test needs sharing", k)
		}
	}
	m["app"] = "evil"
	d.check()
	got := d.waitMutations(t, 3)
	keys := map[string]int{}
	for _, g := range got {
		keys[strings.SplitN(g, ":", 2)[0]]++
	}
	if fmt.Sprint(keys) != "map[ns/a:1 ns/b:1 ns/c:1]" {
		t.Fatalf("reported %v, want ns/a, ns/b and ns/c once each", keys)
	}
	// Re-armed: a second change is reported again, once per object.
	m["tier"] = "1"
	d.check()
	d.waitMutations(t, 6)
	// The changed map is no longer shared with new objects: a new one with
	// the same labels has its own, right ones.
	s.put(cm("ns", "d", "app", "web"))
	eventually(t, "ns/d", func() bool { _, ok := d.inf.Cache().GetByKey("ns/d"); return ok })
	if l := cached(t, d.inf, "ns/d").Labels; fmt.Sprint(l) != "map[app:web]" {
		t.Fatalf("a new object was given the changed map: %v", l)
	}
}

// In "panic" mode the process panics after the report, with its message:
// run in a child process.
func TestMutationPanicMode(t *testing.T) {
	plainOnly(t)
	if os.Getenv("KINFORMER_TEST_MUTATION_CHILD") == "1" {
		s := newFakeServer()
		s.put(cm("ns", "a", "app", "web"))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		o, _ := inf.Cache().GetByKey("ns/a")
		o.Labels["app"] = "evil"
		s.put(cm("ns", "a", "v", "2"))
		time.Sleep(10 * time.Second)
		t.Fatal("no panic")
	}
	cmd := exec.Command(os.Args[0], "-test.run=^TestMutationPanicMode$", "-test.count=1")
	cmd.Env = append(os.Environ(), "KINFORMER_TEST_MUTATION_CHILD=1", EnvMutationDetector+"=panic")
	out, err := cmd.CombinedOutput()
	if err == nil {
		t.Fatalf("the child did not fail:\n%s", out)
	}
	for _, want := range []string{
		`ERROR kinformer: cached object modified in place: ns/a: metadata.labels["app"]: "evil", was "web"`,
		`panic: kinformer: cached object modified in place: ns/a: metadata.labels["app"]: "evil", was "web"`,
	} {
		if !strings.Contains(string(out), want) {
			t.Fatalf("the child's output lacks %q:\n%s", want, out)
		}
	}
}

// countedCM counts its deep copies.
type countedCM struct{ corev1.ConfigMap }

var cmCopies atomic.Int64

func (c *countedCM) DeepCopyObject() k8sruntime.Object {
	cmCopies.Add(1)
	return &countedCM{*c.ConfigMap.DeepCopy()}
}

// Off, the detector copies nothing and runs no goroutine; on, it copies
// every object cached.
func TestMutationDetectorOff(t *testing.T) {
	plainOnly(t)
	t.Setenv(EnvMutationDetector, "")
	counted := func(detect bool) int64 {
		c := newCache[*countedCM](nil, nil)
		w, _ := newTestWriter(c)
		if detect {
			_, hook := newDetector[*countedCM](w.log, nil, false, func() string { return "" }, w.disp.emit, w.disp.fence)
			w.detect = hook
		}
		before := cmCopies.Load()
		for i := range 10 {
			o := &countedCM{*cm("ns", fmt.Sprint(i))}
			o.ResourceVersion = "1"
			w.apply(Added, arrivalOf(o), w.prepare)
		}
		w.apply(Modified, arrivalOf(&countedCM{*cm("ns", "0")}), w.prepare)
		w.apply(Deleted, arrivalOf(&countedCM{*cm("ns", "1")}), w.prepare)
		items := w.cache.s.NewItems(0)
		for i := range 3 {
			o := &countedCM{*cm("ns", fmt.Sprint(i))}
			o.ResourceVersion = "2"
			w.collect(items, arrivalOf(o), w.prepare)
		}
		w.replace(items, "3", nil)
		return cmCopies.Load() - before
	}
	if n := counted(false); n != 0 {
		t.Fatalf("off: %d copies", n)
	}
	if n := counted(true); n != 10+1+3 {
		t.Fatalf("on: %d copies, want one per object cached (14)", n)
	}

	running := func() bool {
		buf := make([]byte, 1<<20)
		return strings.Contains(string(buf[:runtime.Stack(buf, true)]), "(*Detector[...]).Run")
	}
	s := newFakeServer()
	s.put(cm("ns", "a"))
	off, _ := startInformer(t, s, nil)
	if off.detector != nil || running() {
		t.Fatal("the detector is on without being asked")
	}
	off.Stop()
	on, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{DetectMutations: true})
	if on.detector == nil {
		t.Fatal("DetectMutations: no detector")
	}
	eventually(t, "the detector's goroutine", running)
	on.Stop()
	if running() {
		t.Fatal("the detector's goroutine outlived Stop")
	}
}

// The environment turns the detector on for every informer: "true" and
// "1" to report, "panic" to panic too; anything else leaves it to the
// options. A ListerWatcher may ask for it.
func TestMutationDetectorSwitches(t *testing.T) {
	plainOnly(t)
	for _, tc := range []struct {
		env        string
		opt, lw    bool
		on, panics bool
	}{
		{"", false, false, false, false},
		{"", true, false, true, false},
		{"", false, true, true, false},
		{"true", false, false, true, false},
		{"1", false, false, true, false},
		{"TRUE", false, false, true, false},
		{"panic", false, false, true, true},
		{"false", false, false, false, false},
		{"0", true, false, true, false},
		{"yes", false, false, false, false},
	} {
		t.Setenv(EnvMutationDetector, tc.env)
		var lw ListerWatcher[*corev1.ConfigMapList] = newFakeServer()
		if tc.lw {
			lw = detectingLW{newFakeServer()}
		}
		inf := New[*corev1.ConfigMap](lw, &Options[*corev1.ConfigMap]{DetectMutations: tc.opt})
		d := inf.detector
		if on := d != nil; on != tc.on || on && (d.Fail != nil) != tc.panics {
			t.Errorf("env %q, option %v, lister %v: on %v, panics %v; want %v, %v", tc.env, tc.opt, tc.lw, on, on && d.Fail != nil, tc.on, tc.panics)
		}
	}
}

type detectingLW struct{ *fakeServer }

func (detectingLW) DetectMutations() bool { return true }

// A detection is counted in kinformer_cache_mutations_total, whose series
// exists only for informers that detect.
func TestMutationMetric(t *testing.T) {
	plainOnly(t)
	t.Setenv(EnvMutationDetector, "")
	reg := prometheus.NewRegistry()
	m, err := NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	s := newFakeServer()
	s.put(cm("ns", "a"))
	startInformer(t, s, &Options[*corev1.ConfigMap]{Name: "plain", Metrics: m})
	d := startDetecting(t, s, &Options[*corev1.ConfigMap]{Name: "configmaps", Metrics: m})
	if got := gather(t, reg)["kinformer_cache_mutations_total{resource=configmaps}"]; got != 0 {
		t.Fatalf("before: %v", got)
	}
	cached(t, d.inf, "ns/a").Labels["x"] = "y"
	d.check()
	d.waitMutations(t, 1)
	all := gather(t, reg)
	if got := all["kinformer_cache_mutations_total{resource=configmaps}"]; got != 1 {
		t.Fatalf("kinformer_cache_mutations_total = %v, want 1", got)
	}
	if _, ok := all["kinformer_cache_mutations_total{resource=plain}"]; ok {
		t.Fatal("a series for an informer without the detector")
	}
}

// lossyCM's DeepCopyObject is not exact: it drops the data.
type lossyCM struct{ corev1.ConfigMap }

func (c *lossyCM) DeepCopyObject() k8sruntime.Object {
	out := &lossyCM{*c.ConfigMap.DeepCopy()}
	out.Data = nil
	return out
}

// A type whose DeepCopyObject is not exact cannot be checked: said once
// (an error line; in "panic" mode, the panic), and its objects are not
// reported as changed, though each copy differs.
func TestMutationDetectorInexactCopy(t *testing.T) {
	plainOnly(t)
	c := newCache[*lossyCM](nil, nil)
	w, events := newTestWriter(c)
	var log syncBuffer
	det, hook := newDetector[*lossyCM](slog.New(slog.NewTextHandler(&log, nil)), nil, false, w.status.ResourceVersion, w.disp.emit, w.disp.fence)
	w.detect = hook
	var fails []string
	det.Fail = func(msg string) { fails = append(fails, msg) }
	for i := range 3 {
		o := &lossyCM{*cm("ns", fmt.Sprint(i))}
		o.Data["k"] = "v"
		w.apply(Added, arrivalOf(o), w.prepare)
	}
	o := &lossyCM{*cm("ns", "0")}
	o.Data["k"] = "v2"
	w.apply(Modified, arrivalOf(o), w.prepare)
	det.Check(context.Background())
	for _, e := range events() {
		if e.Type == Error {
			t.Fatalf("reported: %v", e.Err)
		}
	}
	want := `the mutation detector cannot check objects of type *kinformer.lossyCM: their DeepCopyObject is not exact (ns/0, copy: data["k"]: absent, was "v")`
	if len(fails) != 1 || !strings.HasPrefix(fails[0], want) {
		t.Fatalf("fail called with %q, want once with %q", fails, want)
	}
	if n := strings.Count(log.String(), "level=ERROR"); n != 1 || !strings.Contains(log.String(), "not exact") {
		t.Fatalf("log: %s", log.String())
	}
	if n := det.Watched(); n != 0 {
		t.Fatalf("%d objects checked", n)
	}
}

// A handler that changed its object and returned is reported by the
// detector's own goroutine, and under -race it is the report that fails
// the run, not a race between the handler's write and the check's read:
// the check synchronises with the handler calls that have ended
// (dispatcher.fence). Nothing else orders the two here: the tick comes
// from a goroutine started before the object existed.
func TestMutationByHandlerIsNotARace(t *testing.T) {
	plainOnly(t)
	s := newFakeServer()
	d := startDetecting(t, s, nil)
	tick := make(chan time.Time)
	d.inf.Stop()
	d.inf.detector.Tick = tick
	d.inf.Start()
	go func() {
		time.Sleep(time.Second) // the handler has long returned
		tick <- time.Time{}
	}()
	d.inf.AddEventHandler(Added, func(e cmEvent) { e.Object.Labels["by"] = "handler" })
	s.put(cm("ns", "a", "app", "web"))
	eventually(t, "the report", func() bool { return len(d.mutations(t)) == 1 })
	if got := d.mutations(t); !strings.Contains(got[0], `ns/a: metadata.labels["by"]: "handler", was absent`) {
		t.Fatalf("report %q", got[0])
	}
}

// A periodic check that panics (here: the dispatcher's fence it calls,
// with a runtime error; as well a DeepCopyObject of the objects' type that
// panics, or a bug of the detector)
// neither kills the process nor stops the informer: the failure is
// reported, in an Error event and an error log line with the stack, not
// through "panic" mode's hook, and the detector is off from then on.
func TestMutationDetectorCheckPanicIsReported(t *testing.T) {
	plainOnly(t)
	s := newFakeServer()
	s.put(cm("ns", "a", "app", "web"))
	s.put(cm("ns", "b"))
	d := startDetecting(t, s, nil)
	det := d.inf.detector
	det.Fence = func() {
		var entries []int
		_ = entries[len(d.rec.all())+10] // index out of range
	}
	ok := func() (ok bool) {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("the check panicked: %v", r)
			}
		}()
		return det.Check(context.Background())
	}()
	if ok {
		t.Fatal("the check did not fail")
	}
	const want = "the mutation detector's check panicked, and the detector is off: runtime error: index out of range"
	eventually(t, "the failure reported", func() bool {
		for _, e := range d.rec.all() {
			if e.Type == Error && e.Err != nil && strings.Contains(e.Err.Error(), want) {
				return true
			}
		}
		return false
	})
	if log := d.log.String(); !strings.Contains(log, "level=ERROR msg=\"kinformer: "+want) || !strings.Contains(log, "stack=") {
		t.Fatalf("log: %s", log)
	}
	if f := d.failed(); len(f) != 0 {
		t.Fatalf(`"panic" mode's hook called with %q`, f)
	}
	// The informer goes on, without the detector.
	s.put(cm("ns", "b", "v", "2"))
	s.put(cm("ns", "c"))
	eventually(t, "the events after the failure", func() bool {
		return len(d.rec.lines(false, Modified)) == 1 && len(d.rec.lines(false, Added)) == 3
	})
	copies := det.Copies()
	cached(t, d.inf, "ns/c").Labels["app"] = "evil"
	s.put(cm("ns", "c", "v", "2"))
	eventually(t, "the update of ns/c", func() bool { return len(d.rec.lines(false, Modified)) == 2 })
	if !det.Check(context.Background()) {
		t.Fatal("a check after the failure failed")
	}
	if n := det.Copies() - copies; n != 0 || len(d.mutations(t)) != 0 {
		t.Fatalf("the detector is on: %d copies made, reports %q", n, d.mutations(t))
	}
}

// "panic" mode's panic goes through the periodic check, which recovers
// from any other: the process still dies of a detection.
func TestMutationPanicModeThroughCheck(t *testing.T) {
	plainOnly(t)
	c := newCache[*corev1.ConfigMap](nil, nil)
	w, _ := newTestWriter(c)
	det, hook := newDetector[*corev1.ConfigMap](slog.New(slog.DiscardHandler), nil, true, w.status.ResourceVersion, w.disp.emit, w.disp.fence)
	w.detect = hook
	w.apply(Added, arrivalOf(cm("ns", "a", "app", "web")), w.prepare)
	o, _ := c.GetByKey("ns/a")
	o.Labels["app"] = "evil"
	r := func() (r any) {
		defer func() { r = recover() }()
		det.Check(context.Background())
		return nil
	}()
	want := `kinformer: cached object modified in place: ns/a: metadata.labels["app"]: "evil", was "web"`
	if err, ok := r.(error); !ok || err.Error() != want || det.Off() {
		t.Fatalf("the check panicked with %#v, detector off %v; want the panic %q", r, det.Off(), want)
	}
}
