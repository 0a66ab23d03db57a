package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"net/http"
	"net/http/httptest"
	"slices"
	"sort"
	"strings"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"
	coordinationv1 "k8s.io/api/coordination/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/kubernetes"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
	"github.com/kinformer/kinformer/kinformertest"
	"github.com/kinformer/kinformer/sharding"
)

// The sharding flags are checked before anything is loaded, each error
// naming its flag.
func TestServeShardUsage(t *testing.T) {
	t.Parallel()
	for _, tt := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--shard-namespace", "ops"}, "serve: --shard-namespace needs --shard-group"},
		{[]string{"--shard-identity", "a"}, "serve: --shard-identity needs --shard-group"},
		{[]string{"--lease-duration", "5s"}, "serve: --lease-duration needs --shard-group"},
		{[]string{"--shard-members", "a-*"}, "serve: --shard-members needs --shard-group"},
		{[]string{"--shard-group", "g", "--shard-namespace", "ops", "--shard-members", "a-["}, `serve: --shard-members "a-[": not a shell pattern`},
		{[]string{"--shard-group", ""}, "serve: --shard-group must not be empty"},
		{[]string{"--shard-group", "no spaces"}, `serve: --shard-group "no spaces": not a valid label value`},
		{[]string{"--shard-group", "g", "--shard-namespace", "Ops"}, `serve: --shard-namespace "Ops": not a valid namespace`},
		{[]string{"--shard-group", "g", "--shard-identity", " "}, "serve: --shard-identity must not be empty"},
		{[]string{"--shard-group", "g", "--lease-duration", "1s"}, "serve: --lease-duration 1s: must be at least 2s"},
		{[]string{"--shard-group", "g", "--lease-duration", "soon"}, `invalid argument "soon" for "--lease-duration"`},
	} {
		if slices.Contains(tt.args, "--shard-group") && !slices.Contains(tt.args, "--shard-namespace") {
			tt.args = append(tt.args, "--shard-namespace", "ops")
		}
		args := append([]string{"serve", "configmaps"}, tt.args...)
		code, stdout, stderr := runCmd(t, nil, args...)
		first, _, _ := strings.Cut(stderr, "\n")
		if code != exitUsage || !strings.Contains(first, tt.msg) || stdout != "" {
			t.Errorf("kinformer %q: exit %d, stdout %q, stderr %q; want %d and %q first", args, code, stdout, stderr, exitUsage, tt.msg)
		}
	}
	// Outside a pod the Leases' namespace must be named: not -n's, nor
	// the context's, nor "default", where others may write Leases.
	if podNamespace() == "" {
		args := []string{"serve", "configmaps", "-n", "ops", "--shard-group", "g"}
		code, stdout, stderr := runCmd(t, nil, args...)
		want := "serve: --shard-group needs --shard-namespace outside a pod: a namespace where only the group's processes may write Leases"
		if first, _, _ := strings.Cut(stderr, "\n"); code != exitUsage || !strings.Contains(first, want) || stdout != "" {
			t.Errorf("kinformer %q: exit %d, stdout %q, stderr %q; want %d and %q first", args, code, stdout, stderr, exitUsage, want)
		}
	}
	code, stdout, _ := runCmd(t, nil, "serve", "--help")
	for _, want := range []string{"--shard-group NAME", "--shard-namespace NAMESPACE", "--shard-members PATTERN", "Whoever else may write Leases in", "--shard-identity", "HOSTNAME-PID", "--lease-duration duration", "(default 15s)", `cause "reshard"`, "kinformer.io/shard-group=NAME"} {
		if code != 0 || !strings.Contains(stdout, want) {
			t.Errorf("serve --help (exit %d) lacks %q", code, want)
		}
	}
}

// A user who may not keep Leases where the group's go is told so, before
// anything starts, not left waiting for a share.
func TestServeShardForbidden(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	// The Leases' namespace is the pod's (POD_NAMESPACE, as the downward
	// API sets it) when --shard-namespace is not given.
	code, stdout, stderr := runCmd(t, []string{"POD_NAMESPACE=" + testenv.AllowedNamespace}, "serve", "configmaps", "-n", testenv.AllowedNamespace, "--as", testenv.RestrictedUser,
		"--shard-group", "g", "--listen", "127.0.0.1:0", kubeconfigArg(srv))
	want := "serve: --shard-group: may not get, list, create, update or delete leases.coordination.k8s.io in namespace " + testenv.AllowedNamespace +
		", as a member of a shard group must (--shard-namespace chooses the namespace)"
	if code != exitForbidden || !strings.Contains(stderr, want) || stdout != "" || strings.Contains(stderr, "serving") {
		t.Errorf("exit %d, stdout %q, stderr %q; want %d and %q", code, stdout, stderr, exitForbidden, want)
	}
}

// statsResponse is /stats as the tests read it.
type statsResponse struct {
	Ready     bool            `json:"ready"`
	Sharding  *shardingStats  `json:"sharding"`
	Resources []resourceStats `json:"resources"`
}

// shardReplica is one "kinformer serve --shard-group" process.
type shardReplica struct {
	id   string
	p    *proc
	base string
}

// snapshot is what a replica serves: its objects (name: resourceVersion)
// and its /stats.
func (r *shardReplica) snapshot(t *testing.T) (map[string]string, statsResponse) {
	t.Helper()
	var st statsResponse
	getJSON(t, r.base+"stats", 200, &st)
	var l listResponse
	getJSON(t, r.base+"objects?resource=configmaps", 200, &l)
	objs := map[string]string{}
	for _, it := range l.Items {
		md := it["metadata"].(map[string]any)
		objs[md["name"].(string)] = md["resourceVersion"].(string)
	}
	return objs, st
}

// recent returns the replica's feed of configmaps events, checked to be
// complete (the ring has dropped none).
func (r *shardReplica) recent(t *testing.T) []feedEvent {
	t.Helper()
	var out struct{ Events []feedEvent }
	getJSON(t, r.base+"events/recent?resource=configmaps", 200, &out)
	if len(out.Events) > 0 && out.Events[0].Seq != 1 {
		t.Fatalf("%s: the feed starts at seq %d: events were dropped (raise --recent-events)", r.id, out.Events[0].Seq)
	}
	return out.Events
}

// waitPartition waits until the replicas are synced, each filtering by
// mode, each seeing exactly rs as the group's members, and their caches
// are disjoint with the server's objects (want) as their union; it returns
// how many objects each holds.
func waitPartition(t *testing.T, rs []*shardReplica, want map[string]string, mode string, timeout time.Duration) map[string]int {
	t.Helper()
	var ids []string
	for _, r := range rs {
		ids = append(ids, r.id)
	}
	slices.Sort(ids)
	deadline := time.Now().Add(timeout)
	last := ""
	for {
		problem := ""
		union := map[string]string{}
		counts := map[string]int{}
		var states []string
		for _, r := range rs {
			objs, st := r.snapshot(t)
			counts[r.id] = len(objs)
			rs0 := st.Resources[0]
			states = append(states, fmt.Sprintf("%s: %d objects, %+v, %+v", r.id, len(objs), st.Sharding, rs0.Shard))
			switch {
			case problem != "":
			case st.Sharding == nil || rs0.Shard == nil:
				problem = r.id + ": /stats without sharding"
			case !rs0.Synced:
				problem = r.id + " not synced"
			case rs0.Shard.Mode != mode:
				problem = fmt.Sprintf("%s: mode %q", r.id, rs0.Shard.Mode)
			case !slices.Equal(st.Sharding.Members, ids):
				problem = fmt.Sprintf("%s: members %v", r.id, st.Sharding.Members)
			}
			for k, v := range objs {
				if _, dup := union[k]; dup && problem == "" {
					problem = k + " held by two replicas"
				}
				union[k] = v
			}
		}
		if problem == "" && !maps.Equal(union, want) {
			problem = fmt.Sprintf("the union of %d objects is not the server's %d", len(union), len(want))
		}
		if problem == "" {
			return counts
		}
		if problem != last {
			t.Logf("waiting: %s", problem)
			last = problem
		}
		if time.Now().After(deadline) {
			t.Fatalf("no partition after %v: %s\n%s", timeout, problem, strings.Join(states, "\n"))
		}
		time.Sleep(100 * time.Millisecond)
	}
}

// owned is an interval in which a replica held an object: from its ADDED
// to its DELETED, as the replica's handlers saw them.
type owned struct {
	replica    string
	start, end time.Time // end zero: still held
	cause      string    // of the ADDED
}

// ownership returns, by object name, the intervals in which the replica
// held it, from its feed; an interval still open ends at end (zero: still
// held). It fails on an ADDED of an object held, or a DELETED of one not.
func ownership(t *testing.T, id string, events []feedEvent, end time.Time) map[string][]owned {
	t.Helper()
	open := map[string]owned{}
	out := map[string][]owned{}
	for _, e := range events {
		switch e.Type {
		case kinformer.Added:
			if _, ok := open[e.Name]; ok {
				t.Errorf("%s: ADDED (%s) of %s, which it held", id, e.Cause, e.Name)
			}
			open[e.Name] = owned{replica: id, start: e.Time, cause: e.Cause}
		case kinformer.Deleted:
			o, ok := open[e.Name]
			if !ok {
				t.Errorf("%s: DELETED (%s) of %s, which it did not hold", id, e.Cause, e.Name)
				continue
			}
			o.end = e.Time
			out[e.Name] = append(out[e.Name], o)
			delete(open, e.Name)
		}
	}
	for name, o := range open {
		o.end = end
		out[name] = append(out[name], o)
	}
	return out
}

// held returns the objects whose last interval is open at end.
func held(own map[string][]owned, end time.Time) map[string]bool {
	out := map[string]bool{}
	for name, os := range own {
		if os[len(os)-1].end.Equal(end) {
			out[name] = true
		}
	}
	return out
}

// checkNoOverlap fails if two replicas held an object at once.
func checkNoOverlap(t *testing.T, owns ...map[string][]owned) {
	t.Helper()
	forever := time.Now().Add(24 * time.Hour)
	endOf := func(o owned) time.Time {
		if o.end.IsZero() {
			return forever
		}
		return o.end
	}
	byName := map[string][]owned{}
	for _, own := range owns {
		for name, os := range own {
			byName[name] = append(byName[name], os...)
		}
	}
	bad := 0
	for name, os := range byName {
		sort.Slice(os, func(i, j int) bool { return os[i].start.Before(os[j].start) })
		for i := 1; i < len(os); i++ {
			prev := os[i-1]
			for _, p := range os[:i] {
				if endOf(p).After(endOf(prev)) {
					prev = p
				}
			}
			if !os[i].start.After(endOf(prev)) {
				bad++
				if bad <= 10 {
					t.Errorf("%s: %s held it from %s to %s, and %s from %s (ADDED, %s)", name,
						prev.replica, prev.start.Format(time.StampMicro), endOf(prev).Format(time.StampMicro),
						os[i].replica, os[i].start.Format(time.StampMicro), os[i].cause)
				}
			}
		}
	}
	if bad > 0 {
		t.Errorf("%d objects held by two replicas at once", bad)
	}
}

// Three serve processes of one shard group split 300 ConfigMaps: disjoint
// caches whose union is the server's, none above 60 %, filtered by the
// client (the shared server has no ShardedListAndWatch). One is killed
// (SIGKILL): within --lease-duration + 15 s the two others hold everything;
// one of them is interrupted: it gives its share up, deletes its Lease,
// and the last takes everything over at once. Throughout, by the feeds'
// times, no object is held by two live replicas at once, and the killed
// one's objects are ADDED (cause reshard) to the others only after it died.
func TestServeSharded(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	const n = 300
	var g errgroup.Group
	g.SetLimit(8)
	for i := range n {
		g.Go(func() error {
			_, err := c.CoreV1().ConfigMaps(ns).Create(context.Background(), &corev1.ConfigMap{
				ObjectMeta: metav1.ObjectMeta{Name: fmt.Sprintf("cm-%03d", i)},
				Data:       map[string]string{"v": strings.Repeat("x", 100)},
			}, metav1.CreateOptions{})
			return err
		})
	}
	if err := g.Wait(); err != nil {
		t.Fatal(err)
	}
	list, err := c.CoreV1().ConfigMaps(ns).List(context.Background(), metav1.ListOptions{})
	if err != nil {
		t.Fatal(err)
	}
	want := map[string]string{}
	for _, cm := range list.Items {
		want[cm.Name] = cm.ResourceVersion
	}

	const group, leaseDuration = "serve-test", 5 * time.Second
	startReplica := func(id string) *shardReplica {
		p, base := startServe(t, "configmaps", "-n", ns, "--shard-group", group, "--shard-namespace", ns, "--shard-identity", id,
			"--lease-duration", leaseDuration.String(), "--recent-events", "5000", "--kube-api", kubeconfigArg(srv))
		if !strings.Contains(p.stderr.String(), fmt.Sprintf("shard group %s as %s (Leases in namespace %s)", group, id, ns)) {
			t.Errorf("%s: stderr does not name the group:\n%s", id, p.stderr)
		}
		return &shardReplica{id: id, p: p, base: base}
	}
	a, b, cr := startReplica("replica-a"), startReplica("replica-b"), startReplica("replica-c")
	began := time.Now()
	counts := waitPartition(t, []*shardReplica{a, b, cr}, want, "client", 60*time.Second)
	t.Logf("partition after %v: %v", time.Since(began).Round(time.Millisecond), counts)
	total := 0
	for id, k := range counts {
		total += k
		if k > n*60/100 || k == 0 {
			t.Errorf("%s holds %d of %d objects", id, k, n)
		}
	}
	slotSum := 0
	for _, r := range []*shardReplica{a, b, cr} {
		_, st := r.snapshot(t)
		sh := st.Sharding
		if sh.Group != group || sh.Identity != r.id || sh.Namespace != ns || sh.Total != sharding.DefaultSlots || sh.Fenced ||
			sh.Slots == 0 || !strings.HasPrefix(sh.Ranges, "[0x") || st.Resources[0].Shard.Ranges != sh.Ranges || !st.Ready {
			t.Errorf("%s: /stats %+v, configmaps' shard %+v", r.id, sh, st.Resources[0].Shard)
		}
		slotSum += sh.Slots
		resp, err := http.Get(r.base + "metrics")
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		for _, line := range []string{
			fmt.Sprintf("kinformer_sharding_members{group=%q} 3", group),
			fmt.Sprintf("kinformer_sharding_slots{group=%q} %d", group, sh.Slots),
			fmt.Sprintf("kinformer_sharding_fenced{group=%q} 0", group),
		} {
			if !strings.Contains(string(body), line+"\n") {
				t.Errorf("%s: /metrics lacks %q", r.id, line)
			}
		}
	}
	if slotSum != sharding.DefaultSlots {
		t.Errorf("the replicas serve %d slots in all, want %d", slotSum, sharding.DefaultSlots)
	}
	// Through --kube-api each lists its share, and says so in a Warning
	// header (client-go logs it, kubectl prints it).
	for _, r := range []*shardReplica{a, b, cr} {
		objs, _ := r.snapshot(t)
		resp, err := http.Get(r.base + "api/v1/namespaces/" + ns + "/configmaps")
		if err != nil {
			t.Fatal(err)
		}
		var l corev1.ConfigMapList
		err = json.NewDecoder(resp.Body).Decode(&l)
		resp.Body.Close()
		listed := map[string]string{}
		for _, cm := range l.Items {
			listed[cm.Name] = cm.ResourceVersion
		}
		if err != nil || resp.StatusCode != 200 || !maps.Equal(listed, objs) {
			t.Errorf("%s: --kube-api lists %d configmaps (%d, %v), its cache holds %d", r.id, len(listed), resp.StatusCode, err, len(objs))
		}
		if w := resp.Header.Get("Warning"); !strings.Contains(w, "this replica serves its share of configmaps only ("+group+")") {
			t.Errorf("%s: --kube-api's Warning %q does not say it serves a share", r.id, w)
		}
	}

	// SIGKILL replica-b; its feed as it was just before (the partition is
	// steady: nothing changes meanwhile).
	bObjs, _ := b.snapshot(t)
	bEvents := b.recent(t)
	if err := b.p.cmd.Process.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	b.p.wait(10 * time.Second)
	counts = waitPartition(t, []*shardReplica{a, cr}, want, "client", leaseDuration+15*time.Second)
	t.Logf("replica-b's share taken over %v after SIGKILL: %v", time.Since(killed).Round(time.Millisecond), counts)
	bOwn := ownership(t, b.id, bEvents, killed)
	if h := held(bOwn, killed); !maps.Equal(h, keys(bObjs)) {
		t.Errorf("replica-b's feed says it held %d objects, its cache %d", len(h), len(bObjs))
	}

	// Interrupt replica-c while reading its feed: DELETED (reshard) for
	// every object it held, then the shutdown; its Lease is deleted and
	// replica-a takes everything over without waiting for it to expire.
	cObjs, _ := cr.snapshot(t)
	feed := readFeed(t, cr.base+"events/feed?resource=configmaps")
	if err := cr.p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	interrupted := time.Now()
	if code := cr.p.wait(30 * time.Second); code != 0 {
		t.Errorf("replica-c: exit %d after SIGINT; stderr:\n%s", code, cr.p.stderr)
	}
	cEvents := feed.wait(t)
	exited := time.Now()
	counts = waitPartition(t, []*shardReplica{a}, want, "client", leaseDuration+15*time.Second)
	took := time.Since(interrupted)
	t.Logf("replica-c's share taken over %v after SIGINT: %v", took.Round(time.Millisecond), counts)
	if took >= leaseDuration {
		t.Errorf("replica-c's share taken over %v after SIGINT, not before its Lease could expire (%v): was the Lease deleted?", took, leaseDuration)
	}
	leases, err := c.CoordinationV1().Leases(ns).List(context.Background(), metav1.ListOptions{LabelSelector: sharding.GroupLabel + "=" + group})
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range leases.Items {
		if h := l.Spec.HolderIdentity; h != nil && *h == cr.id {
			t.Errorf("replica-c's Lease %s is still there after it stopped", l.Name)
		}
	}
	cOwn := ownership(t, cr.id, cEvents, exited)
	if h := held(cOwn, exited); len(h) > 0 {
		t.Errorf("replica-c exited holding %d objects without a DELETED for them (of %d)", len(h), len(cObjs))
	}
	for _, e := range cEvents {
		if e.Time.After(interrupted) && (e.Type != kinformer.Deleted || e.Cause != "reshard") {
			t.Errorf("replica-c after SIGINT: %s (%s) of %s, want DELETED (reshard)", e.Type, e.Cause, e.Name)
		}
	}

	aOwn := ownership(t, a.id, a.recent(t), time.Time{})
	checkNoOverlap(t, aOwn, bOwn, cOwn)
	// What replica-b held at its death came to the others only after it,
	// as reshards.
	for name := range held(bOwn, killed) {
		var next *owned
		for _, own := range []map[string][]owned{aOwn, cOwn} {
			for _, o := range own[name] {
				if o.start.After(killed) && (next == nil || o.start.Before(next.start)) {
					next = &o
				}
			}
		}
		switch {
		case next == nil:
			t.Errorf("%s, held by replica-b when it was killed, was never ADDED to another", name)
		case next.cause != "reshard" || next.start.Sub(killed) > leaseDuration+15*time.Second:
			t.Errorf("%s, held by replica-b when it was killed, ADDED to %s %v later (%s)", name, next.replica, next.start.Sub(killed), next.cause)
		}
	}
	if code := a.p.interrupt(); code != 0 {
		t.Errorf("replica-a: exit %d after SIGINT; stderr:\n%s", code, a.p.stderr)
	}
}

func keys(m map[string]string) map[string]bool {
	out := map[string]bool{}
	for k := range m {
		out[k] = true
	}
	return out
}

// feedReader collects a /events/feed stream until its shutdown event.
type feedReader struct {
	done   chan struct{}
	events []feedEvent
	err    error
}

func readFeed(t *testing.T, url string) *feedReader {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	if resp.StatusCode != 200 {
		t.Fatalf("GET %s: %d", url, resp.StatusCode)
	}
	f := &feedReader{done: make(chan struct{})}
	first := make(chan struct{})
	go func() {
		defer close(f.done)
		defer resp.Body.Close()
		sc := bufio.NewScanner(resp.Body)
		sc.Buffer(make([]byte, 1<<16), 1<<20)
		event := ""
		for sc.Scan() {
			l := sc.Text()
			if l == ": feed" {
				close(first)
			}
			switch k, v, _ := strings.Cut(l, ": "); {
			case k == "event":
				event = v
			case k == "data" && event == "shutdown":
				return
			case k == "data" && event == "":
				var e feedEvent
				if err := json.Unmarshal([]byte(v), &e); err != nil {
					f.err = err
					return
				}
				f.events = append(f.events, e)
			case l == "":
				event = ""
			}
		}
		f.err = fmt.Errorf("the feed ended without a shutdown event: %v", sc.Err())
	}()
	select {
	case <-first:
	case <-f.done:
		t.Fatalf("feed: %v", f.err)
	}
	return f
}

// wait returns the events once the stream has ended.
func (f *feedReader) wait(t *testing.T) []feedEvent {
	t.Helper()
	select {
	case <-f.done:
	case <-time.After(30 * time.Second):
		t.Fatal("the feed has not ended 30s after the process exited")
	}
	if f.err != nil {
		t.Fatal(f.err)
	}
	if len(f.events) > 0 && f.events[0].Seq != 1 {
		t.Fatalf("the feed starts at seq %d: events were dropped", f.events[0].Seq)
	}
	return f.events
}

// A feed closed just after events were added (a sharded serve's DELETED
// for the share it gave up on stopping) sends them before the shutdown.
func TestServeFeedDrainsOnClose(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 8, 16)
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	f := readFeed(t, hs.URL+"/events/feed")
	for i := range 5 {
		s.recent.add(feedEvent{Resource: "configmaps", Type: kinformer.Deleted, Cause: "reshard", Namespace: "ns", Name: fmt.Sprint(i)})
	}
	s.close()
	if got := f.wait(t); len(got) != 5 || got[4].Name != "4" {
		t.Errorf("the feed sent %d events before the shutdown, want 5: %+v", len(got), got)
	}
}

// shardedServer serves one configmaps informer as a sharded serve would
// show it: the group's status and the informer's share are the test's.
func shardedServer(t *testing.T, identity string, members []string) *httptest.Server {
	t.Helper()
	cm := &unstructured.Unstructured{}
	cm.SetAPIVersion("v1")
	cm.SetKind("ConfigMap")
	cm.SetNamespace("ns")
	cm.SetName("a")
	s := mustNewServer(t, 8, 16)
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	inf := kinformer.New[*unstructured.Unstructured](kinformertest.NewServer(cm), &kinformer.Options[*unstructured.Unstructured]{Name: res.String(), Metrics: s.metrics})
	r := s.add("cm", res, "", inf)
	// Slots 0-9 and 20-31 of 64.
	const ranges = "[0x0000000000000000,0x2800000000000000) [0x5000000000000000,0x8000000000000000)"
	r.shardStatus = func() kinformer.ShardStatus {
		return kinformer.ShardStatus{Sharded: true, Mode: "client", Slots: 22, Total: 64, Ranges: ranges}
	}
	s.shard = &shardInfo{group: "g", namespace: "ops", identity: identity, status: func() sharding.Status {
		return sharding.Status{Identity: identity, Members: members, Slots: 22, Total: 64, Ranges: ranges}
	}}
	hs := httptest.NewServer(s.handler())
	t.Cleanup(hs.Close)
	t.Cleanup(s.close)
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	go func() { _ = inf.Run(ctx) }()
	return hs
}

// /stats of a sharded serve: the group, and each resource's share.
func TestServeStatsSharding(t *testing.T) {
	t.Parallel()
	hs := shardedServer(t, "b", []string{"a", "b", "c"})
	var raw map[string]json.RawMessage
	getJSON(t, hs.URL+"/stats", 200, &raw)
	wantSharding := `{"group":"g","namespace":"ops","identity":"b","members":["a","b","c"],"slots":22,"total":64,` +
		`"ranges":"[0x0000000000000000,0x2800000000000000) [0x5000000000000000,0x8000000000000000)","fenced":false}`
	if got := string(raw["sharding"]); got != wantSharding {
		t.Errorf("/stats sharding:\n%s\nwant\n%s", got, wantSharding)
	}
	var rs []map[string]json.RawMessage
	if err := json.Unmarshal(raw["resources"], &rs); err != nil || len(rs) != 1 {
		t.Fatalf("/stats resources: %s", raw["resources"])
	}
	wantShard := `{"mode":"client","slots":22,"total":64,"ranges":"[0x0000000000000000,0x2800000000000000) [0x5000000000000000,0x8000000000000000)"}`
	if got := string(rs[0]["shard"]); got != wantShard {
		t.Errorf("/stats configmaps' shard:\n%s\nwant\n%s", got, wantShard)
	}

	// Not sharded: neither.
	_, plain := revocableServer(t, "")
	raw = nil
	getJSON(t, plain.URL+"/stats", 200, &raw)
	if _, ok := raw["sharding"]; ok || strings.Contains(string(raw["resources"]), `"shard"`) {
		t.Errorf("/stats of an unsharded serve: %s", raw)
	}
}

// The page shows the group, this replica among the members, its slots and
// ranges, and each resource's share; identities are text, never markup.
func TestServePageSharding(t *testing.T) {
	t.Parallel()
	chromium := needChromium(t)
	hs := shardedServer(t, hostileImg, []string{"a", hostileImg, hostileScript})
	b := openBrowser(t, chromium, 1280, 900)
	b.navigate(hs.URL + "/")
	b.waitFor(`!$("sharding").hidden && $("count-configmaps") && $("count-configmaps").textContent === "1"`, 30*time.Second)
	var page struct {
		Group, Identity, Namespace, Share, Ranges, CardShard, CardTitle, Unit string
		Members                                                               []string
		Self                                                                  string
		Own                                                                   []int
		Slots                                                                 int
	}
	b.must(`({
		group: $("sh-group").textContent, identity: $("sh-identity").textContent, namespace: $("sh-namespace").textContent,
		share: $("sh-share").textContent, ranges: $("sh-ranges").textContent,
		cardShard: document.querySelector(".card .shard").textContent, cardTitle: document.querySelector(".card .shard").title,
		unit: document.querySelector(".card .unit").textContent,
		members: [...$("sh-members").children].map((m) => m.textContent),
		self: $("sh-members").querySelector(".self").textContent,
		own: [...$("sh-strip").children].flatMap((s, i) => s.className === "own" ? [i] : []),
		slots: $("sh-strip").children.length,
	})`, &page)
	var want []int
	for i := range 64 {
		if i < 10 || i >= 20 && i < 32 {
			want = append(want, i)
		}
	}
	const ranges = "[0x0000000000000000,0x2800000000000000) [0x5000000000000000,0x8000000000000000)"
	if page.Group != "g" || page.Identity != hostileImg || page.Namespace != "ops" || page.Self != hostileImg ||
		!slices.Equal(page.Members, []string{"a", hostileImg, hostileScript}) ||
		page.Share != "22 of 64 slots (34 % of the hash space)" || page.Ranges != ranges ||
		page.Slots != 64 || !slices.Equal(page.Own, want) ||
		page.CardShard != "share 22/64 slots · filtered here" || page.CardTitle != "hash ranges: "+ranges ||
		page.Unit != "objects in this replica's share" {
		t.Errorf("the page shows %+v", page)
	}
	var ok bool
	if b.must(noMarkup+` && ["sh-group", "sh-identity", "sh-namespace", "sh-share", "sh-ranges"].every((id) => $(id).children.length === 0) &&
		[...$("sh-members").children].every((m) => m.children.length === 0)`, &ok); !ok {
		t.Errorf("hostile content became markup")
	}
}

// /readyz of a sharded serve: fenced, and a resource waiting for its
// first share, each say so.
func TestServeShardReadiness(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 8, 16)
	res := resource{gvr: schema.GroupVersionResource{Version: "v1", Resource: "configmaps"}, kind: "ConfigMap", namespaced: true}
	inf := kinformer.New[*unstructured.Unstructured](kinformertest.NewServer[*unstructured.Unstructured](), nil)
	r := s.add("cm", res, "", inf)
	r.shardStatus = func() kinformer.ShardStatus { return kinformer.ShardStatus{Sharded: true, Total: 64} }
	s.shard = &shardInfo{group: "g", namespace: "ops", identity: "a", status: func() sharding.Status {
		return sharding.Status{Identity: "a", Total: 64, Ranges: "none", Fenced: true}
	}}
	want := []string{
		"shard group g: fenced: the Lease could not be renewed in time; serving nothing until it is",
		"configmaps: not synced: waiting for a share of the shard group",
	}
	if got := s.health(); !slices.Equal(got, want) {
		t.Errorf("health: %q, want %q", got, want)
	}
}

// /readyz of a sharded serve whose group has a member serving nothing,
// or Leases it ignores: still ready (what it serves is synced), and its
// details say so; /stats lists both.
func TestServeShardNotServingNotes(t *testing.T) {
	t.Parallel()
	s := mustNewServer(t, 8, 16)
	s.shard = &shardInfo{group: "g", namespace: "ops", identity: "a", status: func() sharding.Status {
		return sharding.Status{Identity: "a", Members: []string{"a", "intruder"}, Slots: 32, Total: 64, Ranges: "r",
			NotServing: []string{"intruder"}, Ignored: []string{"g-other"}}
	}}
	if got := s.health(); len(got) != 0 {
		t.Errorf("health: %q, want ready", got)
	}
	want := []string{
		"shard group g: members not serving their share (no process caches its objects): intruder",
		"shard group g: Leases ignored (their holders are not allowed members): g-other",
	}
	if got := s.notes(); !slices.Equal(got, want) {
		t.Errorf("notes: %q, want %q", got, want)
	}
	st := s.shard.stats()
	if !slices.Equal(st.NotServing, []string{"intruder"}) || !slices.Equal(st.Ignored, []string{"g-other"}) {
		t.Errorf("/stats sharding: not serving %q, ignored %q", st.NotServing, st.Ignored)
	}
}

// serve --shard-members: a Lease labelled with the group whose holder
// does not match is ignored (issue 44): the one process serves every
// slot, and /stats names the Lease it ignored.
func TestServeShardMembers(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	c := kubernetes.NewForConfigOrDie(srv.Config())
	const group = "members-test"
	// A plain Lease of the group, renewed by the test: anyone who may
	// write Leases in the namespace can do this.
	id, secs := "intruder", int32(2)
	now := metav1.NewMicroTime(time.Now())
	l, err := c.CoordinationV1().Leases(ns).Create(context.Background(), &coordinationv1.Lease{
		ObjectMeta: metav1.ObjectMeta{Name: group + "-" + id, Labels: map[string]string{sharding.GroupLabel: group}},
		Spec:       coordinationv1.LeaseSpec{HolderIdentity: &id, LeaseDurationSeconds: &secs, RenewTime: &now},
	}, metav1.CreateOptions{})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	renewed := make(chan struct{})
	t.Cleanup(func() { cancel(); <-renewed })
	go func() {
		defer close(renewed)
		for ctx.Err() == nil {
			select {
			case <-ctx.Done():
				return
			case <-time.After(300 * time.Millisecond):
			}
			now := metav1.NewMicroTime(time.Now())
			l.Spec.RenewTime = &now
			if out, err := c.CoordinationV1().Leases(ns).Update(ctx, l, metav1.UpdateOptions{}); err == nil {
				l = out
			}
		}
	}()
	_, base := startServe(t, "configmaps", "-n", ns, "--shard-group", group, "--shard-namespace", ns, "--shard-identity", "replica-a",
		"--shard-members", "replica-*,other-?", "--lease-duration", "2s", kubeconfigArg(srv))
	var st statsResponse
	deadline := time.Now().Add(60 * time.Second)
	for {
		getJSON(t, base+"stats", 200, &st)
		sh := st.Sharding
		if sh != nil && slices.Equal(sh.Ignored, []string{group + "-intruder"}) && slices.Equal(sh.Members, []string{"replica-a"}) &&
			sh.Slots == sh.Total && len(sh.NotServing) == 0 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("no sign of the ignored Lease, or not every slot served: %+v", sh)
		}
		time.Sleep(200 * time.Millisecond)
	}
}
