package main

// The sharding benchmark (issue 12): what one replica of a shard group
// reads, spends and holds when 1, 2 or 4 replicas split 20,000 ConfigMaps,
// with the API server filtering (ShardedListAndWatch) and without (the
// informers filter), and how long the group takes to be whole again after a
// replica joins and after one dies.
//
//	cd tools/bench && go run . shard

import (
	"bufio"
	"context"
	"encoding/json"
	"flag"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

const (
	shardBegin = "<!-- shard: begin -->"
	shardEnd   = "<!-- shard: end -->"

	shardLeaseNamespace = "bench-shard" // the groups' Leases
	shardGate           = "--feature-gates=ShardedListAndWatch=true"
)

// ---- bytes by kind of request ----

// shardProc is a running replica process.
type shardProc struct {
	id   string
	cmd  *exec.Cmd
	in   io.WriteCloser
	out  *bufio.Reader
	dead bool
}

// replicaLog: the replicas log kinformer's informational messages (-replica-log).
var replicaLog bool

func startShardProc(kubeconfig, group, id string, lease time.Duration, start bool) (*shardProc, error) {
	args := []string{"shard-replica", "-kubeconfig", kubeconfig, "-group", group, "-identity", id, "-lease-duration", lease.String()}
	if start {
		args = append(args, "-start")
	}
	if replicaLog {
		args = append(args, "-log")
	}
	cmd, err := selfCommand(context.Background(), args...)
	if err != nil {
		return nil, err
	}
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
	cmd.Stderr = os.Stderr
	in, err := cmd.StdinPipe()
	if err != nil {
		return nil, err
	}
	out, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	return &shardProc{id: id, cmd: cmd, in: in, out: bufio.NewReader(out)}, nil
}

func (p *shardProc) call(cmd string, v any) error {
	if _, err := fmt.Fprintln(p.in, cmd); err != nil {
		return fmt.Errorf("%s: %w", p.id, err)
	}
	line, err := p.out.ReadString('\n')
	if err != nil {
		return fmt.Errorf("%s: %s: %w", p.id, cmd, err)
	}
	if err := json.Unmarshal([]byte(line), v); err != nil {
		return fmt.Errorf("%s: %s: %q: %w", p.id, cmd, truncate(line, 200), err)
	}
	return nil
}

func (p *shardProc) status() (replicaStatus, error) {
	var s replicaStatus
	err := p.call("status", &s)
	return s, err
}

// stop ends stdin (the replica leaves the group) and waits, SIGKILL after 30 s.
func (p *shardProc) stop() {
	if p.dead {
		return
	}
	p.dead = true
	p.in.Close()
	done := make(chan struct{})
	go func() { p.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(30 * time.Second):
		logf("%s did not leave in 30 s: killed", p.id)
		p.cmd.Process.Kill()
		<-done
	}
}

func (p *shardProc) kill() {
	p.dead = true
	p.cmd.Process.Kill()
	p.cmd.Wait()
}

func statuses(ps []*shardProc) ([]replicaStatus, error) {
	var out []replicaStatus
	for _, p := range ps {
		s, err := p.status()
		if err != nil {
			return nil, err
		}
		out = append(out, s)
	}
	return out, nil
}

// settled: every replica sees all n members, serves some slots, and the
// slots served add up to the whole space.
func settled(sts []replicaStatus) (bool, string) {
	slots := 0
	for _, s := range sts {
		switch {
		case s.Fenced:
			return false, s.Identity + " fenced"
		case s.Members != len(sts):
			return false, fmt.Sprintf("%s sees %d members of %d", s.Identity, s.Members, len(sts))
		case s.Slots == 0:
			return false, s.Identity + " serves no slot"
		}
		slots += s.Slots
	}
	if len(sts) > 0 && slots != sts[0].Total {
		return false, fmt.Sprintf("%d of %d slots served", slots, sts[0].Total)
	}
	return true, ""
}

// partitioned: settled, and every replica's informer is synced and its
// handler holds its share, the shares adding up to want (counts, sums and
// xors of the keys' hashes: disjoint and complete).
func partitioned(sts []replicaStatus, want keySet) (bool, string) {
	if ok, why := settled(sts); !ok {
		return false, why
	}
	var got keySet
	for _, s := range sts {
		if !s.Synced {
			return false, s.Identity + " not synced"
		}
		if s.CacheLen != s.Keys.N {
			return false, fmt.Sprintf("%s caches %d, its handler holds %d", s.Identity, s.CacheLen, s.Keys.N)
		}
		got.N += s.Keys.N
		got.Sum += s.Keys.Sum
		got.Xor ^= s.Keys.Xor
	}
	if got != want {
		return false, fmt.Sprintf("the shares hold %d objects (of %d), or not the same keys", got.N, want.N)
	}
	return true, ""
}

// waitFor polls the replicas every 100 ms until cond holds.
func waitFor(ps []*shardProc, timeout time.Duration, what string, cond func([]replicaStatus) (bool, string)) ([]replicaStatus, error) {
	deadline := time.Now().Add(timeout)
	for {
		sts, err := statuses(ps)
		if err != nil {
			return nil, err
		}
		ok, why := cond(sts)
		if ok {
			return sts, nil
		}
		if time.Now().After(deadline) {
			return sts, fmt.Errorf("%s: not after %v: %s", what, timeout, why)
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// shardResult is one replica of one (mode, N, round) run.
type shardResult struct {
	Filter string // "server" or "client": what the API server offers
	N      int
	Round  int
	replicaStatus
}

// shardRebalance is one round's join and death, N=2 -> 3 -> 2.
type shardRebalance struct {
	Mode              string
	Round             int
	JoinSeconds       float64 // exec of the third -> partitioned again, the third non-empty
	JoinerSyncSeconds float64 // the third's own informer start -> synced
	JoinShares        []int   // objects per replica after the join
	JoinMovedMB       float64 // ConfigMap bytes read by all three during the join
	JoinRead          []string
	DeathSeconds      float64 // SIGKILL of one -> the two survivors partitioned
	DeathShares       []int
	DeathMovedMB      float64 // ConfigMap bytes the survivors read taking over
	DeathRead         []string
	LeaseDuration     float64
	RenewPeriod       float64
	Killed, Joiner    string
	JoinErr, DeathErr string
	SurvivorModes     []string
}

type shardRun struct {
	Results    []shardResult
	Rebalances []shardRebalance
	Problems   []string
}

func shardFlags(fs *flag.FlagSet) func(*bench) error {
	var c shardConfig
	fs.IntVar(&c.cms, "cms", 20000, "ConfigMaps (about 1 KiB each)")
	replicas := fs.String("replicas", "1,2,4", "numbers of replicas, comma-separated")
	modes := fs.String("modes", "server,client", "server (kube-apiserver with ShardedListAndWatch), client (without: the informers filter), comma-separated")
	fs.DurationVar(&c.lease, "lease-duration", 10*time.Second, "sharding.Options.LeaseDuration (RenewPeriod is its default, a fifth)")
	fs.BoolVar(&c.rebalance, "rebalance", true, "after N=2, measure a third replica joining and then one being SIGKILLed")
	fs.BoolVar(&replicaLog, "replica-log", false, "the replicas log kinformer's informational messages (share changes, lists) to stderr")
	fs.StringVar(&c.resultsFile, "results", "", "also write every figure (JSON) to this file")
	fs.StringVar(&c.from, "from", "", "run nothing: write the report from a -results file")
	return func(b *bench) error {
		c.bench = b
		return shard(c, *replicas, *modes)
	}
}

// shardConfig is the shard benchmark's flags.
type shardConfig struct {
	*bench
	cms               int
	lease             time.Duration
	rebalance         bool
	resultsFile, from string
}

func shard(c shardConfig, replicas, modes string) error {
	var ns []int
	for _, s := range strings.Split(replicas, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n <= 0 {
			return fmt.Errorf("-replicas: %q is not a positive number", s)
		}
		ns = append(ns, n)
	}
	ms := strings.Split(modes, ",")
	for _, m := range ms {
		if m != "server" && m != "client" {
			return fmt.Errorf("-modes: unknown mode %q", m)
		}
	}
	if c.from != "" {
		var saved shardSaved
		if err := readResults(c.from, &saved); err != nil {
			return err
		}
		return c.section(shardReport(saved.Machine, saved.Rev, saved.Args, saved.CMs, saved.Replicas, saved.Modes, saved.Rounds, saved.Lease, saved.Run))
	}
	if err := c.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	begin := time.Now()

	var want keySet
	for i := range c.cms {
		want.add(cmNamespace + "/" + cmName(i))
	}
	var run shardRun
	for _, mode := range ms {
		var extra []string
		if mode == "server" {
			extra = []string{shardGate}
		}
		logf("starting localapi on %s (%s-side filtering)", c.dataDir, mode)
		srv, err := startServer(c.bin, c.dataDir, c.verbose, extra...)
		if err != nil {
			return err
		}
		logf("localapi ready: %s", srv.Server)
		err = shardMode(srv, mode, c.cms, ns, c.rounds, c.lease, c.rebalance, want, &run)
		srv.stop()
		if err != nil {
			return fmt.Errorf("%s-side: %w", mode, err)
		}
	}
	logf("shard benchmark done in %.1f minutes", time.Since(begin).Minutes())
	m.LoadEnd = loadavg()
	if err := saveResults(c.resultsFile, shardSaved{Machine: m, Rev: c.rev, Args: c.args, CMs: c.cms, Replicas: ns, Modes: ms, Rounds: c.rounds, Lease: c.lease, Run: run}); err != nil {
		return err
	}
	return c.section(shardReport(m, c.rev, c.args, c.cms, ns, ms, c.rounds, c.lease, run))
}

// shardSaved is a run as -results writes it and -from reads it.
type shardSaved struct {
	Machine  machine
	Rev      string
	Args     []string
	CMs      int
	Replicas []int
	Modes    []string
	Rounds   int
	Lease    time.Duration
	Run      shardRun
}

// shardMode runs every round of one mode on srv.
func shardMode(srv *server, mode string, cms int, ns []int, rounds int, lease time.Duration, rebalance bool, want keySet, run *shardRun) error {
	ctx := context.Background()
	cfg, err := restConfig(srv.Kubeconfig, 5000)
	if err != nil {
		return err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	if err := ensureNamespace(ctx, cs, shardLeaseNamespace); err != nil {
		return err
	}
	// The ConfigMaps, once per data dir.
	l, err := cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{Limit: 1})
	have := 0
	if err == nil && len(l.Items) > 0 {
		have = 1
		if l.RemainingItemCount != nil {
			have += int(*l.RemainingItemCount)
		}
	}
	if have != cms {
		start := time.Now()
		if have > cms {
			return fmt.Errorf("%s holds %d ConfigMaps, more than -cms %d: use another -data-dir", cmNamespace, have, cms)
		}
		if err := createWorkload(ctx, cs, cms, 0); err != nil {
			return fmt.Errorf("workload: %w", err)
		}
		logf("%d ConfigMaps ready in %.0fs", cms, time.Since(start).Seconds())
	}
	time.Sleep(2 * time.Second) // let the server settle
	for r := 1; r <= rounds; r++ {
		for _, n := range ns {
			if err := shardReplicas(srv, mode, n, r, lease, rebalance && n == 2, want, run); err != nil {
				return fmt.Errorf("N=%d round %d: %w", n, r, err)
			}
			time.Sleep(time.Second)
		}
	}
	return nil
}

// shardReplicas runs n replicas: their Shardings first, until the group has
// settled (every member sees the others, the slots are split), then their
// informers all at once; it waits until the shares are synced and add up,
// and records each replica. With rebalance, a third joins and then the
// first is killed.
func shardReplicas(srv *server, mode string, n, round int, lease time.Duration, rebalance bool, want keySet, run *shardRun) error {
	group := fmt.Sprintf("bench-%s-n%d-r%d-%d", mode, n, round, time.Now().UnixNano()%1e6)
	var ps []*shardProc
	defer func() {
		var wg sync.WaitGroup
		for _, p := range ps {
			wg.Go(p.stop)
		}
		wg.Wait()
	}()
	for i := range n {
		p, err := startShardProc(srv.Kubeconfig, group, fmt.Sprintf("replica-%d", i), lease, false)
		if err != nil {
			return err
		}
		ps = append(ps, p)
	}
	if _, err := waitFor(ps, 2*time.Minute, "the group settles", settled); err != nil {
		return err
	}
	for _, p := range ps {
		var ack struct{}
		if err := p.call("start", &ack); err != nil {
			return err
		}
	}
	if _, err := waitFor(ps, 5*time.Minute, "the shares are synced and add up", func(sts []replicaStatus) (bool, string) {
		return partitioned(sts, want)
	}); err != nil {
		return err
	}
	sts, err := waitFor(ps, 2*time.Minute, "heap measured", func(sts []replicaStatus) (bool, string) {
		for _, s := range sts {
			if !s.HeapDone {
				return false, s.Identity + " has not measured its heap"
			}
		}
		return partitioned(sts, want)
	})
	if err != nil {
		return err
	}
	var shares []string
	for _, s := range sts {
		run.Results = append(run.Results, shardResult{Filter: mode, N: n, Round: round, replicaStatus: s})
		shares = append(shares, fmt.Sprintf("%s %d objects %.2f MB %.2fs cpu %.2fs heap %.1f MB %s", s.Identity, s.Keys.N, mb(s.CMBytesSync), s.SyncSeconds, s.SyncCPUSeconds, s.HeapAllocMB, s.Mode))
		if s.Mode != mode {
			run.Problems = append(run.Problems, fmt.Sprintf("%s-side N=%d round %d: %s reports mode %q", mode, n, round, s.Identity, s.Mode))
		}
		for _, e := range s.Errors {
			run.Problems = append(run.Problems, fmt.Sprintf("%s-side N=%d round %d: %s: %s", mode, n, round, s.Identity, e))
		}
	}
	logf("%s-side N=%d round %d: %s", mode, n, round, strings.Join(shares, "; "))
	if !rebalance {
		return nil
	}

	rb := shardRebalance{Mode: mode, Round: round, LeaseDuration: lease.Seconds(), RenewPeriod: (lease / 5).Seconds(), Joiner: fmt.Sprintf("replica-%d", n), Killed: ps[0].id}
	var before int64
	prev := map[string]replicaStatus{}
	for _, s := range sts {
		before += s.CMBytes
		prev[s.Identity] = s
	}
	// read is what each replica read since prev: MB in requests.
	read := func(sts []replicaStatus) []string {
		var out []string
		for _, s := range sts {
			out = append(out, fmt.Sprintf("%.2f in %d", mb(s.CMBytes-prev[s.Identity].CMBytes), s.CMReqs-prev[s.Identity].CMReqs))
		}
		return out
	}
	// A third joins: its Sharding and informer start at once, as a new pod's.
	t0 := time.Now()
	p, err := startShardProc(srv.Kubeconfig, group, rb.Joiner, lease, true)
	if err != nil {
		return err
	}
	ps = append(ps, p)
	sts, err = waitFor(ps, 3*time.Minute, "partitioned after the join", func(sts []replicaStatus) (bool, string) {
		if last := sts[len(sts)-1]; last.Keys.N == 0 {
			return false, last.Identity + " holds nothing"
		}
		return partitioned(sts, want)
	})
	rb.JoinSeconds = time.Since(t0).Seconds()
	if err != nil {
		rb.JoinErr = err.Error()
		run.Rebalances = append(run.Rebalances, rb)
		return err
	}
	var after int64
	for _, s := range sts {
		rb.JoinShares = append(rb.JoinShares, s.Keys.N)
		after += s.CMBytes
	}
	rb.JoinMovedMB = mb(after - before)
	rb.JoinRead = read(sts)
	prev = map[string]replicaStatus{}
	for _, s := range sts {
		prev[s.Identity] = s
	}
	rb.JoinerSyncSeconds = sts[len(sts)-1].SyncSeconds
	// The first dies.
	survivors := ps[1:]
	before = 0
	for _, s := range sts[1:] {
		before += s.CMBytes
	}
	t0 = time.Now()
	ps[0].kill()
	sts, err = waitFor(survivors, 3*time.Minute, "the survivors partitioned", func(sts []replicaStatus) (bool, string) {
		return partitioned(sts, want)
	})
	rb.DeathSeconds = time.Since(t0).Seconds()
	if err != nil {
		rb.DeathErr = err.Error()
		run.Rebalances = append(run.Rebalances, rb)
		return err
	}
	after = 0
	for _, s := range sts {
		rb.DeathShares = append(rb.DeathShares, s.Keys.N)
		rb.SurvivorModes = append(rb.SurvivorModes, s.Mode)
		after += s.CMBytes
	}
	rb.DeathMovedMB = mb(after - before)
	rb.DeathRead = read(sts)
	logf("%s-side round %d: join %.2fs (shares %v, MB read by each %v), death %.2fs (LeaseDuration %v; shares %v, MB read by each %v)",
		mode, round, rb.JoinSeconds, rb.JoinShares, rb.JoinRead, rb.DeathSeconds, lease, rb.DeathShares, rb.DeathRead)
	run.Rebalances = append(run.Rebalances, rb)
	return nil
}

func mb(n int64) float64 { return float64(n) / (1 << 20) }
