package integration

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"os/exec"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// The durable cache across real processes: the informer runs in a child
// process (this test binary, re-executed as TestDurableChild), which the
// test stops cleanly or kills with SIGKILL.

const childEnv = "KINFORMER_DURABLE_CHILD" // kubeconfig|namespace|state dir|interval|plain or compact

// TestDurableChild is the child process, not a test: it runs an informer
// with a StateDir (Compact in the parent's compact variant) and prints,
// one per line, "EV type name rv cause" for every object event, "ERR
// snapshot|other message" for Error events, "SYNCED" once synced and
// "COMMITTED" once its state file holds a commit, "COMMITTED SINCE SYNC"
// once it holds one begun after the sync. It stops cleanly when
// its stdin closes.
func TestDurableChild(t *testing.T) {
	spec := os.Getenv(childEnv)
	if spec == "" {
		t.Skip("the child process of the durable-cache tests")
	}
	parts := strings.Split(spec, "|")
	cfg, err := clientcmd.BuildConfigFromFlags("", parts[0])
	if err != nil {
		t.Fatal(err)
	}
	interval, err := time.ParseDuration(parts[3])
	if err != nil {
		t.Fatal(err)
	}
	c, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	say := func(format string, args ...any) {
		mu.Lock()
		defer mu.Unlock()
		fmt.Fprintf(out, format+"\n", args...)
		out.Flush()
	}
	compactCache = parts[4] == "compact" // the parent's variant
	reg := prometheus.NewRegistry()
	metrics, err := kinformer.NewMetrics(reg)
	if err != nil {
		t.Fatal(err)
	}
	inf := kinformer.New[*corev1.ConfigMap](c.CoreV1().ConfigMaps(parts[1]), variant(&kinformer.Options[*corev1.ConfigMap]{
		StateDir: parts[2], StateInterval: interval, Metrics: metrics,
	}))
	inVariant(t, inf.Cache()) // fails the child: its parent sees it end
	handler := inf.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
		switch e.Type {
		case kinformer.Error:
			kind := "other"
			if errors.Is(e.Err, kinformer.ErrSnapshot) {
				kind = "snapshot"
			}
			say("ERR %s %s", kind, strings.ReplaceAll(e.Err.Error(), "\n", " "))
		case kinformer.Added, kinformer.Modified, kinformer.Deleted:
			say("EV %s %s %s %s", e.Type, e.Object.GetName(), e.Object.GetResourceVersion(), e.Cause)
		}
	})
	inf.Start()
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	if err := inf.WaitForSync(ctx); err != nil {
		t.Fatal(err)
	}
	for !handler.HasSynced() { // the handler has printed every event up to the sync
		time.Sleep(time.Millisecond)
	}
	synced := okCommits(reg)
	say("SYNCED")
	go func() {
		for okCommits(reg) == 0 {
			time.Sleep(5 * time.Millisecond)
		}
		say("COMMITTED")
		// A commit begun after the sync holds the list's resourceVersion:
		// one made during a pipelined list, or under way at the sync,
		// holds objects without it, which the next start does not
		// restore. (Only a child whose objects change keeps committing.)
		for okCommits(reg) < synced+2 {
			time.Sleep(5 * time.Millisecond)
		}
		say("COMMITTED SINCE SYNC")
	}()
	_, _ = io.Copy(io.Discard, os.Stdin)
	inf.Stop()
	say("STOPPED")
}

// okCommits returns how many commits of the state file reg has counted
// as ok.
func okCommits(reg *prometheus.Registry) float64 {
	mfs, _ := reg.Gather()
	n := 0.0
	for _, mf := range mfs {
		if mf.GetName() != "kinformer_state_commits_total" {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "result" && l.GetValue() == "ok" {
					n += m.GetCounter().GetValue()
				}
			}
		}
	}
	return n
}

// child is a running child process and what it has printed.
type child struct {
	cmd   *exec.Cmd
	stdin io.WriteCloser
	mu    sync.Mutex
	lines []string
	ended chan struct{}
}

func startChild(t *testing.T, kubeconfig, ns, dir string, interval time.Duration) *child {
	t.Helper()
	cmd := exec.Command(os.Args[0], "-test.run=^TestDurableChild$", "-test.count=1")
	mode := "plain"
	if compactCache {
		mode = "compact"
	}
	cmd.Env = append(os.Environ(), childEnv+"="+strings.Join([]string{kubeconfig, ns, dir, interval.String(), mode}, "|"))
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	ch := &child{cmd: cmd, ended: make(chan struct{})}
	if ch.stdin, err = cmd.StdinPipe(); err != nil {
		t.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(ch.ended)
		s := bufio.NewScanner(stdout)
		for s.Scan() {
			ch.mu.Lock()
			ch.lines = append(ch.lines, s.Text())
			ch.mu.Unlock()
		}
		_ = cmd.Wait()
	}()
	t.Cleanup(func() { ch.kill() })
	return ch
}

func (ch *child) output() []string {
	ch.mu.Lock()
	defer ch.mu.Unlock()
	return append([]string(nil), ch.lines...)
}

func (ch *child) has(line string) bool {
	for _, l := range ch.output() {
		if l == line {
			return true
		}
	}
	return false
}

func (ch *child) kill() {
	_ = ch.cmd.Process.Signal(syscall.SIGKILL)
	<-ch.ended
}

// stop closes the child's stdin, which makes it Stop its informer and exit.
func (ch *child) stop(t *testing.T) {
	t.Helper()
	ch.stdin.Close()
	select {
	case <-ch.ended:
	case <-time.After(30 * time.Second):
		t.Fatal("the child did not stop")
	}
	if !ch.has("STOPPED") {
		t.Fatalf("the child did not stop cleanly: %v", ch.output())
	}
}

func (ch *child) waitSynced(t *testing.T) {
	t.Helper()
	eventually(t, time.Minute, "the child to sync", func() bool {
		select {
		case <-ch.ended:
			t.Fatalf("the child ended: %v", ch.output())
		default:
		}
		return ch.has("SYNCED")
	})
}

// state folds the child's events: name → resourceVersion, checking each
// object's events are consistent. restored counts the leading restore
// events, and snapshotErrs the ErrSnapshot errors.
func (ch *child) state() (state map[string]string, restored int, changes []string, snapshotErrs []string, err error) {
	state = map[string]string{}
	leading := true
	for _, l := range ch.output() {
		f := strings.Fields(l)
		if f[0] == "ERR" && f[1] == "snapshot" {
			snapshotErrs = append(snapshotErrs, l)
		}
		if f[0] != "EV" {
			continue
		}
		typ, name, rv, cause := f[1], f[2], f[3], f[4]
		if leading && cause == "restore" {
			restored++
		} else {
			leading = false
			changes = append(changes, typ+" "+name+" "+cause)
		}
		_, had := state[name]
		switch typ {
		case "ADDED":
			if had {
				return nil, 0, nil, nil, fmt.Errorf("ADDED %s twice", name)
			}
			state[name] = rv
		case "MODIFIED":
			if !had {
				return nil, 0, nil, nil, fmt.Errorf("MODIFIED %s never added", name)
			}
			state[name] = rv
		case "DELETED":
			if !had {
				return nil, 0, nil, nil, fmt.Errorf("DELETED %s never added", name)
			}
			delete(state, name)
		}
	}
	return state, restored, changes, snapshotErrs, nil
}

// A child stopped cleanly and one killed with SIGKILL: the next child on
// the same StateDir restores every object, then handles exactly the
// changes made while none ran.
func TestDurableAcrossProcesses(t *testing.T) {
	bothWays(t, testDurableAcrossProcesses)
}

func testDurableAcrossProcesses(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 100 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, strings.Repeat("z", 300)))
	}
	// ticker changes while the first child runs, so that it keeps
	// committing (see the kill below); its events are left out of the
	// changes compared.
	const ticker = "ticker"
	mustCreate(t, c, configMap(ns, ticker, nil, "0"))
	for _, how := range []string{"stop", "kill"} {
		t.Run(how, func(t *testing.T) {
			dir := t.TempDir()
			first := startChild(t, srv.Kubeconfig(), ns, dir, 50*time.Millisecond)
			first.waitSynced(t)
			if how == "stop" {
				first.stop(t)
			} else {
				// A commit begun since the sync, then more after it. One
				// made during the pipelined list, or under way at the
				// sync, holds no resourceVersion and is not restored (seen
				// under load: "0 objects restored"); a child commits only
				// when something changes, so ticker does.
				last := time.Time{}
				eventually(t, time.Minute, "a commit of the state file since the sync", func() bool {
					if time.Since(last) > 100*time.Millisecond {
						mustUpdate(t, c, ns, ticker, time.Now().String())
						last = time.Now()
					}
					return first.has("COMMITTED SINCE SYNC")
				})
				time.Sleep(200 * time.Millisecond)
				first.kill()
			}
			before := serverState(t, c, ns, metav1.ListOptions{})
			var want []string
			n := 0
			for name := range before {
				if name == ticker {
					continue
				}
				switch n {
				case 0, 1:
					mustUpdate(t, c, ns, name, how)
					want = append(want, "MODIFIED "+name+" watch")
				case 2, 3:
					mustDelete(t, c, ns, name)
					want = append(want, "DELETED "+name+" watch")
				}
				n++
			}
			created := fmt.Sprintf("new-%s", how)
			mustCreate(t, c, configMap(ns, created, nil, "x"))
			want = append(want, "ADDED "+created+" watch")
			server := serverState(t, c, ns, metav1.ListOptions{})

			second := startChild(t, srv.Kubeconfig(), ns, dir, 50*time.Millisecond)
			second.waitSynced(t)
			time.Sleep(300 * time.Millisecond) // room for any spurious event
			got, restored, changes, snapErrs, err := second.state()
			if err != nil {
				t.Fatal(err)
			}
			if len(snapErrs) > 0 {
				t.Fatalf("snapshot errors: %v", snapErrs)
			}
			if restored != len(before) {
				t.Fatalf("%d objects restored, want %d", restored, len(before))
			}
			// ticker's last change before the kill may be after the last
			// commit: then it comes again, as a change.
			changes = slices.DeleteFunc(changes, func(c string) bool { return c == "MODIFIED "+ticker+" watch" })
			if strings.Join(sorted(changes), ",") != strings.Join(sorted(want), ",") {
				t.Fatalf("changes after the restore:\n got %v\nwant %v", changes, want)
			}
			if !sameState(got, server) {
				t.Fatal("the folded state differs from the server")
			}
			second.stop(t)
		})
	}
}

func sorted(s []string) []string {
	s = append([]string(nil), s...)
	for i := range s {
		for j := i + 1; j < len(s); j++ {
			if s[j] < s[i] {
				s[i], s[j] = s[j], s[i]
			}
		}
	}
	return s
}

// kill -9 at random moments while the server's objects change fast and
// the child commits every 10 ms: every file left loads (no ErrSnapshot),
// restores, and catches up to exactly the server's state.
func TestDurableKilledDuringWrites(t *testing.T) {
	bothWays(t, testDurableKilledDuringWrites)
}

func testDurableKilledDuringWrites(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 300 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, "0"))
	}
	ctx, stopWriting := context.WithCancel(t.Context())
	var writes sync.WaitGroup
	for w := range 4 {
		writes.Add(1)
		go func() {
			defer writes.Done()
			r := rand.New(rand.NewPCG(uint64(w), 7))
			for i := 0; ctx.Err() == nil; i++ {
				name := fmt.Sprintf("cm-%03d", r.IntN(300))
				cms := c.CoreV1().ConfigMaps(ns)
				switch r.IntN(4) {
				case 0:
					_ = cms.Delete(ctx, name, metav1.DeleteOptions{})
				case 1:
					_, _ = cms.Create(ctx, configMap(ns, name, nil, "new"), metav1.CreateOptions{})
				default:
					_, _ = cms.Update(ctx, configMap(ns, name, nil, fmt.Sprint(i)), metav1.UpdateOptions{})
				}
			}
		}()
	}
	defer func() { stopWriting(); writes.Wait() }()

	dir := t.TempDir()
	kills := 6
	for round := range kills + 1 {
		ch := startChild(t, srv.Kubeconfig(), ns, dir, 10*time.Millisecond)
		ch.waitSynced(t)
		_, restored, _, snapErrs, err := ch.state()
		if err != nil {
			t.Fatalf("round %d: %v", round, err)
		}
		if len(snapErrs) > 0 {
			t.Fatalf("round %d: the file left by kill -9 did not load: %v", round, snapErrs)
		}
		if round > 0 && restored == 0 {
			t.Fatalf("round %d: nothing restored", round)
		}
		if round == kills {
			stopWriting()
			writes.Wait()
			// The server's state is listed again at each look: a write
			// whose request was cancelled as the writers stopped may
			// still be applied after Wait (seen once under load: the
			// child held cm-026 at a newer resourceVersion than a list
			// made right after Wait).
			var want map[string]string
			eventually(t, 30*time.Second, "the last child to reach the server's state", func() bool {
				want = serverState(t, c, ns, metav1.ListOptions{})
				got, _, _, _, err := ch.state()
				return err == nil && sameState(got, want)
			})
			t.Logf("%d kills; the last child restored %d objects and caught up with %d", kills, restored, len(want))
			ch.stop(t)
			return
		}
		// The next child must find something to restore: a commit first
		// (under load the first one, of the whole list, may take longer
		// than the shortest wait below).
		eventually(t, time.Minute, "a commit of the state file since the sync", func() bool { return ch.has("COMMITTED SINCE SYNC") })
		time.Sleep(time.Duration(50+rand.IntN(700)) * time.Millisecond)
		ch.kill()
	}
}
