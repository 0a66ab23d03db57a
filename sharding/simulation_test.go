package sharding

// A simulation of shard groups in a synctest bubble: replicas join, leave,
// die and are cut off from a linearizable in-memory Lease store (the API
// server and etcd stand-in, with request latency), on a fake clock. At
// every millisecond no slot may be owned by two valid replicas, and once
// membership settles every slot is owned by exactly one.
//
// Every wait of the simulation has a deadline in simulated time, and
// whatever way a run ends, every replica is stopped before the bubble's
// main goroutine returns: a bug (a replica that never gives a slot up, a
// handler that never returns, Run that never ends) fails the test with an
// error, instead of synctest's deadlock panic, which would end the whole
// test binary.

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

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/slots"
)

// simReplica is a replica: its Sharding, and an informer stand-in that
// applies each share as the loop does (a shrink handled after a drain
// delay, a growth after a list delay) and says what it owns.
type simReplica struct {
	id     string
	sh     *Sharding
	sub    kinformer.ShareSubscription
	client *leaseClient
	pause  atomic.Int64 // Run stalls this long before its next request
	fast   atomic.Bool  // handlers drain at once (a leave that must not time out)
	cancel context.CancelFunc
	// abort ends the handlers' work at once: the process is gone. Closed
	// when the replica stops, however it stops.
	abort     chan struct{}
	abortOnce sync.Once
	done      <-chan struct{} // closed once Run and the stand-in have returned

	mu    sync.Mutex
	owned *slots.Set // slots whose objects its handlers may be handling
	dead  bool
}

func (r *simReplica) owns(slot int) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	return !r.dead && r.owned.Contains(slot) && r.sub.Valid()
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

// logger writes a replica's log lines to log, without what every line
// would repeat.
func (l *simLog) logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(l, &slog.HandlerOptions{ReplaceAttr: func(_ []string, a slog.Attr) slog.Attr {
		if a.Key == "time" || a.Key == "shardGroup" || a.Key == "level" {
			return slog.Attr{}
		}
		return a
	}}))
}

func startSim(st *leaseStore, id string, rnd *rand.Rand, rmu *sync.Mutex, log *simLog, ld time.Duration) *simReplica {
	delay := func(max time.Duration) func() time.Duration {
		return func() time.Duration {
			rmu.Lock()
			defer rmu.Unlock()
			return time.Duration(rnd.Int64N(int64(max)))
		}
	}
	r := &simReplica{id: id, client: st.client(delay(30 * time.Millisecond)), abort: make(chan struct{})}
	r.sh = newSharding(r.client, Options{Group: "g", Namespace: "ns", Identity: id,
		LeaseDuration: ld, RenewPeriod: 400 * time.Millisecond, Slots: 16, Logger: log.logger()})
	r.owned = slots.New(16)
	r.client.stall = func() {
		if d := r.pause.Swap(0); d > 0 {
			log.add("%s: Run stalls for %v", id, time.Duration(d))
			time.Sleep(time.Duration(d))
		}
	}
	var ctx context.Context
	ctx, r.cancel = context.WithCancel(context.Background())
	r.sub = r.sh.Subscribe()
	r.done = runWithInformer(ctx, r.sh, r.sub, func() {
		work := delay(time.Second)
		var ver uint64
		for {
			share, changed := r.sub.Share()
			if share.Version != 0 && share.Version != ver {
				set, err := slots.Of(share.Total, share.Slots)
				if err != nil {
					panic(err) // the Sharding published a share that is not one
				}
				r.mu.Lock()
				old := r.owned
				r.owned = old.Union(set) // the lost slots are still being handled
				r.mu.Unlock()
				if !r.fast.Load() {
					// Handlers drain the Deleted events (or a list runs).
					select {
					case <-time.After(work()):
					case <-r.abort:
						return
					}
				}
				r.mu.Lock()
				r.owned = set
				r.mu.Unlock()
				log.add("%s: applied v%d %s", id, share.Version, set)
				ver = share.Version
				r.sub.Ack(share.Version)
				continue
			}
			select {
			case <-ctx.Done():
				return
			case <-changed:
			}
		}
	})
	return r
}

// stop ends the replica's Run and waits, at most stopWithin, for it and
// the stand-in to return; false if they did not.
func (r *simReplica) stop() bool { return cancelAndWait(r.cancel, r.done) }

// kill ends the replica without a goodbye: cut off, its handlers gone.
func (r *simReplica) kill() bool {
	r.mu.Lock()
	r.dead = true
	r.mu.Unlock()
	r.client.down.Store(true)
	r.abortOnce.Do(func() { close(r.abort) })
	return r.stop()
}

// leave ends the replica as a SIGTERM does: its Run gives the share up
// through its handlers, and deletes its Lease.
func (r *simReplica) leave() bool {
	ok := r.stop()
	r.mu.Lock()
	r.dead = true
	r.mu.Unlock()
	return ok
}

func TestShardingSimulation(t *testing.T) {
	for seed := range uint64(10) {
		t.Run(fmt.Sprint("seed", seed), func(t *testing.T) {
			inBubble(t, func(t *testing.T) { simulate(t, seed) })
		})
	}
}

// inBubble runs f in a synctest bubble. A bubble whose goroutines stay
// blocked for good makes synctest.Test panic, which would end the test
// binary: that is reported as this test's failure instead. The simulation
// stops every replica and bounds every wait, so this is the last resort,
// for a goroutine blocked where no deadline of the test reaches.
func inBubble(t *testing.T, f func(t *testing.T)) {
	t.Helper()
	defer func() {
		if p := recover(); p != nil {
			t.Errorf("the bubble did not end: %v", p)
		}
	}()
	synctest.Test(t, f)
}

func simulate(t *testing.T, seed uint64) {
	st := newLeaseStore()
	rnd := rand.New(rand.NewPCG(seed, 7))
	// Odd seeds: a LeaseDuration of a fraction of seconds (the Lease says
	// whole seconds).
	ld := 2 * time.Second
	if seed%2 == 1 {
		ld = 2900 * time.Millisecond
	}
	var rmu sync.Mutex
	log := &simLog{}
	var started []*simReplica // every replica, to stop whatever happens
	defer func() {
		// However the run ends (a t.Fatal included), the bubble empties:
		// every replica is killed, and one that does not stop is an error.
		for _, r := range started {
			if !r.kill() {
				t.Errorf("%s: Run or its informer did not return within %v of being killed", r.id, stopWithin)
			}
		}
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
		r := startSim(st, fmt.Sprintf("r%02d", next), rnd, &rmu, log, ld)
		started = append(started, r)
		live = append(live, r)
		next++
	}
	check := func() {
		for slot := range 16 {
			var owners []string
			for _, r := range live {
				if r.owns(slot) {
					owners = append(owners, r.id)
				}
			}
			if len(owners) > 1 {
				log.add("VIOLATION slot %d owned by %v", slot, owners)
				t.Fatalf("%v: slot %d owned by %v", time.Now().Format("05.000"), slot, owners)
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
	stopped := func(r *simReplica, ok bool, how string) {
		t.Helper()
		if !ok {
			t.Fatalf("%s: Run or its informer did not return within %v of %s", r.id, stopWithin, how)
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
			stopped(r, r.leave(), "leaving")
		case k == 2 && len(live) > 2:
			r := live[len(live)-1]
			live = live[:len(live)-1]
			log.add("%s killed", r.id)
			stopped(r, r.kill(), "being killed")
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
		stopped(r, r.leave(), "leaving")
	}
	st.mu.Lock()
	defer st.mu.Unlock()
	if n := len(st.items); n != 0 {
		t.Errorf("%d Leases left after every replica left", n)
	}
}
