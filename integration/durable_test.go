package integration

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/testenv"
)

// The durable cache (Options.StateDir), against the real API server.

// bytesRead counts the response bytes read through the configs it wraps.
type bytesRead struct{ n atomic.Int64 }

type countingBody struct {
	io.ReadCloser
	n *atomic.Int64
}

func (b countingBody) Read(p []byte) (int, error) {
	n, err := b.ReadCloser.Read(p)
	b.n.Add(int64(n))
	return n, err
}

func (b *bytesRead) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(r *http.Request) (*http.Response, error) {
			resp, err := rt.RoundTrip(r)
			if err == nil {
				resp.Body = countingBody{resp.Body, &b.n}
			}
			return resp, err
		})
	})
	return cfg
}

// durable starts an informer over ns's configmaps keeping its state in dir,
// with a recorder registered before Start, and waits for it to sync.
func durable(t *testing.T, cfg *rest.Config, ns, dir string) (*kinformer.Informer[*corev1.ConfigMap], *counting, *bytesRead, *recorder[*corev1.ConfigMap]) {
	t.Helper()
	c, b := &counting{}, &bytesRead{}
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, c.wrap(b.wrap(cfg))).CoreV1().ConfigMaps(ns),
		variant(&kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateInterval: 50 * time.Millisecond}))
	inVariant(t, inf.Cache())
	rec := &recorder[*corev1.ConfigMap]{}
	reg := inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatalf("WaitForSync: %v", err)
	}
	// The recorder has had every event up to the sync.
	eventually(t, 10*time.Second, "the handler to catch up with the sync", reg.HasSynced)
	return inf, c, b, rec
}

// causes renders the object events of rec as "TYPE name cause", in order.
func causes(rec *recorder[*corev1.ConfigMap]) []string {
	var out []string
	for _, e := range rec.all() {
		if e.Type == kinformer.Added || e.Type == kinformer.Modified || e.Type == kinformer.Deleted {
			out = append(out, fmt.Sprintf("%s %s %s", e.Type, e.Object.GetName(), e.Cause))
		}
	}
	return out
}

// A clean stop, changes while nothing runs, and a new informer on the same
// StateDir: the restored objects, then exactly the changes, from a watch at
// the file's resourceVersion: no list but the one-object probe, and a
// fraction of a cold start's bytes. WaitForSync returns only once the
// changes are in.
func TestDurableWarmRestart(t *testing.T) {
	bothWays(t, testDurableWarmRestart)
}

func testDurableWarmRestart(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 200 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%03d", i), nil, strings.Repeat("x", 1000)))
	}
	dir := t.TempDir()
	first, _, coldBytes, _ := durable(t, srv.Config(), ns, dir)
	first.Stop()

	mustUpdate(t, c, ns, "cm-000", "changed")
	mustDelete(t, c, ns, "cm-001")
	mustDelete(t, c, ns, "cm-002")
	mustCreate(t, c, configMap(ns, "new", nil, "x"))
	want := serverState(t, c, ns, metav1.ListOptions{})

	began := time.Now()
	second, lw, warmBytes, rec := durable(t, srv.Config(), ns, dir)
	t.Logf("warm restart synced in %v", time.Since(began).Round(time.Millisecond))
	// Synced means caught up: the cache is the server's state as of start.
	if got := cacheState(second.Cache()); !sameState(got, want) {
		t.Fatalf("at WaitForSync the cache has %d objects, differing from the server's %d", len(got), len(want))
	}
	eventually(t, 10*time.Second, "all events handled", func() bool { return len(rec.all()) >= 200+4 })
	time.Sleep(200 * time.Millisecond) // room for any spurious event
	ev := causes(rec)
	restored := 0
	for _, l := range ev {
		if !strings.HasSuffix(l, " restore") {
			break
		}
		restored++
	}
	if restored != 200 {
		t.Fatalf("%d restored ADDED events first, want 200: %v", restored, ev[:min(len(ev), 5)])
	}
	changes := strings.Join(ev[restored:], ",")
	if changes != "MODIFIED cm-000 watch,DELETED cm-001 watch,DELETED cm-002 watch,ADDED new watch" {
		t.Fatalf("after the restored objects: %s", changes)
	}
	if got, err := fold(rec.all()); err != nil || !sameState(got, want) {
		t.Fatalf("handler's folded state differs from the server (%v)", err)
	}
	lists, watches, _ := lw.calls()
	if len(lists) != 1 || lists[0].Limit != 1 {
		t.Fatalf("lists on a warm restart: %+v, want only the one-object probe", lists)
	}
	if len(watches) == 0 || watches[0].ResourceVersion == "" {
		t.Fatalf("the first watch must resume from the file: %+v", watches)
	}
	t.Logf("bytes read: cold start %d, warm restart %d (%.1f%%)", coldBytes.n.Load(), warmBytes.n.Load(), 100*float64(warmBytes.n.Load())/float64(coldBytes.n.Load()))
	if warmBytes.n.Load()*10 > coldBytes.n.Load() {
		t.Fatalf("warm restart read %d bytes, cold start %d: want under a tenth", warmBytes.n.Load(), coldBytes.n.Load())
	}
}

// The same with etcd compacted while nothing runs: the watch from the
// file's resourceVersion gets 410, and a re-list diffed against the
// restored cache brings exactly the same changes.
func TestDurableRestartAfterCompaction(t *testing.T) {
	bothWays(t, testDurableRestartAfterCompaction)
}

func testDurableRestartAfterCompaction(t *testing.T) {
	srv := testenv.New(t, testenv.WithWatchCache(false))
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for _, n := range []string{"keep", "change", "gone"} {
		mustCreate(t, c, configMap(ns, n, nil, "x"))
	}
	dir := t.TempDir()
	first, _, _, _ := durable(t, srv.Config(), ns, dir)
	first.Stop()
	mustUpdate(t, c, ns, "change", "y")
	mustDelete(t, c, ns, "gone")
	mustCreate(t, c, configMap(ns, "new", nil, "x"))
	if _, err := srv.Compact(); err != nil {
		t.Fatal(err)
	}
	want := serverState(t, c, ns, metav1.ListOptions{})
	second, lw, _, rec := durable(t, srv.Config(), ns, dir)
	if got := cacheState(second.Cache()); !sameState(got, want) {
		t.Fatalf("at WaitForSync the cache differs from the server")
	}
	eventually(t, 10*time.Second, "events", func() bool { return len(causes(rec)) >= 6 })
	time.Sleep(200 * time.Millisecond)
	ev := causes(rec)
	if got := strings.Join(ev[3:], ","); len(ev) != 6 || !strings.Contains(got, "DELETED gone relist") ||
		!strings.Contains(got, "MODIFIED change relist") || !strings.Contains(got, "ADDED new relist") {
		t.Fatalf("events: %v", ev)
	}
	var expired bool
	for _, e := range rec.all() {
		expired = expired || (e.Type == kinformer.Error && errors.Is(e.Err, kinformer.ErrExpired))
	}
	if !expired {
		t.Fatal("no ERROR event with ErrExpired")
	}
	if lists, _ := lw.counts(); lists != 2 {
		t.Fatalf("%d lists, want the probe and one after 410", lists)
	}
	if got, err := fold(rec.all()); err != nil || !sameState(got, want) {
		t.Fatalf("handler's folded state differs from the server (%v)", err)
	}
}

// usedBytes reads the size of the pages bbolt uses from its current meta
// page (the file itself may be longer, preallocated): page size at byte
// 24, high-water mark at 56, transaction id at 64 of each meta page.
func usedBytes(file []byte) int {
	ps := binary.NativeEndian.Uint32(file[24:])
	m0, m1 := file[:ps], file[ps:2*ps]
	m := m0
	if binary.NativeEndian.Uint64(m1[64:]) > binary.NativeEndian.Uint64(m0[64:]) {
		m = m1
	}
	return int(binary.NativeEndian.Uint64(m[56:])) * int(ps)
}

// Damaged, empty and foreign state files: an ERROR event wrapping
// ErrSnapshot, the file set aside, a full list, the right cache.
func TestDurableBadFiles(t *testing.T) {
	bothWays(t, testDurableBadFiles)
}

func testDurableBadFiles(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for i := range 50 {
		mustCreate(t, c, configMap(ns, fmt.Sprintf("cm-%02d", i), nil, strings.Repeat("y", 500)))
	}
	good := t.TempDir()
	first, _, _, _ := durable(t, srv.Config(), ns, good)
	first.Stop()
	files, _ := filepath.Glob(filepath.Join(good, "*.kinformer"))
	if len(files) != 1 {
		t.Fatalf("state files: %v", files)
	}
	valid, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	mustDelete(t, c, ns, "cm-00")
	want := serverState(t, c, ns, metav1.ListOptions{})

	flip := func(b []byte) []byte {
		b = append([]byte(nil), b...)
		// Damage the data pages (past bbolt's two meta pages), everywhere.
		for i := 4 * 4096; i < len(b); i += 997 {
			b[i] ^= 0x5a
		}
		return b
	}
	// A snapshot of another watch: another namespace's file under this name.
	other := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(other, "stranger", nil, "x"))
	od := t.TempDir()
	o, _, _, _ := durable(t, srv.Config(), other, od)
	o.Stop()
	ofiles, _ := filepath.Glob(filepath.Join(od, "*.kinformer"))
	foreign, err := os.ReadFile(ofiles[0])
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		data []byte
	}{
		{"empty", nil},
		{"truncated", valid[:usedBytes(valid)*2/3]},
		{"truncated to one page", valid[:4096]},
		{"corrupt", flip(valid)},
		{"garbage", []byte(strings.Repeat("not a snapshot ", 2000))},
		{"foreign", foreign},
	} {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			// The directory's key names its files: the same key, the
			// same name.
			if err := copyFile(filepath.Join(good, persist.KeyFile), filepath.Join(dir, persist.KeyFile)); err != nil {
				t.Fatal(err)
			}
			path := filepath.Join(dir, filepath.Base(files[0]))
			if err := os.WriteFile(path, tc.data, 0o600); err != nil {
				t.Fatal(err)
			}
			inf, lw, _, rec := durable(t, srv.Config(), ns, dir)
			if got := cacheState(inf.Cache()); !sameState(got, want) {
				t.Fatalf("cache has %d objects, server %d", len(got), len(want))
			}
			var snapErr error
			for _, e := range rec.all() {
				if e.Type == kinformer.Error && errors.Is(e.Err, kinformer.ErrSnapshot) {
					snapErr = e.Err
				}
				if e.Cause == kinformer.CauseRestore {
					t.Fatalf("restored %s from a bad file", e.Object.GetName())
				}
			}
			if snapErr == nil {
				t.Fatal("no ERROR event wrapping ErrSnapshot")
			}
			t.Logf("%s: %v", tc.name, snapErr)
			if lists, _ := lw.counts(); lists != 1 {
				t.Fatalf("%d lists, want one full list", lists)
			}
			if _, err := os.Stat(path + ".bad"); err != nil {
				t.Fatalf("the bad file was not set aside: %v", err)
			}
			// The new file is good: a third informer restores from it.
			inf.Stop()
			again, lw2, _, rec2 := durable(t, srv.Config(), ns, dir)
			if got := cacheState(again.Cache()); !sameState(got, want) {
				t.Fatal("cache differs from the server after restoring the rewritten file")
			}
			if n := len(causes(rec2)); n < len(want) || !strings.HasSuffix(causes(rec2)[0], "restore") {
				t.Fatalf("the rewritten file did not restore: %v", causes(rec2)[:min(n, 3)])
			}
			if lists, _, _ := lw2.calls(); len(lists) != 1 || lists[0].Limit != 1 {
				t.Fatalf("lists after restoring the rewritten file: %d", len(lists))
			}
		})
	}
}

func copyFile(from, to string) error {
	b, err := os.ReadFile(from)
	if err != nil {
		return err
	}
	return os.WriteFile(to, b, 0o600)
}

// A restored informer whose resource did not change while it was down,
// while others did: the server's resourceVersion is past the file's, and
// only a bookmark can bring the watch there. It must come in seconds, not
// the minute a normal watch waits for one.
func TestDurableQuietCatchUp(t *testing.T) {
	bothWays(t, testDurableQuietCatchUp)
}

func testDurableQuietCatchUp(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(ns, "only", nil, "x"))
	dir := t.TempDir()
	first, _, _, _ := durable(t, srv.Config(), ns, dir)
	first.Stop()
	elsewhere := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, c, configMap(elsewhere, "moves-the-revision", nil, "x"))
	began := time.Now()
	second, lw, _, rec := durable(t, srv.Config(), ns, dir)
	took := time.Since(began)
	t.Logf("quiet warm restart synced in %v, at resourceVersion %s", took.Round(time.Millisecond), second.ResourceVersion())
	if took > 10*time.Second {
		t.Fatalf("a quiet warm restart took %v to sync", took)
	}
	if ev := causes(rec); len(ev) != 1 || ev[0] != "ADDED only restore" {
		t.Fatalf("events: %v", ev)
	}
	if lists, _ := lw.counts(); lists != 1 {
		t.Fatalf("%d lists, want the probe only", lists)
	}
}

// A Factory with StateDir: its typed and dynamic informers both start warm
// in a new factory, each from its own file.
func TestDurableFactory(t *testing.T) {
	bothWays(t, testDurableFactory)
}

func testDurableFactory(t *testing.T) {
	srv := testenv.Shared(t)
	c := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	for _, n := range []string{"a", "b", "c"} {
		mustCreate(t, c, configMap(ns, n, nil, "x"))
	}
	dir := t.TempDir()
	gvr := corev1.SchemeGroupVersion.WithResource("configmaps")
	run := func() (typed, dynamic []string) {
		f := kinformer.NewFactory(srv.Config(), &kinformer.FactoryOptions{StateDir: dir})
		defer f.Stop()
		ti, err := kinformer.Shared[*corev1.ConfigMap](f, ns, variant[*corev1.ConfigMap](nil))
		if err != nil {
			t.Fatal(err)
		}
		di, err := f.Dynamic(gvr, ns, variant[*unstructured.Unstructured](nil))
		if err != nil {
			t.Fatal(err)
		}
		inVariant(t, ti.Cache())
		inVariant(t, di.Cache())
		var mu sync.Mutex
		ti.AddHandler(func(e kinformer.Event[*corev1.ConfigMap]) {
			mu.Lock()
			defer mu.Unlock()
			if e.Type != kinformer.Bookmark {
				typed = append(typed, fmt.Sprintf("%s %s %s", e.Type, e.Key, e.Cause))
			}
		})
		di.AddHandler(func(e kinformer.Event[*unstructured.Unstructured]) {
			mu.Lock()
			defer mu.Unlock()
			if e.Type != kinformer.Bookmark {
				dynamic = append(dynamic, fmt.Sprintf("%s %s %s", e.Type, e.Key, e.Cause))
			}
		})
		f.Start()
		if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "events", func() bool { mu.Lock(); defer mu.Unlock(); return len(typed) >= 3 && len(dynamic) >= 3 })
		time.Sleep(200 * time.Millisecond)
		mu.Lock()
		defer mu.Unlock()
		return sorted(typed), sorted(dynamic)
	}
	run()
	mustDelete(t, c, ns, "b")
	typed, dynamic := run()
	want := []string{"ADDED " + ns + "/a restore", "ADDED " + ns + "/b restore", "ADDED " + ns + "/c restore", "DELETED " + ns + "/b watch"}
	if strings.Join(typed, ",") != strings.Join(want, ",") || strings.Join(dynamic, ",") != strings.Join(want, ",") {
		t.Fatalf("after a restart:\n typed   %v\n dynamic %v\n want    %v", typed, dynamic, want)
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.kinformer")); len(files) != 2 {
		t.Fatalf("state files: %v, want one per informer", files)
	}
}
