package kinformer

// A simulation of shard groups in a synctest bubble: replicas join, leave,
// die and are cut off from a linearizable in-memory Lease store (the API
// server and etcd stand-in, with request latency), on a fake clock. At
// every millisecond no slot may be owned by two valid replicas, and once
// membership settles every slot is owned by exactly one.

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	coordinationv1 "k8s.io/api/coordination/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/runtime/schema"
	coordclient "k8s.io/client-go/kubernetes/typed/coordination/v1"

	"github.com/kinformer/kinformer/internal/slots"
)

var leasesGR = schema.GroupResource{Group: "coordination.k8s.io", Resource: "leases"}

// leaseStore is a linearizable store of Leases: each call takes effect
// at one instant, under mu, between its request and response delays.
type leaseStore struct {
	mu    sync.Mutex
	rv    int64
	items map[string]*coordinationv1.Lease
}

// leaseClient is one replica's connection to the store; down cuts it off.
type leaseClient struct {
	coordclient.LeaseInterface // not implemented: panics if called
	st                         *leaseStore
	down                       atomic.Bool
	slow                       atomic.Int64 // extra request delay, if set (a slow server)
	rnd                        func() time.Duration
	// stall, if set, is called before each Get, Create, Update and List:
	// the calls Run makes on its own goroutine (Delete is also made by
	// other goroutines), so that a stall there stalls Run.
	stall func()
}

func (c *leaseClient) stallRun() {
	if c.stall != nil {
		c.stall()
	}
}

var errCut = fmt.Errorf("connection refused")

// call runs op after a request delay and returns after a response delay;
// a cut connection fails (and its request may or may not have landed).
func (c *leaseClient) call(ctx context.Context, op func() error) error {
	if c.down.Load() {
		time.Sleep(c.rnd())
		return errCut
	}
	time.Sleep(c.rnd() + time.Duration(c.slow.Load()))
	c.st.mu.Lock()
	err := op()
	c.st.mu.Unlock()
	time.Sleep(c.rnd())
	if c.down.Load() || ctx.Err() != nil {
		return errCut // landed, but the answer was lost
	}
	return err
}

func (c *leaseClient) Get(ctx context.Context, name string, _ metav1.GetOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		l, ok := c.st.items[name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, name)
		}
		out = l.DeepCopy()
		return nil
	})
	return out, err
}

func (c *leaseClient) Create(ctx context.Context, l *coordinationv1.Lease, _ metav1.CreateOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		if _, ok := c.st.items[l.Name]; ok {
			return apierrors.NewAlreadyExists(leasesGR, l.Name)
		}
		c.st.rv++
		n := l.DeepCopy()
		n.ResourceVersion = fmt.Sprint(c.st.rv)
		c.st.items[l.Name] = n
		out = n.DeepCopy()
		return nil
	})
	return out, err
}

func (c *leaseClient) Update(ctx context.Context, l *coordinationv1.Lease, _ metav1.UpdateOptions) (out *coordinationv1.Lease, err error) {
	c.stallRun()
	err = c.call(ctx, func() error {
		cur, ok := c.st.items[l.Name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, l.Name)
		}
		if cur.ResourceVersion != l.ResourceVersion {
			return apierrors.NewConflict(leasesGR, l.Name, fmt.Errorf("stale resourceVersion"))
		}
		c.st.rv++
		n := l.DeepCopy()
		n.ResourceVersion = fmt.Sprint(c.st.rv)
		c.st.items[l.Name] = n
		out = n.DeepCopy()
		return nil
	})
	return out, err
}

func (c *leaseClient) List(ctx context.Context, opts metav1.ListOptions) (out *coordinationv1.LeaseList, err error) {
	c.stallRun()
	sel, err := labels.Parse(opts.LabelSelector)
	if err != nil {
		return nil, err
	}
	err = c.call(ctx, func() error {
		out = &coordinationv1.LeaseList{}
		for _, l := range c.st.items {
			if sel.Matches(labels.Set(l.Labels)) {
				out.Items = append(out.Items, *l.DeepCopy())
			}
		}
		return nil
	})
	return out, err
}

func (c *leaseClient) Delete(ctx context.Context, name string, opts metav1.DeleteOptions) error {
	return c.call(ctx, func() error {
		l, ok := c.st.items[name]
		if !ok {
			return apierrors.NewNotFound(leasesGR, name)
		}
		if p := opts.Preconditions; p != nil && p.ResourceVersion != nil && *p.ResourceVersion != l.ResourceVersion {
			return apierrors.NewConflict(leasesGR, name, fmt.Errorf("precondition failed"))
		}
		delete(c.st.items, name)
		return nil
	})
}

// simReplica is a replica: its Sharding, and an informer stand-in that
// applies each share as the loop does (a shrink handled after a drain
// delay, a growth after a list delay) and says what it owns.
type simReplica struct {
	id     string
	sh     *Sharding
	client *leaseClient
	pause  atomic.Int64 // Run stalls this long before its next request
	fast   atomic.Bool  // handlers drain at once (a leave that must not time out)
	cancel context.CancelFunc
	done   chan struct{}

	mu    sync.Mutex
	owned *slots.Set // slots whose objects its handlers may be handling
	dead  bool
}

func (r *simReplica) owns(slot int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.dead && r.owned.Contains(slot) && r.sh.valid()
}

// simLog keeps the replicas' log lines, for a failure's story.
type simLog struct {
	mu    sync.Mutex
	lines []string
}

func (l *simLog) Write(p []byte) (int, error) {
	l.mu.Lock()
	l.lines = append(l.lines, time.Now().Format("05.000")+" "+strings.TrimSpace(string(p)))
	l.mu.Unlock()
	return len(p), nil
}

func (l *simLog) add(format string, args ...any) { fmt.Fprintf(l, format, args...) }

func startSim(st *leaseStore, id string, rnd *rand.Rand, rmu *sync.Mutex, log *simLog, ld time.Duration) *simReplica {
	delay := func(max time.Duration) func() time.Duration {
		return func() time.Duration {
			rmu.Lock()
			defer rmu.Unlock()
			return time.Duration(rnd.Int64N(int64(max)))
		}
	}
	r := &simReplica{id: id, client: &leaseClient{st: st, rnd: delay(30 * time.Millisecond)}, done: make(chan struct{})}
	r.sh = newSharding(r.client, ShardingOptions{Group: "g", Namespace: "ns", Identity: id,
		LeaseDuration: ld, RenewPeriod: 400 * time.Millisecond, Slots: 16,
		Logger: slog.New(slog.NewTextHandler(log, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
			if a.Key == "time" || a.Key == "shardGroup" || a.Key == "level" {
				return slog.Attr{}
			}
			return a
		}}))})
	r.owned = slots.New(16)
	r.client.stall = func() {
		if d := r.pause.Swap(0); d > 0 {
			log.add("%s: Run stalls for %v", id, time.Duration(d))
			time.Sleep(time.Duration(d))
		}
	}
	ctx, cancel := context.WithCancel(context.Background())
	r.cancel = cancel
	sub := r.sh.subscribe()
	var wg sync.WaitGroup
	wg.Add(2)
	go func() { defer wg.Done(); _ = r.sh.Run(ctx) }()
	go func() {
		defer wg.Done()
		defer sub.close()
		work := delay(time.Second)
		var ver uint64
		for {
			set, v, changed, ready := sub.current()
			if ready && v != ver {
				r.mu.Lock()
				old := r.owned
				r.owned = old.Union(set) // the lost slots are still being handled
				r.mu.Unlock()
				if !r.fast.Load() {
					time.Sleep(work()) // handlers drain the Deleted events (or a list runs)
				}
				r.mu.Lock()
				r.owned = set
				r.mu.Unlock()
				log.add("%s: applied v%d %s", id, v, set)
				ver = v
				sub.ack(v)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	}()
	go func() { wg.Wait(); close(r.done) }()
	return r
}

// kill ends the replica without a goodbye: cut off, its handlers gone.
func (r *simReplica) kill() {
	r.mu.Lock()
	r.dead = true
	r.mu.Unlock()
	r.client.down.Store(true)
	r.cancel()
	<-r.done
}

func (r *simReplica) leave() {
	r.cancel()
	<-r.done
	r.mu.Lock()
	r.dead = true
	r.mu.Unlock()
}

func TestShardingSimulation(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) { simulate(t, seed) })
		})
	}
}

func simulate(t *testing.T, seed uint64) {
	st := &leaseStore{items: map[string]*coordinationv1.Lease{}}
	rnd := rand.New(rand.NewPCG(seed, 7))
	// Odd seeds: a LeaseDuration of a fraction of seconds (the Lease says
	// whole seconds).
	ld := 2 * time.Second
	if seed%2 == 1 {
		ld = 2900 * time.Millisecond
	}
	var rmu sync.Mutex
	log := &simLog{}
	defer func() {
		if t.Failed() {
			log.mu.Lock()
			for _, l := range log.lines[max(0, len(log.lines)-150):] {
				t.Log(l)
			}
			log.mu.Unlock()
		}
	}()
	var live []*simReplica
	next := 0
	join := func() {
		live = append(live, startSim(st, fmt.Sprintf("r%02d", next), rnd, &rmu, log, ld))
		next++
	}
	var violations []string
	check := func() {
		for slot := range 16 {
			var owners []string
			for _, r := range live {
				if r.owns(slot) {
					owners = append(owners, r.id)
				}
			}
			if len(owners) > 1 {
				violations = append(violations, fmt.Sprintf("%v: slot %d owned by %v", time.Now().Format("05.000"), slot, owners))
				log.add("VIOLATION slot %d owned by %v", slot, owners)
				t.Errorf("%v: slot %d owned by %v", time.Now().Format("05.000"), slot, owners)
				t.FailNow()
			}
		}
	}
	run := func(d time.Duration) {
		for end := time.Now().Add(d); time.Now().Before(end); {
			time.Sleep(time.Millisecond)
			check()
		}
	}
	settled := func(what string) {
		t.Helper()
		// Everyone reachable and alive: within a few LeaseDurations every
		// slot has exactly one owner.
		for i := 0; ; i++ {
			run(100 * time.Millisecond)
			missing := -1
			for slot := range 16 {
				n := 0
				for _, r := range live {
					if r.owns(slot) {
						n++
					}
				}
				if n != 1 {
					missing = slot
				}
			}
			if missing < 0 {
				return
			}
			if i > 100 {
				t.Fatalf("%s: slot %d has no single owner 10 s later", what, missing)
			}
		}
	}
	for range 3 {
		join()
	}
	settled("three start")
	join()
	settled("a fourth joins")

	for step := range 60 {
		rmu.Lock()
		k := rnd.IntN(7)
		rmu.Unlock()
		switch {
		case k == 0 && len(live) < 6:
			join()
		case k == 1 && len(live) > 2:
			r := live[0]
			live = live[1:]
			log.add("%s leaves", r.id)
			r.leave()
		case k == 2 && len(live) > 2:
			r := live[len(live)-1]
			live = live[:len(live)-1]
			log.add("%s killed", r.id)
			r.kill()
		case k == 3:
			rmu.Lock()
			r := live[rnd.IntN(len(live))]
			cut := time.Duration(rnd.Int64N(int64(4 * time.Second)))
			rmu.Unlock()
			log.add("%s cut off for %v", r.id, cut)
			r.client.down.Store(true)
			run(cut)
			r.client.down.Store(false)
			log.add("%s reconnected", r.id)
		case k == 4:
			// A slow server: requests take up to most of a RenewPeriod.
			rmu.Lock()
			r := live[rnd.IntN(len(live))]
			slow := time.Duration(rnd.Int64N(int64(380 * time.Millisecond)))
			d := time.Duration(rnd.Int64N(int64(4 * time.Second)))
			rmu.Unlock()
			log.add("%s: server slow by %v for %v", r.id, slow, d)
			r.client.slow.Store(int64(slow))
			run(d)
			r.client.slow.Store(0)
		case k == 5:
			// Run stalls (a pause of its goroutine) for up to twice the
			// LeaseDuration.
			rmu.Lock()
			r := live[rnd.IntN(len(live))]
			d := time.Duration(rnd.Int64N(int64(2 * ld)))
			rmu.Unlock()
			r.pause.Store(int64(d))
			run(d + 100*time.Millisecond)
		default:
			run(500 * time.Millisecond)
		}
		run(50 * time.Millisecond)
		if step%10 == 9 {
			settled(fmt.Sprint("step ", step))
		}
	}
	settled("the end")
	// Leases of killed replicas are deleted once long expired (10
	// LeaseDurations); the others delete their own as they leave.
	run(25 * time.Second)
	st.mu.Lock()
	for name, l := range st.items {
		alive := false
		for _, r := range live {
			alive = alive || *l.Spec.HolderIdentity == r.id
		}
		if !alive {
			t.Errorf("the Lease %s of a dead replica is still there", name)
		}
	}
	st.mu.Unlock()
	for _, r := range live {
		r.fast.Store(true)
		r.leave()
	}
	if n := len(st.items); n != 0 {
		t.Errorf("%d Leases left after every replica left", n)
	}
}

// ShardingOptions.Metrics: members, slots, fenced, renewals and share
// changes move with a replica cut off and back.
func TestShardingMetrics(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		reg := prometheus.NewRegistry()
		m, err := NewMetrics(reg)
		if err != nil {
			t.Fatal(err)
		}
		st := &leaseStore{items: map[string]*coordinationv1.Lease{}}
		c := &leaseClient{st: st, rnd: func() time.Duration { return time.Millisecond }}
		sh := newSharding(c, ShardingOptions{Group: "g", Namespace: "ns", Identity: "a", LeaseDuration: 2 * time.Second,
			RenewPeriod: 400 * time.Millisecond, Slots: 16, Metrics: m})
		sub := sh.subscribe()
		ctx, cancel := context.WithCancel(context.Background())
		done := make(chan struct{})
		go func() { defer close(done); _ = sh.Run(ctx) }()
		go func() { // an informer that applies every share at once
			for {
				_, ver, changed, _ := sub.current()
				sub.ack(ver)
				select {
				case <-ctx.Done():
					return
				case <-changed:
				}
			}
		}()
		time.Sleep(time.Second)
		g := gather(t, reg)
		if g["kinformer_sharding_members{group=g}"] != 1 || g["kinformer_sharding_slots{group=g}"] != 16 ||
			g["kinformer_sharding_fenced{group=g}"] != 0 || g["kinformer_sharding_renewals_total{group=g,result=ok}"] == 0 {
			t.Fatalf("alone and serving everything: %v", g)
		}
		c.down.Store(true)
		time.Sleep(3 * time.Second)
		g = gather(t, reg)
		if g["kinformer_sharding_fenced{group=g}"] != 1 || g["kinformer_sharding_slots{group=g}"] != 0 ||
			g["kinformer_sharding_renewals_total{group=g,result=error}"] == 0 {
			t.Fatalf("cut off past the LeaseDuration: %v", g)
		}
		c.down.Store(false)
		time.Sleep(2 * time.Second)
		g = gather(t, reg)
		if g["kinformer_sharding_fenced{group=g}"] != 0 || g["kinformer_sharding_slots{group=g}"] != 16 ||
			g["kinformer_sharding_share_changes_total{group=g}"] < 3 {
			t.Fatalf("back: %v", g)
		}
		cancel()
		<-done
		sub.close()
		synctest.Wait()
	})
}
