package integration

import (
	"context"
	"fmt"
	"log/slog"
	"sort"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/sharding"
)

const shardGate = "--feature-gates=ShardedListAndWatch=true"

// ownership records, per object, when each replica's handlers started and
// stopped owning it: from entering its first Added (or any event when not
// owned) to returning from a Deleted. No two replicas' intervals for one
// object may overlap.
type ownership struct {
	mu        sync.Mutex
	open      map[string]map[string]time.Time // key -> replica -> since
	intervals map[string][]interval           // key -> closed intervals
	inCall    map[string]string               // key -> replica whose handler runs for it
	overlaps  []string
}

type interval struct {
	replica    string
	start, end time.Time
}

func newOwnership() *ownership {
	return &ownership{open: map[string]map[string]time.Time{}, intervals: map[string][]interval{}, inCall: map[string]string{}}
}

// handler returns replica's handler: it records ownership and checks that
// no other replica's handler is running for the same object at once.
func (o *ownership) handler(replica string) func(kinformer.Event[*corev1.ConfigMap]) {
	return func(e kinformer.Event[*corev1.ConfigMap]) {
		if e.Type != kinformer.Added && e.Type != kinformer.Modified && e.Type != kinformer.Deleted {
			return
		}
		key := e.Key
		o.mu.Lock()
		if other, ok := o.inCall[key]; ok && other != replica {
			o.overlaps = append(o.overlaps, fmt.Sprintf("%s: handlers of %s and %s ran at once", key, other, replica))
		}
		o.inCall[key] = replica
		if o.open[key] == nil {
			o.open[key] = map[string]time.Time{}
		}
		if _, ok := o.open[key][replica]; !ok && e.Type != kinformer.Deleted {
			for other := range o.open[key] {
				o.overlaps = append(o.overlaps, fmt.Sprintf("%s: %s started (%s, %s) while %s owned it", key, replica, e.Type, e.Cause, other))
			}
			o.open[key][replica] = time.Now()
		}
		o.mu.Unlock()
		time.Sleep(200 * time.Microsecond) // a handler that takes time: overlaps would show
		o.mu.Lock()
		delete(o.inCall, key)
		if e.Type == kinformer.Deleted {
			if since, ok := o.open[key][replica]; ok {
				o.intervals[key] = append(o.intervals[key], interval{replica, since, time.Now()})
				delete(o.open[key], replica)
			}
		}
		o.mu.Unlock()
	}
}

func (o *ownership) check(t *testing.T) {
	t.Helper()
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, s := range o.overlaps[:min(len(o.overlaps), 10)] {
		t.Error(s)
	}
	if len(o.overlaps) > 0 {
		t.Fatalf("%d overlaps of ownership", len(o.overlaps))
	}
}

// testWriter sends a replica's log lines to the test's log.
type testWriter struct {
	t  *testing.T
	id string
}

func (w testWriter) Write(p []byte) (int, error) {
	w.t.Logf("%s: %s", w.id, strings.TrimSpace(string(p)))
	return len(p), nil
}

// replica is one member of a shard group in this process: its Sharding
// and one ConfigMaps informer.
type replica struct {
	id     string
	sh     *sharding.Sharding
	inf    *kinformer.Informer[*corev1.ConfigMap]
	bytes  *bytesRead
	cancel context.CancelFunc // stops the Sharding (which gives the share up), then the informer
	done   chan struct{}
}

func startReplica(t *testing.T, cfg *rest.Config, ns, group, id string, own *ownership) *replica {
	t.Helper()
	return startReplicaWith(t, cfg, ns, group, id, own, "", nil, nil)
}

// startReplicaWith is startReplica with a state directory (Options.StateDir;
// "" for none), a second handler (nil for none) and a change to the
// Sharding's options (nil for none).
func startReplicaWith(t *testing.T, cfg *rest.Config, ns, group, id string, own *ownership, stateDir string,
	extra func(kinformer.Event[*corev1.ConfigMap]), shOpts func(*sharding.Options)) *replica {
	t.Helper()
	r := &replica{id: id, bytes: &bytesRead{}, done: make(chan struct{})}
	opts := sharding.Options{
		Group: group, Namespace: ns, Identity: id,
		LeaseDuration: 4 * time.Second, RenewPeriod: 500 * time.Millisecond,
		Logger: slog.New(slog.NewTextHandler(testWriter{t, id}, &slog.HandlerOptions{Level: slog.LevelWarn})),
	}
	if shOpts != nil {
		shOpts(&opts)
	}
	r.sh = sharding.New(cfg, opts)
	c, err := kubernetes.NewForConfig(r.bytes.wrap(cfg))
	if err != nil {
		t.Fatal(err)
	}
	r.inf = kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(ns), variant(&kinformer.Options[*corev1.ConfigMap]{Sharding: r.sh, Name: "configmaps-" + id,
		PageSize: 20, // lists of the slots that join a share take pages
		StateDir: stateDir,
		Logger:   slog.New(slog.NewTextHandler(testWriter{t, id}, &slog.HandlerOptions{Level: slog.LevelInfo}))}))
	inVariant(t, r.inf.Cache())
	r.inf.AddHandler(own.handler(id))
	if extra != nil {
		r.inf.AddHandler(extra)
	}
	shCtx, shCancel := context.WithCancel(context.Background())
	infCtx, infCancel := context.WithCancel(context.Background())
	shDone := make(chan struct{})
	r.cancel = func() {
		shCancel()
		<-shDone
		infCancel()
	}
	go func() { defer close(shDone); _ = r.sh.Run(shCtx) }()
	go func() { defer close(r.done); _ = r.inf.Run(infCtx) }()
	t.Cleanup(r.stop)
	return r
}

func (r *replica) stop() {
	r.cancel()
	<-r.done
}

// checkPartition waits until the replicas' caches are disjoint and their
// union is the server's state, and returns each one's share of objects.
func checkPartition(t *testing.T, c kubernetes.Interface, ns string, rs []*replica, timeout time.Duration) map[string]int {
	t.Helper()
	var last string
	deadline := time.Now().Add(timeout)
	for {
		want := serverState(t, c, ns, metav1.ListOptions{})
		union := map[string]string{}
		counts := map[string]int{}
		problem := ""
		for _, r := range rs {
			if !r.inf.HasSynced() {
				problem = r.id + " not synced"
				break
			}
			for k, v := range cacheState(r.inf.Cache()) {
				if _, dup := union[k]; dup {
					problem = fmt.Sprintf("%s cached by two replicas", k)
				}
				union[k] = v
				counts[r.id]++
			}
		}
		if problem == "" && !sameState(union, want) {
			problem = fmt.Sprintf("union of %d objects differs from the server's %d", len(union), len(want))
		}
		if problem == "" {
			return counts
		}
		if problem != last {
			t.Logf("waiting: %s", problem)
			last = problem
		}
		if time.Now().After(deadline) {
			for _, r := range rs {
				t.Logf("%s: %+v %+v", r.id, r.sh.Status(), r.inf.ShardStatus())
			}
			t.Fatalf("no partition after %v: %s", timeout, problem)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

func TestShardingServerSide(t *testing.T) {
	srv := testenv.New(t, testenv.WithAPIServerArgs(shardGate)) // one server for both ways
	bothWays(t, func(t *testing.T) { testSharding(t, srv.Config(), "server") })
}

func TestShardingClientSide(t *testing.T) {
	bothWays(t, testShardingClientSide)
}

func testShardingClientSide(t *testing.T) {
	srv := testenv.Shared(t)
	testSharding(t, srv.Config(), "client")
}

// Three replicas split 300 ConfigMaps: disjoint caches whose union is the
// server's, none above 60 %; the mode is what the server offers, and with
// the server filtering each reads at most 0.7x an unsharded informer's
// bytes. A fourth joins under write load and gets a share; one leaves and
// its share is taken over; no object is ever owned by two replicas.
func testSharding(t *testing.T, cfg *rest.Config, mode string) {
	ns := testenv.NewNamespace(t, cfg)
	c := clientset(t, cfg)
	const n = 300
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, strings.Repeat("x", 512)))
	}
	// An unsharded informer's bytes, for comparison.
	full := &bytesRead{}
	fc, err := kubernetes.NewForConfig(full.wrap(cfg))
	if err != nil {
		t.Fatal(err)
	}
	fi := kinformer.New[*corev1.ConfigMap](fc.CoreV1().ConfigMaps(ns), variant[*corev1.ConfigMap](nil))
	fctx, fcancel := context.WithCancel(context.Background())
	fdone := make(chan struct{})
	go func() { defer close(fdone); _ = fi.Run(fctx) }()
	if err := fi.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	fcancel()
	<-fdone

	own := newOwnership()
	group := "g-" + mode
	rs := []*replica{
		startReplica(t, cfg, ns, group, "replica-a", own),
		startReplica(t, cfg, ns, group, "replica-b", own),
		startReplica(t, cfg, ns, group, "replica-c", own),
	}
	counts := checkPartition(t, c, ns, rs, 60*time.Second)
	t.Logf("shares: %v", counts)
	for id, k := range counts {
		if k > n*60/100 {
			t.Errorf("%s holds %d of %d objects", id, k, n)
		}
	}
	for _, r := range rs {
		if got := r.inf.ShardStatus().Mode; got != mode {
			t.Errorf("%s: mode %q, want %q", r.id, got, mode)
		}
	}
	if mode == "server" {
		// The unsharded informer's list was one; a replica may have listed
		// more than once while the shares settled, so compare its last
		// list's worth: the whole of its reading, bounded.
		for _, r := range rs {
			ratio := float64(r.bytes.n.Load()) / float64(full.n.Load())
			t.Logf("%s read %d bytes, %.2fx an unsharded informer's %d", r.id, r.bytes.n.Load(), ratio, full.n.Load())
			if ratio > 0.7 {
				t.Errorf("%s read %.2fx the bytes of an unsharded informer", r.id, ratio)
			}
		}
	}

	// A fourth replica joins while ConfigMaps are updated.
	stopWrites := make(chan struct{})
	var writes sync.WaitGroup
	writes.Add(1)
	go func() {
		defer writes.Done()
		for i := 0; ; i++ {
			select {
			case <-stopWrites:
				return
			default:
			}
			ctx, cancel := context.WithTimeout(context.Background(), callTimeout)
			name := fmt.Sprintf("cm-%03d", i%n)
			_, err := c.CoreV1().ConfigMaps(ns).Update(ctx, configMap(ns, name, nil, fmt.Sprint("v", i)), metav1.UpdateOptions{})
			cancel()
			if err != nil && t.Context().Err() == nil {
				t.Errorf("update %s: %v", name, err)
				return
			}
			time.Sleep(5 * time.Millisecond)
		}
	}()
	rs = append(rs, startReplica(t, cfg, ns, group, "replica-d", own))
	eventually(t, 60*time.Second, "replica-d gets a share", func() bool { return rs[3].inf.Cache().Len() > 0 })
	time.Sleep(time.Second) // the others give replica-d its share under the writes

	// replica-b leaves (its Lease deleted) while the writes go on: the
	// others take its share, listing the slots that joined theirs at their
	// watch's resourceVersion and watching on from it.
	rs[1].stop()
	time.Sleep(time.Second)
	close(stopWrites)
	writes.Wait()
	rest := []*replica{rs[0], rs[2], rs[3]}
	counts = checkPartition(t, c, ns, rest, 30*time.Second)
	t.Logf("shares after replica-b left: %v", counts)
	if rs[1].inf.Cache().Len() != 0 {
		t.Errorf("replica-b still caches %d objects after leaving", rs[1].inf.Cache().Len())
	}
	own.check(t)
	// Every reshard event names its cause.
	keys := make([]string, 0)
	own.mu.Lock()
	for k := range own.intervals {
		keys = append(keys, k)
	}
	own.mu.Unlock()
	sort.Strings(keys)
	if len(keys) == 0 {
		t.Error("no object ever changed hands")
	}
}

// A replica cut off from the API server for longer than its LeaseDuration
// stops handling its share (its handlers get Deleted, CauseReshard) before
// the others, which count it dead only then, start on it; once it can
// reach the server again it rejoins and gets a share back.
func TestShardingLeaseLoss(t *testing.T) {
	bothWays(t, testShardingLeaseLoss)
}

func testShardingLeaseLoss(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	ns := testenv.NewNamespace(t, cfg)
	c := clientset(t, cfg)
	const n = 150
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "v"))
	}
	own := newOwnership()
	p := newFaultProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
	a := startReplica(t, cfg, ns, "g", "replica-a", own)
	b := startReplica(t, cfg, ns, "g", "replica-b", own)
	x := startReplica(t, p.config(t, cfg), ns, "g", "replica-x", own)
	all := []*replica{a, b, x}
	counts := checkPartition(t, c, ns, all, 60*time.Second)
	t.Logf("shares: %v", counts)
	if counts["replica-x"] == 0 {
		t.Fatal("replica-x got no share")
	}

	p.hold() // partitioned: nothing reaches the server, nothing comes back
	cutAt := time.Now()
	counts = checkPartition(t, c, ns, []*replica{a, b}, 4*time.Second+15*time.Second)
	took := time.Since(cutAt)
	t.Logf("replica-x's share taken over %v after the partition: %v", took.Round(time.Millisecond), counts)
	if n := x.inf.Cache().Len(); n != 0 {
		t.Errorf("replica-x, cut off, still caches %d objects", n)
	}
	if st := x.sh.Status(); !st.Fenced || st.LastError == nil || time.Since(st.RenewedAt) < 3*time.Second {
		t.Errorf("replica-x does not say it is fenced, why, and since when: %+v", st)
	}
	own.check(t)

	p.release(true)
	eventually(t, 60*time.Second, "replica-x to get a share back", func() bool { return x.inf.Cache().Len() > 0 })
	counts = checkPartition(t, c, ns, all, 60*time.Second)
	t.Logf("shares after the partition healed: %v", counts)
	if counts["replica-x"] == 0 {
		t.Error("replica-x got no share back")
	}
	if st := x.sh.Status(); st.Fenced || st.LastError != nil {
		t.Errorf("replica-x, back, still says it is fenced or failing: %+v", st)
	}
	own.check(t)
}

// A replica restarted with the same identity and state directory restores
// its snapshot for the share it gets back: its handlers get Added
// (CauseRestore) for the objects of its share, then only what changed,
// not the whole share again.
func TestShardingDurableRestart(t *testing.T) {
	bothWays(t, testShardingDurableRestart)
}

func testShardingDurableRestart(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	ns := testenv.NewNamespace(t, cfg)
	c := clientset(t, cfg)
	const n = 200
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "v"))
	}
	own := newOwnership()
	dir := t.TempDir()
	start := func(rec *recorder[*corev1.ConfigMap]) *replica {
		return startReplicaWith(t, cfg, ns, "g", "replica-b", own, dir, rec.handle, nil)
	}
	a := startReplica(t, cfg, ns, "g", "replica-a", own)
	first := &recorder[*corev1.ConfigMap]{}
	b := start(first)
	counts := checkPartition(t, c, ns, []*replica{a, b}, 60*time.Second)
	t.Logf("shares: %v", counts)
	share := counts["replica-b"]
	if share == 0 {
		t.Fatal("replica-b got no share")
	}
	var changed string // an object of replica-b's share, changed while it is down
	for k := range cacheState(b.inf.Cache()) {
		changed = k
		break
	}
	b.stop()
	checkPartition(t, c, ns, []*replica{a}, 30*time.Second)
	mustUpdate(t, c, ns, changed, "changed")

	again := &recorder[*corev1.ConfigMap]{}
	b = start(again)
	eventually(t, 60*time.Second, "replica-b to get its share back", func() bool { return b.inf.Cache().Len() > 0 })
	counts = checkPartition(t, c, ns, []*replica{a, b}, 60*time.Second)
	t.Logf("shares after the restart: %v", counts)
	restored, listed := 0, 0
	for _, e := range again.all() {
		if e.Type != kinformer.Added {
			continue
		}
		switch e.Cause {
		case kinformer.CauseRestore:
			restored++
		default:
			listed++
		}
	}
	t.Logf("after the restart: %d Added from the snapshot, %d from the server", restored, listed)
	if _, ok := cacheState(b.inf.Cache())[changed]; ok {
		found := false
		for _, e := range again.all() {
			found = found || (e.Type == kinformer.Modified && e.Object.GetName() == changed)
		}
		if !found {
			t.Errorf("%s changed while replica-b was down, and replica-b, which holds it again, got no Modified", changed)
		}
	}
	if restored < counts["replica-b"]/2 {
		t.Errorf("only %d of replica-b's %d objects came from its snapshot", restored, counts["replica-b"])
	}
	if listed > counts["replica-b"]/2 {
		t.Errorf("%d of replica-b's %d objects were Added from the server again", listed, counts["replica-b"])
	}
	own.check(t)
}

// A Factory with FactoryOptions.Sharding shards every informer it makes:
// two replicas, each a factory over ConfigMaps and Secrets with one
// Sharding, split both resources.
func TestShardingFactory(t *testing.T) {
	bothWays(t, testShardingFactory)
}

func testShardingFactory(t *testing.T) {
	srv := testenv.Shared(t)
	cfg := srv.Config()
	ns := testenv.NewNamespace(t, cfg)
	c := clientset(t, cfg)
	const n = 60
	for i := range n {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "v"))
		s := &corev1.Secret{ObjectMeta: metav1.ObjectMeta{Namespace: ns, Name: fmt.Sprintf("s-%03d", i)}, StringData: map[string]string{"k": "v"}}
		if _, err := c.CoreV1().Secrets(ns).Create(bounded(t, callTimeout), s, metav1.CreateOptions{}); err != nil {
			t.Fatal(err)
		}
	}
	type member struct {
		cms     *kinformer.Informer[*corev1.ConfigMap]
		secrets *kinformer.Informer[*corev1.Secret]
	}
	var members []member
	for _, id := range []string{"f-a", "f-b"} {
		sh := sharding.New(cfg, sharding.Options{Group: "factory", Namespace: ns, Identity: id,
			LeaseDuration: 4 * time.Second, RenewPeriod: 500 * time.Millisecond})
		f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Sharding: sh})
		cms, err := kinformer.Shared[*corev1.ConfigMap](f, ns, variant[*corev1.ConfigMap](nil))
		if err != nil {
			t.Fatal(err)
		}
		secrets, err := kinformer.Shared[*corev1.Secret](f, ns, variant[*corev1.Secret](nil))
		if err != nil {
			t.Fatal(err)
		}
		inVariant(t, cms.Cache())
		inVariant(t, secrets.Cache())
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = sh.Run(ctx) }()
		f.Start()
		t.Cleanup(func() { cancel(); <-done; f.Stop() })
		members = append(members, member{cms, secrets})
	}
	eventually(t, 60*time.Second, "both resources split between the two factories", func() bool {
		cmKeys, secretKeys := map[string]int{}, map[string]int{}
		for _, m := range members {
			if !m.cms.HasSynced() || !m.secrets.HasSynced() || m.cms.Cache().Len() == 0 || m.secrets.Cache().Len() == 0 {
				return false
			}
			for _, k := range m.cms.Cache().ListKeys() {
				cmKeys[k]++
			}
			for _, k := range m.secrets.Cache().ListKeys() {
				secretKeys[k]++
			}
		}
		for _, v := range cmKeys {
			if v != 1 {
				return false
			}
		}
		for _, v := range secretKeys {
			if v != 1 {
				return false
			}
		}
		return len(cmKeys) == n && len(secretKeys) >= n // the namespace may hold a service-account token secret too
	})
	for i, m := range members {
		if st := m.secrets.ShardStatus(); !st.Sharded || st.Mode != "client" || st.Slots == 0 {
			t.Errorf("member %d: secrets' shard status %+v", i, st)
		}
	}
}
