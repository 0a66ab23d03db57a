package main

// The warm restart after time down (restart -down 1m,10m): what a process
// stopped for a minute, or ten, gets from its state file once it starts
// again, while the cluster lived on meanwhile. The API server serves a
// watch from its watch cache, which keeps at least 75 s of each
// resource's history, and compacts etcd itself every 5 minutes; a process
// down longer may find its file's resourceVersion gone (410), re-list and
// diff. Measured side by side with client-go's cold start in the same run:
// the first read (the restored cache readable), time to synced, and how
// the informer caught up (a watch, or a re-list after 410).
//
//	cd tools/bench && go run . restart -down 1m,10m -down-rounds 3,1

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes"
)

const (
	downBegin = "<!-- restart-down: begin -->"
	downEnd   = "<!-- restart-down: end -->"

	// lifeNamespace holds what the rest of the cluster writes while the
	// measured process is down.
	lifeNamespace = "bench-life"
	lifeLeases    = 20               // Leases, renewed in turn: each every lifeLeases/leasesPerTick ticks
	leasesPerTick = 2                // Lease renewals a tick (20 kubelets renewing every 10 s)
	lifeTick      = time.Second      // one tick: leasesPerTick renewals, one Event created
	lifeCMEvery   = 10               // ticks between updates of a ConfigMap in lifeNamespace
	compactEvery  = 5 * time.Minute  // kube-apiserver's --etcd-compaction-interval default, which localapi keeps
	trickleStep   = time.Second      // the collection's changes while down: one batch a step
	downLimit     = 30 * time.Minute // a -down longer than this is a typo
)

// downSpec is one time down and its rounds. Restart: the API server is
// restarted halfway through the time down (an upgrade, or a client that
// comes back to another API server of the cluster): its watch cache starts
// again from the current resourceVersion, so the file's is too old for it
// at once, however short the time down.
type downSpec struct {
	Down    time.Duration
	Rounds  int
	Restart bool
}

func (s downSpec) String() string {
	d := s.Down.String()
	if s.Down%time.Minute == 0 {
		d = fmt.Sprintf("%d min", s.Down/time.Minute)
	}
	if s.Restart {
		return d + " down, API server restarted"
	}
	return d + " down"
}

// downRound is one round of one time down: the cold start that wrote the
// file, then the warm start and client-go's cold start after the time
// down, in the order run.
type downRound struct {
	Down    time.Duration
	Restart bool // the API server was restarted while down
	Round   int
	// FileRV is the state file's resourceVersion (the cold start's once
	// stopped); Compacted says whether etcd had compacted it when the warm
	// start began (an exact LIST at it answered 410).
	FileRV    string
	Compacted bool
	Modified  int     // objects of the collection changed while down ...
	Deleted   int     // ... deleted, and as many created
	WriteSecs float64 // the trickle's writes, summed
	Results   []restartResult
}

// downRun is what the down report is made from (-save, -replay).
type downRun struct {
	Machine      machine
	LoadEnd, Rev string
	Args         []string
	NCM          int
	Churn        float64
	Downs        []downSpec
	Rounds       []downRound
	LifeWrites   int64
	LifeErrors   int64
	LifeErr      string // the first life write that failed
}

// parseDowns reads -down and -down-rounds: durations, each with
// "+restart" or not, and rounds for each (missing: rounds).
func parseDowns(downs, downRounds string, rounds int) ([]downSpec, error) {
	var specs []downSpec
	var rs []string
	if downRounds != "" {
		rs = strings.Split(downRounds, ",")
	}
	for i, s := range strings.Split(downs, ",") {
		s, restart := strings.CutSuffix(strings.TrimSpace(s), "+restart")
		d, err := time.ParseDuration(s)
		if err != nil || d <= 0 || d > downLimit {
			return nil, fmt.Errorf("-down %q: want durations up to %v, each with +restart or not, as 1m,10m,1m+restart", s, downLimit)
		}
		n := rounds
		if i < len(rs) {
			if n, err = strconv.Atoi(strings.TrimSpace(rs[i])); err != nil || n < 1 {
				return nil, fmt.Errorf("-down-rounds %q: want a number of rounds for each -down", downRounds)
			}
		}
		specs = append(specs, downSpec{d, n, restart})
	}
	return specs, nil
}

// life is the rest of the cluster while the measured process is down and
// while it starts: Lease renewals (kubelets, leader election), Events, and
// a ConfigMap in another namespace. None of it is in the measured
// collection, but all of it moves the server's resourceVersion, as in a
// live cluster, and the ConfigMap shares the collection's watch cache.
type life struct {
	writes, errors atomic.Int64
	firstErr       atomic.Pointer[string]
	cancel         context.CancelFunc
	done           chan struct{}
}

func startLife(ctx context.Context, cs kubernetes.Interface) (*life, error) {
	if err := ensureNamespace(ctx, cs, lifeNamespace); err != nil {
		return nil, err
	}
	for i := range lifeLeases {
		dur := int32(40)
		now := metav1.NowMicro()
		holder := fmt.Sprintf("node-%02d", i)
		_, err := cs.CoordinationV1().Leases(lifeNamespace).Create(ctx, &coordinationv1.Lease{
			ObjectMeta: metav1.ObjectMeta{Name: holder},
			Spec:       coordinationv1.LeaseSpec{HolderIdentity: &holder, LeaseDurationSeconds: &dur, RenewTime: &now},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		if err != nil && !apierrors.IsAlreadyExists(err) {
			return nil, err
		}
	}
	cm := &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Name: "bench-life"}, Data: map[string]string{"at": ""}}
	if _, err := cs.CoreV1().ConfigMaps(lifeNamespace).Create(ctx, cm, metav1.CreateOptions{FieldManager: fieldManager}); err != nil && !apierrors.IsAlreadyExists(err) {
		return nil, err
	}
	ctx, cancel := context.WithCancel(ctx)
	l := &life{cancel: cancel, done: make(chan struct{})}
	go l.run(ctx, cs)
	return l, nil
}

func (l *life) run(ctx context.Context, cs kubernetes.Interface) {
	defer close(l.done)
	t := time.NewTicker(lifeTick)
	defer t.Stop()
	write := func(err error) {
		if ctx.Err() != nil {
			return
		}
		l.writes.Add(1)
		if err != nil {
			l.errors.Add(1)
			s := err.Error()
			l.firstErr.CompareAndSwap(nil, &s)
		}
	}
	for tick := 0; ; tick++ {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		for k := range leasesPerTick {
			now, _ := json.Marshal(metav1.NowMicro())
			name := fmt.Sprintf("node-%02d", (tick*leasesPerTick+k)%lifeLeases)
			_, err := cs.CoordinationV1().Leases(lifeNamespace).Patch(ctx, name, types.MergePatchType,
				fmt.Appendf(nil, `{"spec":{"renewTime":%s}}`, now), metav1.PatchOptions{FieldManager: fieldManager})
			write(err)
		}
		now := metav1.Now()
		_, err := cs.CoreV1().Events(lifeNamespace).Create(ctx, &corev1.Event{
			ObjectMeta:     metav1.ObjectMeta{GenerateName: "bench-life-"},
			InvolvedObject: corev1.ObjectReference{Kind: "ConfigMap", Namespace: lifeNamespace, Name: "bench-life", APIVersion: "v1"},
			Reason:         "Tick", Message: fmt.Sprintf("tick %d", tick), Type: corev1.EventTypeNormal,
			FirstTimestamp: now, LastTimestamp: now, Count: 1, Source: corev1.EventSource{Component: "bench"},
		}, metav1.CreateOptions{FieldManager: fieldManager})
		write(err)
		if tick%lifeCMEvery == 0 {
			_, err := cs.CoreV1().ConfigMaps(lifeNamespace).Patch(ctx, "bench-life", types.MergePatchType,
				fmt.Appendf(nil, `{"data":{"at":%q}}`, now.Format(time.RFC3339Nano)), metav1.PatchOptions{FieldManager: fieldManager})
			write(err)
		}
	}
}

func (l *life) stop() {
	l.cancel()
	<-l.done
}

// trickle changes churn of j's collection (half modified, a quarter
// deleted, as many created) spread over d, a batch each trickleStep, the
// last one a step before d is over, as a live collection changes while
// its informer's process is down; halfway, it calls halfway, if not nil.
// It returns when d is over.
func trickle(ctx context.Context, cs kubernetes.Interface, j restartJob, d time.Duration, churn float64, halfway func() error) (modified, deleted int, writeSecs float64, err error) {
	modify := int(float64(j.n) * churn / 2)
	del := int(float64(j.n) * churn / 4)
	steps := max(1, int(d/trickleStep))
	start := time.Now()
	for i := 1; i <= steps; i++ {
		m := modify*i/steps - modify*(i-1)/steps
		x := del*i/steps - del*(i-1)/steps
		if m+x > 0 {
			took, err := j.ch.churn(ctx, cs, m, x)
			if err != nil {
				return modified, deleted, writeSecs, err
			}
			modified, deleted, writeSecs = modified+m, deleted+x, writeSecs+took.Seconds()
		}
		if i == steps/2 && halfway != nil {
			if err := halfway(); err != nil {
				return modified, deleted, writeSecs, err
			}
		}
		time.Sleep(time.Until(start.Add(d * time.Duration(i) / time.Duration(steps))))
	}
	return modified, deleted, writeSecs, nil
}

// compactedAt says whether etcd has compacted resourceVersion rv: an
// exact LIST at it answers 410 then. (A watch from rv may still be served
// from the API server's watch cache: the warm start tells.)
func compactedAt(ctx context.Context, cs kubernetes.Interface, rv string) (bool, error) {
	_, err := cs.CoreV1().ConfigMaps(cmNamespace).List(ctx, metav1.ListOptions{ResourceVersion: rv, ResourceVersionMatch: metav1.ResourceVersionMatchExact, Limit: 1})
	switch {
	case err == nil:
		return false, nil
	case apierrors.IsResourceExpired(err), apierrors.IsGone(err):
		return true, nil
	}
	return false, err
}

// restartDown runs the -down rounds over the ConfigMaps: for each time
// down and round, kinformer cold writes the state file and stops; the
// collection then changes as it would while the process is down (trickle)
// and the rest of the cluster writes all along (life); once the time is
// over, kinformer warm and client-go cold run, the order alternating.
func restartDown(c restartConfig, specs []downSpec) error {
	if err := c.prepare(); err != nil {
		return err
	}
	stateRoot, err := c.tempDir("state")
	if err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := c.serveWorkload(c.nCM, 0)
	if err != nil {
		return err
	}
	defer func() { srv.stop() }()
	// restartServer restarts the API server on its data dir: the objects
	// and etcd's history stay, the watch caches start anew. The clients
	// (this process's, the contenders' kubeconfig) keep its address.
	restartServer := func() error {
		addr := srv.Server
		logf("restarting the API server")
		srv.stop()
		if srv, err = startServer(c.bin, c.dataDir, c.verbose); err != nil {
			return err
		}
		if srv.Server != addr {
			return fmt.Errorf("the API server came back at %s, not %s", srv.Server, addr)
		}
		logf("the API server is back")
		return nil
	}
	ctx := context.Background()
	jobs, err := restartJobs(ctx, cs, c.nCM, 0)
	if err != nil {
		return err
	}
	if len(jobs) == 0 {
		return fmt.Errorf("-down needs ConfigMaps (-configmaps)")
	}
	j := jobs[0]
	lf, err := startLife(ctx, cs)
	if err != nil {
		return fmt.Errorf("the cluster's life: %w", err)
	}
	defer lf.stop()
	var total time.Duration
	for _, s := range specs {
		total += s.Down * time.Duration(s.Rounds)
	}
	logf("restart after time down: %v down in all; etcd compacted by the API server every %v (its default)", total, compactEvery)

	dr := downRun{Machine: m, Rev: c.rev, Args: c.args, NCM: j.n, Churn: c.churn, Downs: specs}
	save := func() error {
		dr.LoadEnd, dr.LifeWrites, dr.LifeErrors = loadavg(), lf.writes.Load(), lf.errors.Load()
		if p := lf.firstErr.Load(); p != nil {
			dr.LifeErr = *p
		}
		return saveResults(c.save, dr)
	}
	run := func(kind, dir string, round int) (restartResult, error) {
		time.Sleep(time.Second) // let the server settle
		var extra []string
		if c.logInfo {
			extra = append(extra, "-log")
		}
		res, _, err := runRestartContender(ctx, cs, srv.Kubeconfig, kind, j.resource, dir, round, 0, 0, 0, extra...)
		if err != nil {
			return res, fmt.Errorf("%s %s round %d: %w", kind, j.resource, round, err)
		}
		logRestart(res)
		if res.Differ > 0 {
			logf("WARNING: %s round %d: %d objects differ from the server's once synced", kind, round, res.Differ)
		}
		if res.Objects != j.n {
			return res, fmt.Errorf("%s round %d: %d objects in the cache at sync, the server has %d", kind, round, res.Objects, j.n)
		}
		return res, nil
	}
	for _, s := range specs {
		for r := 1; r <= s.Rounds; r++ {
			dir := filepath.Join(stateRoot, fmt.Sprintf("down-%s-%v-%d", s.Down, s.Restart, r))
			cold, err := run(rKinformerCold, dir, r)
			if err != nil {
				return err
			}
			rd := downRound{Down: s.Down, Restart: s.Restart, Round: r, FileRV: cold.ResourceVersion, Results: []restartResult{cold}}
			logf("%v, round %d: the process is down; the collection changes meanwhile", s, r)
			var halfway func() error
			if s.Restart {
				halfway = restartServer
			}
			if rd.Modified, rd.Deleted, rd.WriteSecs, err = trickle(ctx, cs, j, s.Down, c.churn, halfway); err != nil {
				return fmt.Errorf("changes while down: %w", err)
			}
			if rd.Compacted, err = compactedAt(ctx, cs, rd.FileRV); err != nil {
				return fmt.Errorf("exact LIST at the file's resourceVersion %s: %w", rd.FileRV, err)
			}
			logf("%v, round %d: %d modified, %d deleted, %d created (%.1fs of writes); the file's resourceVersion %s compacted in etcd: %v; life: %d writes, %d failed",
				s, r, rd.Modified, rd.Deleted, rd.Deleted, rd.WriteSecs, rd.FileRV, rd.Compacted, lf.writes.Load(), lf.errors.Load())
			order := []string{rKinformerWarm, rClientGoCold}
			if r%2 == 0 {
				order = []string{rClientGoCold, rKinformerWarm}
			}
			for _, kind := range order {
				res, err := run(kind, dir, r)
				if err != nil {
					return err
				}
				rd.Results = append(rd.Results, res)
			}
			dr.Rounds = append(dr.Rounds, rd)
			if err := save(); err != nil { // a long run keeps what it has
				return err
			}
		}
	}
	if err := save(); err != nil {
		return err
	}
	return c.downSection(downReport(dr))
}

// downSection prints the down subsection and puts it in place of the old
// one in -out, or, the first time, at the end of the restart section.
func (b *bench) downSection(text string) error {
	fmt.Println(text)
	if b.out == "" {
		return nil
	}
	path := b.outPath()
	old, err := os.ReadFile(path)
	if err == nil && !bytes.Contains(old, []byte(downBegin)) {
		if i := bytes.Index(old, []byte(restartEnd)); i >= 0 {
			doc := string(old[:i]) + text + string(old[i:])
			if err := os.WriteFile(path, []byte(doc), 0o644); err != nil {
				return err
			}
			logf("updated %s", path)
			return nil
		}
	}
	return replaceSection(path, downBegin, downEnd, text)
}

// keepDownSection puts the down subsection of -out, if there is one, into
// text, the restart section, before its end: a run without -down keeps the
// figures of the last run with it, as the full benchmark keeps the others'
// sections.
func (b *bench) keepDownSection(text string) string {
	if b.out == "" {
		return text
	}
	old, err := os.ReadFile(b.outPath())
	if err != nil {
		return text
	}
	i, j := bytes.Index(old, []byte(downBegin)), bytes.Index(old, []byte(downEnd))
	k := strings.LastIndex(text, restartEnd)
	if i < 0 || j < i || k < 0 {
		return text
	}
	return text[:k] + string(old[i:j+len(downEnd)]) + "\n" + text[k:]
}
