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
	"hash/fnv"
	"log/slog"
	"net/http"
	"os"
	"runtime"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/sharding"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
)

// shardBytes counts response body bytes (after gunzip) and requests of a
// replica: ConfigMaps (lists, watches, the informer's probes), Leases (the
// Sharding's renewals and reads of the group), and anything else.
type shardBytes struct {
	cm, lease, other          atomic.Int64
	cmReqs, leaseReqs, others atomic.Int64
}

func (c *shardBytes) wrap(rt http.RoundTripper) http.RoundTripper {
	return roundTripper(func(req *http.Request) (*http.Response, error) {
		n, reqs := &c.other, &c.others
		switch p := req.URL.Path; {
		case strings.Contains(p, "/configmaps"):
			n, reqs = &c.cm, &c.cmReqs
		case strings.Contains(p, "/leases"):
			n, reqs = &c.lease, &c.leaseReqs
		}
		reqs.Add(1)
		resp, err := rt.RoundTrip(req)
		if err == nil && resp.Body != nil {
			resp.Body = &countingBody{ReadCloser: resp.Body, n: n}
		}
		return resp, err
	})
}

// keyHash is what a replica adds up over the keys its handler holds: the
// parent compares the sums of all replicas with those of every key, so
// that a partition is checked without sending keys around.
func keyHash(key string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(key))
	return h.Sum64()
}

// keySet is a set of keys as a count, a sum and an xor of their hashes.
type keySet struct {
	N   int    `json:"n"`
	Sum uint64 `json:"sum"`
	Xor uint64 `json:"xor"`
}

func (k *keySet) add(key string) { h := keyHash(key); k.N++; k.Sum += h; k.Xor ^= h }
func (k *keySet) del(key string) { h := keyHash(key); k.N--; k.Sum -= h; k.Xor ^= h }

// replicaStatus is a replica's answer to "status".
type replicaStatus struct {
	Identity string `json:"identity"`
	Members  int    `json:"members"` // live members its Sharding sees
	Slots    int    `json:"slots"`   // slots it serves
	Total    int    `json:"total"`
	Fenced   bool   `json:"fenced"`

	Started  bool   `json:"started"` // the informer is running
	Synced   bool   `json:"synced"`
	HeapDone bool   `json:"heapDone"` // HeapAllocMB and HeapInuseMB are measured
	Mode     string `json:"mode"`     // ShardStatus().Mode
	Keys     keySet `json:"keys"`     // what its handler holds: Added minus Deleted
	CacheLen int    `json:"cacheLen"`

	SyncSeconds    float64 `json:"syncSeconds"`    // informer start -> HasSynced (polled every 1 ms)
	SyncCPUSeconds float64 `json:"syncCPUSeconds"` // user+sys of the process over the same interval
	CPUSeconds     float64 `json:"cpuSeconds"`     // user+sys of the process since it started, now
	CMBytesSync    int64   `json:"cmBytesSync"`    // ConfigMap bytes, informer start -> synced
	CMReqsSync     int64   `json:"cmReqsSync"`     // ConfigMap requests, the same interval
	LeaseBytesSync int64   `json:"leaseBytesSync"` // Lease bytes, process start -> synced
	LeaseReqsSync  int64   `json:"leaseReqsSync"`
	CMBytes        int64   `json:"cmBytes"` // since the process started, now
	CMReqs         int64   `json:"cmReqs"`
	LeaseBytes     int64   `json:"leaseBytes"`
	OtherBytes     int64   `json:"otherBytes"`
	HeapBeforeMB   float64 `json:"heapBeforeMB"` // HeapAlloc after 2 GCs, the Sharding running, before the informer
	HeapAllocMB    float64 `json:"heapAllocMB"`  // after sync, every initial Added handled, 2 GCs
	HeapInuseMB    float64 `json:"heapInuseMB"`  //
	PeakRSSMB      float64 `json:"peakRSSMB"`    // VmHWM, when the heap is measured
	Errors         []string
}

// ---- the shard-replica subcommand (a child process) ----

// shardReplicaMain is one replica: a Sharding and, from "start" (or
// -start), one ConfigMaps informer of the namespace using it. It answers
// "status" on stdin with one JSON line; at the end of stdin it leaves the
// group (the Sharding gives its share up and deletes its Lease) and exits.
func shardReplicaMain(args []string) error {
	fs := flag.NewFlagSet("shard-replica", flag.ExitOnError)
	kubeconfig := fs.String("kubeconfig", "", "kubeconfig")
	group := fs.String("group", "", "sharding.Options.Group")
	identity := fs.String("identity", "", "sharding.Options.Identity")
	leaseDuration := fs.Duration("lease-duration", 10*time.Second, "sharding.Options.LeaseDuration")
	renewPeriod := fs.Duration("renew-period", 0, "sharding.Options.RenewPeriod (0: the default, LeaseDuration/5)")
	start := fs.Bool("start", false, "start the informer at once, not at the first \"start\" on stdin")
	logInfo := fs.Bool("log", false, "kinformer's informational logs (share changes) to stderr, not only warnings")
	fs.Parse(args)

	cfg, err := restConfig(*kubeconfig, 1000)
	if err != nil {
		return err
	}
	bc := &shardBytes{}
	cfg.WrapTransport = bc.wrap
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		return err
	}
	ctx := context.Background()
	// Open the connection, as every contender does.
	if _, err := cs.CoreV1().Namespaces().Get(ctx, cmNamespace, metav1.GetOptions{}); err != nil {
		return fmt.Errorf("warm-up: %w", err)
	}
	level := slog.LevelWarn
	if *logInfo {
		level = slog.LevelInfo
	}
	logger := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: level})).With("replica", *identity)
	sh := sharding.New(cfg, sharding.Options{
		Group: *group, Namespace: shardLeaseNamespace, Identity: *identity,
		LeaseDuration: *leaseDuration, RenewPeriod: *renewPeriod, Logger: logger,
	})
	shCtx, shCancel := context.WithCancel(ctx)
	shDone := make(chan struct{})
	var mu sync.Mutex // guards st and keys
	st := replicaStatus{Identity: *identity}
	var keys keySet
	fail := func(format string, args ...any) {
		mu.Lock()
		st.Errors = append(st.Errors, fmt.Sprintf(format, args...))
		mu.Unlock()
	}
	go func() {
		defer close(shDone)
		if err := sh.Run(shCtx); err != nil {
			fail("Sharding.Run: %v", err)
		}
	}()

	var inf *kinformer.Informer[*corev1.ConfigMap]
	infCtx, infCancel := context.WithCancel(ctx)
	infDone := make(chan struct{})
	startInformer := func() {
		if inf != nil {
			return
		}
		heapBefore := gcHeapMB()
		inf = kinformer.New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps(cmNamespace),
			&kinformer.Options[*corev1.ConfigMap]{Sharding: sh, Logger: logger})
		reg := inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
			mu.Lock()
			defer mu.Unlock()
			switch e.Type {
			case kinformer.Added:
				keys.add(e.Key)
			case kinformer.Deleted:
				keys.del(e.Key)
			case kinformer.Error:
				st.Errors = append(st.Errors, errString(e.Err))
			}
		})
		mu.Lock()
		st.Started, st.HeapBeforeMB = true, heapBefore
		mu.Unlock()
		cm0, cmReq0 := bc.cm.Load(), bc.cmReqs.Load()
		cpu0 := cpuSeconds()
		t0 := time.Now()
		go func() { defer close(infDone); inf.Run(infCtx) }()
		go func() {
			for !inf.HasSynced() {
				if infCtx.Err() != nil {
					return
				}
				time.Sleep(time.Millisecond)
			}
			d, cpu := time.Since(t0), cpuSeconds()-cpu0
			mu.Lock()
			st.Synced, st.SyncSeconds, st.SyncCPUSeconds = true, d.Seconds(), cpu
			st.CMBytesSync, st.CMReqsSync = bc.cm.Load()-cm0, bc.cmReqs.Load()-cmReq0
			st.LeaseBytesSync, st.LeaseReqsSync = bc.lease.Load(), bc.leaseReqs.Load()
			mu.Unlock()
			for !(reg.HasSynced() && reg.Pending() == 0) && time.Since(t0) < 5*time.Minute {
				time.Sleep(time.Millisecond)
			}
			alloc := gcHeapMB()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			mu.Lock()
			st.HeapDone, st.HeapAllocMB, st.HeapInuseMB, st.PeakRSSMB = true, alloc, float64(ms.HeapInuse)/(1<<20), vmHWM()
			mu.Unlock()
		}()
	}
	if *start {
		startInformer()
	}

	out := bufio.NewWriter(os.Stdout)
	sc := bufio.NewScanner(os.Stdin)
	for sc.Scan() {
		switch cmd := strings.TrimSpace(sc.Text()); cmd {
		case "start":
			startInformer()
			fmt.Fprintln(out, `{}`)
		case "status":
			ss := sh.Status()
			mu.Lock()
			s := st
			s.Errors = slices.Clone(st.Errors)
			s.Keys = keys
			mu.Unlock()
			s.Members, s.Slots, s.Total, s.Fenced = len(ss.Members), ss.Slots, ss.Total, ss.Fenced
			if inf != nil {
				s.Mode, s.CacheLen = inf.ShardStatus().Mode, inf.Cache().Len()
			}
			s.CPUSeconds = cpuSeconds()
			s.CMBytes, s.LeaseBytes, s.OtherBytes = bc.cm.Load(), bc.lease.Load(), bc.other.Load()
			s.CMReqs = bc.cmReqs.Load()
			b, _ := json.Marshal(s)
			out.Write(append(b, '\n'))
		default:
			fmt.Fprintf(out, "{\"error\":%q}\n", "unknown command "+cmd)
		}
		out.Flush()
	}
	// Leave: the Sharding gives the share up through the informer, then
	// the informer stops.
	shCancel()
	<-shDone
	infCancel()
	if inf != nil {
		<-infDone
	}
	return nil
}

// ---- the parent ----
