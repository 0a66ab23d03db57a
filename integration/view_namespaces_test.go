package integration

import (
	"fmt"
	"math/rand/v2"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
	"weak"

	"go.uber.org/goleak"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// eventLines renders a recorder's events as "TYPE namespace/name cause",
// in order.
func eventLines(r *recorder[*corev1.ConfigMap]) []string {
	var out []string
	for _, e := range r.all() {
		if e.Object == nil {
			continue
		}
		out = append(out, fmt.Sprintf("%s %s/%s %s", e.Type, e.Object.Namespace, e.Object.Name, e.Cause))
	}
	return out
}

// waitLines waits until the recorder has every line of want (in any order
// among the others), and returns what it has.
func waitLines(t *testing.T, r *recorder[*corev1.ConfigMap], want ...string) []string {
	t.Helper()
	var got []string
	deadline := time.Now().Add(callTimeout)
	for {
		got = eventLines(r)
		missing := slices.DeleteFunc(slices.Clone(want), func(w string) bool { return slices.Contains(got, w) })
		if len(missing) == 0 {
			return got
		}
		if time.Now().After(deadline) {
			t.Fatalf("missing events %v; got:\n%s", missing, strings.Join(got, "\n"))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A view of ConfigMaps over the namespaces a label selects, plus one named:
// namespaces labelled while it runs join (their objects Added, CauseJoin),
// unlabelled or deleted ones leave (Deleted, CauseLeave), named ones are
// added and removed by hand, and the informers of namespaces that left are
// released: the factory stops them.
func TestSharedViewFollowsNamespaces(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ignore := leakIgnores()
	nsA, nsB, nsC, nsD := testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config()),
		testenv.NewNamespace(t, srv.Config()), testenv.NewNamespace(t, srv.Config())
	tenant := "tenant-" + nsA // unique to this test
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/tenant", tenant)
	for _, cm := range []*corev1.ConfigMap{configMap(nsA, "a1", nil, "1"), configMap(nsA, "a2", nil, "1"),
		configMap(nsB, "b1", nil, "1"), configMap(nsC, "c1", nil, "1"), configMap(nsD, "d1", nil, "1")} {
		mustCreate(t, c, cm)
	}

	f, _ := newFactory(t, srv.Config())
	v, err := kinformer.SharedView[*corev1.ConfigMap](f, kinformer.Namespaces{
		Names: []string{nsC}, Selector: "kinformer.test/tenant=" + tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var rec recorder[*corev1.ConfigMap]
	reg := v.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: rec.handle, Modified: rec.handle, Deleted: rec.handle})
	f.Start()
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if got, want := v.Namespaces(), sorted([]string{nsA, nsC}); !slices.Equal(got, want) {
		t.Fatalf("Namespaces() = %v, want %v", got, want)
	}
	eventually(t, callTimeout, "the handler synced", reg.HasSynced)
	// The namespaces the view starts with are not joins.
	got := waitLines(t, &rec, "ADDED "+nsA+"/a1 list", "ADDED "+nsA+"/a2 list", "ADDED "+nsC+"/c1 list")
	if len(got) != 3 {
		t.Fatalf("first events: %v", got)
	}

	// A namespace labelled while the view runs joins.
	rec.reset()
	testenv.LabelNamespace(t, srv.Config(), nsB, "kinformer.test/tenant", tenant)
	waitLines(t, &rec, "ADDED "+nsB+"/b1 join")
	if _, ok := v.GetNamespaced(nsB, "b1"); !ok {
		t.Fatal("b1 not in the view after its namespace joined")
	}
	mustCreate(t, c, configMap(nsB, "b2", nil, "1"))
	waitLines(t, &rec, "ADDED "+nsB+"/b2 watch")

	// One unlabelled leaves: Deleted for each of its objects, after the
	// events already given.
	rec.reset()
	mustUpdate(t, c, nsA, "a1", "2")
	waitLines(t, &rec, "MODIFIED "+nsA+"/a1 watch")
	testenv.LabelNamespace(t, srv.Config(), nsA, "kinformer.test/tenant", "")
	got = waitLines(t, &rec, "DELETED "+nsA+"/a1 leave", "DELETED "+nsA+"/a2 leave")
	if got[0] != "MODIFIED "+nsA+"/a1 watch" {
		t.Fatalf("the leave came before the events queued before it: %v", got)
	}
	eventually(t, callTimeout, nsA+" gone from the view", func() bool {
		return !slices.Contains(v.Namespaces(), nsA) && len(v.Select(nsA, nil)) == 0
	})
	// Its informer is released, so stopped: an object created now in nsA
	// reaches no one. (A fence: an event of nsB's informer after it.)
	mustCreate(t, c, configMap(nsA, "a3", nil, "1"))
	mustCreate(t, c, configMap(nsB, "fence", nil, "1"))
	waitLines(t, &rec, "ADDED "+nsB+"/fence watch")
	time.Sleep(500 * time.Millisecond)
	for _, l := range eventLines(&rec) {
		if strings.Contains(l, nsA+"/a3") {
			t.Fatalf("an object of a namespace that left reached the view's handler: %s", l)
		}
	}

	// Named namespaces change by hand: nsA (no longer selected) added,
	// nsC removed, nsD through SetNamespaces.
	rec.reset()
	if err := v.AddNamespace(nsA); err != nil {
		t.Fatal(err)
	}
	waitLines(t, &rec, "ADDED "+nsA+"/a1 join", "ADDED "+nsA+"/a2 join", "ADDED "+nsA+"/a3 join")
	if err := v.SetNamespaces(nsA, nsD); err != nil {
		t.Fatal(err)
	}
	waitLines(t, &rec, "DELETED "+nsC+"/c1 leave", "ADDED "+nsD+"/d1 join")
	if got, want := v.Namespaces(), sorted([]string{nsA, nsB, nsD}); !slices.Equal(got, want) {
		t.Fatalf("Namespaces() = %v, want %v", got, want)
	}
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}

	// A selected namespace that is deleted leaves (its finalizer removed by
	// hand: the test server has no namespace controller).
	rec.reset()
	if err := c.CoreV1().Namespaces().Delete(bounded(t, callTimeout), nsB, metav1.DeleteOptions{}); err != nil {
		t.Fatal(err)
	}
	ns, err := c.CoreV1().Namespaces().Get(bounded(t, callTimeout), nsB, metav1.GetOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ns.Spec.Finalizers = nil
	if _, err := c.CoreV1().Namespaces().Finalize(bounded(t, callTimeout), ns, metav1.UpdateOptions{}); err != nil {
		t.Fatal(err)
	}
	waitLines(t, &rec, "DELETED "+nsB+"/b1 leave", "DELETED "+nsB+"/b2 leave", "DELETED "+nsB+"/fence leave")
	eventually(t, callTimeout, nsB+" gone from the view", func() bool { return !slices.Contains(v.Namespaces(), nsB) })

	v.Close()
	if n := len(v.Informers()); n != 0 {
		t.Fatalf("a closed view still has %d informers", n)
	}
	f.Stop()
	goleak.VerifyNone(t, ignore...)
}

// A namespace flipped in and out of a selector's view any number of times
// leaves the heap where one join and leave leave it: the informer of each
// leave, and its cache, are freed. (Each leave's cache was kept: 20 × 1 MB
// ConfigMaps labelled in and out 20 times took the heap from 14 to 415 MB.)
func TestSharedViewFlippedNamespaceIsFreed(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	tenant := "flip-" + ns
	const objects, size = 8, 900 << 10
	for i := range objects {
		mustCreate(t, c, configMap(ns, fmt.Sprint("big-", i), nil, strings.Repeat(string(rune('a'+i)), size)))
	}
	f, _ := newFactory(t, srv.Config())
	v, err := kinformer.SharedView[*corev1.ConfigMap](f, kinformer.Namespaces{Selector: "kinformer.test/tenant=" + tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	// Counts, not objects: the handler keeps nothing alive.
	var joined, left atomic.Int64
	v.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{
		Added: func(e kinformer.Event[*corev1.ConfigMap]) {
			if e.Cause == kinformer.CauseJoin {
				joined.Add(1)
			}
		},
		Deleted: func(e kinformer.Event[*corev1.ConfigMap]) {
			if e.Cause == kinformer.CauseLeave {
				left.Add(1)
			}
		},
	})
	f.Start()
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	var infs []weak.Pointer[kinformer.Informer[*corev1.ConfigMap]]
	flip := func(round int) {
		t.Helper()
		testenv.LabelNamespace(t, srv.Config(), ns, "kinformer.test/tenant", tenant)
		eventually(t, callTimeout, "the namespace's join", func() bool { return joined.Load() == int64(objects*round) })
		in := v.Informers()
		if len(in) != 1 {
			t.Fatalf("round %d: the view has %d informers, want 1", round, len(in))
		}
		infs = append(infs, weak.Make(in[0]))
		in = nil
		testenv.LabelNamespace(t, srv.Config(), ns, "kinformer.test/tenant", "")
		eventually(t, callTimeout, "the namespace's leave", func() bool {
			return left.Load() == int64(objects*round) && len(v.Informers()) == 0
		})
	}
	heap := func() uint64 {
		var ms runtime.MemStats
		runtime.GC()
		runtime.GC()
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	// Each informer that left is released (once its leave is handled) and
	// collected: nothing of the view or the factory keeps it, nor a timer
	// of its last watch (which once kept one past 30 s on a CI machine).
	const freeTimeout = callTimeout
	freed := func(what string) {
		t.Helper()
		deadline := time.Now().Add(freeTimeout)
		for {
			runtime.GC()
			var alive []*kinformer.Informer[*corev1.ConfigMap]
			var rounds []int
			for i, w := range infs {
				if inf := w.Value(); inf != nil {
					alive, rounds = append(alive, inf), append(rounds, i+1)
				}
			}
			if len(alive) == 0 {
				return
			}
			if time.Now().After(deadline) {
				reportAlive(t, f, alive)
				t.Fatalf("timed out after %v waiting for %s: rounds %v alive", freeTimeout, what, rounds)
			}
			alive = nil
			time.Sleep(10 * time.Millisecond)
		}
	}
	flip(1)
	freed("the first leave's informer to be freed")
	once := heap()
	const flips = 8
	for round := 2; round <= flips+1; round++ {
		flip(round)
	}
	freed("every leave's informer to be freed")
	after := heap()
	growth := int64(after) - int64(once)
	t.Logf("heap after one join and leave %.1f MB, after %d more %.1f MB (a namespace holds %.1f MB of data)",
		float64(once)/1e6, flips, float64(after)/1e6, float64(objects*size)/1e6)
	if growth > objects*size/2 {
		t.Fatalf("the heap grew %.1f MB over %d flips of a namespace of %.1f MB", float64(growth)/1e6, flips, float64(objects*size)/1e6)
	}
	if len(v.Informers()) != 0 || len(v.Namespaces()) != 0 {
		t.Fatal("the view still holds the namespace")
	}
}

// reportAlive says, for whoever reads a failure, what may hold informers
// that should have been freed: the goroutines first (as they are, before
// anything below changes them), then each informer (whether it still ran:
// asking stops it) and what the factory holds.
func reportAlive(t *testing.T, f *kinformer.Factory, alive []*kinformer.Informer[*corev1.ConfigMap]) {
	t.Helper()
	var dump strings.Builder
	_ = pprof.Lookup("goroutine").WriteTo(&dump, 1)
	t.Logf("goroutines:\n%s", dump.String())
	for _, inf := range alive {
		running := "stopped"
		select {
		case <-inf.RequestStop():
		default:
			running = "running"
		}
		t.Logf("informer %p alive (%s), %d objects cached", inf, running, inf.Cache().Len())
	}
	t.Logf("the factory's caches: %+v", f.Caches())
}

// Several namespaces flipped in and out of a selector's view at once, at
// random intervals (a join before the last leave is handled, a leave
// before the join's objects are), leave nothing behind: once they are
// all out, every informer the view was seen to hold is freed.
func TestSharedViewRapidFlipsFreeEveryInformer(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	var nss []string
	for range 3 {
		ns := testenv.NewNamespace(t, srv.Config())
		nss = append(nss, ns)
		for i := range 4 {
			mustCreate(t, c, configMap(ns, fmt.Sprint("big-", i), nil, strings.Repeat("x", 100<<10)))
		}
	}
	tenant := "rapid-" + nss[0]
	f, logs := newFactory(t, srv.Config())
	v, err := kinformer.SharedView[*corev1.ConfigMap](f, kinformer.Namespaces{Selector: "kinformer.test/tenant=" + tenant}, nil)
	if err != nil {
		t.Fatal(err)
	}
	defer v.Close()
	var events atomic.Int64
	count := func(kinformer.Event[*corev1.ConfigMap]) { events.Add(1) }
	v.AddHandlerFuncs(kinformer.HandlerFuncs[*corev1.ConfigMap]{Added: count, Deleted: count})
	f.Start()
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	seed := uint64(time.Now().UnixNano())
	t.Logf("seed %d", seed)
	rnd := rand.New(rand.NewPCG(seed, 0))
	pauses := make([][]time.Duration, len(nss)) // drawn here: rand.Rand is not safe for concurrent use
	for i := range pauses {
		for range 2 * 15 {
			pauses[i] = append(pauses[i], time.Duration(rnd.IntN(300))*time.Millisecond)
		}
	}
	// Every informer the view holds, sampled every few milliseconds while
	// the namespaces flip and until the view has caught up.
	var mu sync.Mutex
	seen := map[weak.Pointer[kinformer.Informer[*corev1.ConfigMap]]]bool{}
	stop := make(chan struct{})
	var sampler, flippers sync.WaitGroup
	sampler.Go(func() {
		for {
			for _, inf := range v.Informers() {
				mu.Lock()
				seen[weak.Make(inf)] = true
				mu.Unlock()
			}
			select {
			case <-stop:
				return
			case <-time.After(2 * time.Millisecond):
			}
		}
	})
	for i, ns := range nss {
		flippers.Go(func() {
			for j, pause := range pauses[i] {
				value := tenant // even steps join, odd ones leave
				if j%2 == 1 {
					value = ""
				}
				// Under a context that outlives the call, as a test's
				// (bounded) do: their timers kept the runtime from cleaning
				// its timer heap, which is what showed a stopped watch's
				// deadline timer holding its informer.
				if err := testenv.SetNamespaceLabel(bounded(t, callTimeout), srv.Config(), ns, "kinformer.test/tenant", value); err != nil {
					t.Error(err)
					return
				}
				time.Sleep(pause)
			}
		})
	}
	flippers.Wait()
	if t.Failed() {
		close(stop)
		sampler.Wait()
		return
	}
	eventually(t, callTimeout, "every namespace to leave", func() bool {
		return len(v.Informers()) == 0 && len(v.Namespaces()) == 0
	})
	close(stop)
	sampler.Wait()
	// Not vacuous: the informers seen are most of those the view made (a
	// join within a sample's few milliseconds may be missed, and a join
	// before the last leave's release may take the same informer again).
	joins := 0
	logs.mu.Lock()
	for _, line := range *logs.lines {
		if strings.HasPrefix(line, "kinformer: a namespace joined the view") {
			joins++
		}
	}
	logs.mu.Unlock()
	if len(seen) < joins/3 || len(seen) < len(nss) {
		t.Fatalf("%d informers seen over %d joins: the sampler missed most of them", len(seen), joins)
	}
	// Freed within seconds. (A stopped watch's deadline timer held its
	// reader, and through it the informer, until the runtime cleaned its
	// timer heap: here, when these patches' 30-second contexts ran out,
	// 3 to 29 s after the last leave in half the runs.)
	const freeTimeout = 10 * time.Second
	out := time.Now()
	for {
		runtime.GC()
		var alive []*kinformer.Informer[*corev1.ConfigMap]
		for w := range seen {
			if inf := w.Value(); inf != nil && !slices.Contains(alive, inf) {
				alive = append(alive, inf)
			}
		}
		if len(alive) == 0 {
			t.Logf("%d informers seen over %d joins, all freed %v after the last left; %d events", len(seen), joins, time.Since(out).Round(time.Millisecond), events.Load())
			return
		}
		if time.Since(out) > freeTimeout {
			reportAlive(t, f, alive)
			t.Fatalf("%d informers that left are not freed %v after the last left", len(alive), freeTimeout)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// statefulView is a view over two namespaces, nsA and nsB, with a
// ConfigMap each, made by a Factory that keeps state files in a
// directory; files lists them. It has synced, and each namespace's
// informer has written its file.
type statefulView struct {
	f        *kinformer.Factory
	v        *kinformer.View[*corev1.ConfigMap]
	nsA, nsB string
	files    func() []string
}

func newStatefulView(t *testing.T, opts *kinformer.Options[*corev1.ConfigMap]) statefulView {
	t.Helper()
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	s := statefulView{nsA: testenv.NewNamespace(t, srv.Config()), nsB: testenv.NewNamespace(t, srv.Config())}
	mustCreate(t, c, configMap(s.nsA, "a1", nil, "1"))
	mustCreate(t, c, configMap(s.nsB, "b1", nil, "1"))
	dir := t.TempDir()
	s.f = kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{StateDir: dir})
	t.Cleanup(s.f.Stop)
	v, err := kinformer.SharedView[*corev1.ConfigMap](s.f, kinformer.Namespaces{Names: []string{s.nsA, s.nsB}}, opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(v.Close)
	s.v = v
	s.f.Start()
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	s.files = func() []string {
		m, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
		return m
	}
	eventually(t, callTimeout, "a state file per namespace", func() bool { return len(s.files()) == 2 })
	return s
}

// With a StateDir, a namespace that leaves a view takes its state file
// with it once its informer has stopped (it would otherwise stay for
// good: no informer uses it, and prune keeps it); one that joins again
// lists, and has a file again. Closing the view keeps the files, for the
// next start.
func TestSharedViewLeaveRemovesStateFile(t *testing.T) {
	s := newStatefulView(t, nil)
	v, nsB, files := s.v, s.nsB, s.files
	both := files()

	if err := v.RemoveNamespace(nsB); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, nsB+"'s state file removed as it left", func() bool { return len(files()) == 1 })

	if err := v.AddNamespace(nsB); err != nil {
		t.Fatal(err)
	}
	if err := v.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if _, ok := v.GetNamespaced(nsB, "b1"); !ok {
		t.Fatalf("b1 not listed after %s joined again", nsB)
	}
	eventually(t, callTimeout, nsB+"'s state file made again as it joined", func() bool { return slices.Equal(files(), both) })

	v.Close()
	if got := files(); !slices.Equal(got, both) {
		t.Errorf("after Close: state files %v, want %v kept", got, both)
	}
}

// A namespace's informer that a consumer's wider Fields made leave its
// state file for one named for the union (a re-list) has written two
// files; when the namespace leaves the view, both go with it, not only the
// one in use at the end.
func TestSharedViewLeaveRemovesWidenedStateFiles(t *testing.T) {
	s := newStatefulView(t, &kinformer.Options[*corev1.ConfigMap]{Fields: []string{"data"}, StateInterval: 10 * time.Millisecond})
	f, v, nsA, nsB, files := s.f, s.v, s.nsA, s.nsB, s.files
	before := files()

	// A consumer of nsB's informer asks for the labels too: the informer
	// re-lists under the union, into a file named for it.
	wide, err := kinformer.Shared[*corev1.ConfigMap](f, nsB, &kinformer.Options[*corev1.ConfigMap]{Fields: []string{"metadata.labels"}, StateInterval: 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, nsB+"'s file for the wider fields", func() bool { return len(files()) == 3 })
	kinformer.Release(f, wide)

	if err := v.RemoveNamespace(nsB); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, nsB+"'s two state files removed as it left", func() bool { return len(files()) == 1 })
	if got := files(); !slices.Contains(before, got[0]) {
		t.Fatalf("left %v; want %s's file of %v", got, nsA, before)
	}
}
