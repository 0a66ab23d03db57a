package integration

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Two clusters under one root: B is another API server, with its own
// etcd, started with A's certificates and keys (testenv.WithPKIOf): the
// same certificate authority, the same credentials, as two clusters a
// company's CA signed. Only the kube-system namespace's uid tells them
// apart.
func TestClustersUnderOneRoot(t *testing.T) {
	a := testenv.Shared(t)
	b := testenv.New(t, testenv.WithPKIOf(a))
	if ca, cb := caOf(t, a.Config()), caOf(t, b.Config()); !bytes.Equal(ca, cb) {
		t.Fatal("the two servers do not share a certificate authority")
	}
	t.Run("StateFileIsNotRestored", func(t *testing.T) { testOneRootStateFile(t, a, b) })
	t.Run("RunningInformerNoticesTheSwitch", func(t *testing.T) { testOneRootSwitch(t, a, b, true) })
	t.Run("RunningInformerWithoutStateFileNoticesTheSwitch", func(t *testing.T) { testOneRootSwitch(t, a, b, false) })
}

func caOf(t *testing.T, cfg *rest.Config) []byte {
	t.Helper()
	if err := rest.LoadTLSFiles(cfg); err != nil {
		t.Fatal(err)
	}
	return cfg.TLSClientConfig.CAData
}

// A's state file, found by an informer of the same identity (StateKey
// pinned: what the same URL and credentials give) on B, whose
// resourceVersion is beyond the file's (so neither the history nor the
// certificate authority can tell): not restored, not for a moment.
func testOneRootStateFile(t *testing.T, a, b *testenv.Server) {
	testFileOfAnotherCluster(t, a, b, "one-root-file", "written from another cluster: kube-system uid")
}

// An informer (with a state file, or without) serves A through a name
// that is then switched to B, whose history is behind A's: its watch
// from A's resourceVersion would be accepted by B and stay silent, A's
// objects served as B's for good. It notices on the new connection (the
// kube-system uid), re-lists and diffs: A's objects Deleted, B's Added,
// an ERROR wrapping ErrAnotherHistory; the state file, if any, is B's
// after.
func testOneRootSwitch(t *testing.T, a, b *testenv.Server, withState bool) {
	ns := uniqueName("one-root-switch")
	for _, srv := range []*testenv.Server{a, b} {
		createNamespace(t, srv, ns)
	}
	ac, bc := clientset(t, a.Config()), clientset(t, b.Config())
	mustCreate(t, ac, configMap(ns, "only-a", nil, "a"))
	fromB := mustCreate(t, bc, configMap(ns, "from-b", nil, "b"))
	// A's history well ahead of B's: B accepts a watch from A's
	// resourceVersion, and sends nothing until it gets there.
	rvB, err := strconv.ParseUint(fromB.ResourceVersion, 10, 64)
	if err != nil {
		t.Fatal(err)
	}
	bumpPast(t, ac, ns, strconv.FormatUint(rvB+100, 10))

	proxy, cfg := testenv.NewCutProxy(t, a.Config())
	dir := ""
	if withState {
		dir = t.TempDir()
	}
	log := &recorder[*corev1.ConfigMap]{}
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, cfg).CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{StateDir: dir})
	reg := inf.AddHandler(log.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, "the handler has the events up to the sync", reg.HasSynced)
	if _, ok := inf.Cache().GetByKey(ns + "/only-a"); !ok {
		t.Fatalf("cache on A: %v", inf.Cache().ListKeys())
	}
	log.reset()

	if err := proxy.SwitchTo(b.Config()); err != nil {
		t.Fatal(err)
	}
	eventually(t, 2*callTimeout, "the cache to be B's", func() bool {
		_, a := inf.Cache().GetByKey(ns + "/only-a")
		_, b := inf.Cache().GetByKey(ns + "/from-b")
		return !a && b
	})
	eventually(t, callTimeout, "the handler to have the re-list", func() bool { return slices.Contains(log.causes(), "ADDED "+ns+"/from-b relist") })
	if events := log.causes(); !slices.Contains(events, "DELETED "+ns+"/only-a relist") {
		t.Fatalf("events %v, want A's objects Deleted", events)
	}
	// The switch cuts the connections: their errors come too, routine.
	var histories []error
	for _, err := range log.errs() {
		if errors.Is(err, kinformer.ErrAnotherHistory) {
			histories = append(histories, err)
		}
	}
	if len(histories) != 1 || !strings.Contains(histories[0].Error(), "kube-system uid") {
		t.Fatalf("errors %v, want one ErrAnotherHistory naming the kube-system uids", log.errs())
	}
	t.Logf("after the switch: %s", histories[0])
	inf.Stop()
	if !withState {
		return
	}

	// The state file is B's now: restored on B without a word.
	log = &recorder[*corev1.ConfigMap]{}
	inf = kinformer.New[*corev1.ConfigMap](clientset(t, cfg).CoreV1().ConfigMaps(ns), &kinformer.Options[*corev1.ConfigMap]{StateDir: dir})
	reg = inf.AddHandler(log.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	eventually(t, callTimeout, "the handler has the events up to the sync", reg.HasSynced)
	if events, errs := log.causes(), log.errs(); !slices.Contains(events, "ADDED "+ns+"/from-b restore") || len(errs) != 0 {
		t.Fatalf("the next run: events %v, errors %v; want B's objects restored", events, errs)
	}
}

// uniqueName is prefix with a suffix of its own, for a namespace of the
// shared server that a test run again (-count) does not find there.
func uniqueName(prefix string) string {
	return fmt.Sprintf("%s-%x", prefix, time.Now().UnixNano()&0xffffff)
}

func createNamespace(t *testing.T, srv *testenv.Server, ns string) {
	t.Helper()
	if _, err := clientset(t, srv.Config()).CoreV1().Namespaces().Create(bounded(t, callTimeout), &corev1.Namespace{ObjectMeta: metav1.ObjectMeta{Name: ns}}, metav1.CreateOptions{}); err != nil {
		t.Fatal(err)
	}
}

// A client that may not read the kube-system namespace (the restricted
// user: 403) binds its state file by the certificate authority alone,
// says so at Debug, and restores the file on the next run as before.
func TestDurableWithoutKubeSystemIsBoundByTheCA(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	name := fmt.Sprintf("ca-bound-%d", time.Now().UnixNano())
	mustCreate(t, admin, configMap(testenv.AllowedNamespace, name, nil, "x"))
	t.Cleanup(func() {
		_ = admin.CoreV1().ConfigMaps(testenv.AllowedNamespace).Delete(bounded(t, callTimeout), name, metav1.DeleteOptions{})
	})
	dir := t.TempDir()
	run := func() (*recorder[*corev1.ConfigMap], string) {
		var logs lockedBuffer
		log := &recorder[*corev1.ConfigMap]{}
		inf := kinformer.New[*corev1.ConfigMap](clientset(t, srv.RestrictedConfig()).CoreV1().ConfigMaps(testenv.AllowedNamespace), &kinformer.Options[*corev1.ConfigMap]{
			StateDir: dir,
			Logger:   slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})),
		})
		reg := inf.AddHandler(log.handle)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		eventually(t, callTimeout, "the handler has the events up to the sync", reg.HasSynced)
		return log, logs.String()
	}
	_, logs := run()
	if !strings.Contains(logs, "cannot read the kube-system namespace") {
		t.Fatalf("no Debug line saying the binding is the CA alone; logs:\n%s", logs)
	}
	log, _ := run()
	if events, errs := log.causes(), log.errs(); !slices.Contains(events, "ADDED "+testenv.AllowedNamespace+"/"+name+" restore") || len(errs) != 0 {
		t.Fatalf("the next run: events %v, errors %v; want the file restored", events, errs)
	}
}

// lockedBuffer is a log destination the informer's goroutines share.
type lockedBuffer struct {
	mu  sync.Mutex // guards buf
	buf bytes.Buffer
}

func (b *lockedBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *lockedBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}
