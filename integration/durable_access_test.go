package integration

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Who may have a restored cache, against the real API server: only a
// client the server lets list the resource now, only from a file that is
// its user's own, in a directory no one else can write.

// grantConfigMaps lets the restricted user get, list and watch ConfigMaps
// in ns, once the server applies it; revoke takes that back, once applied.
func grantConfigMaps(t *testing.T, srv *testenv.Server, ns string) (revoke func()) {
	t.Helper()
	return grantResource(t, srv, ns, schema.GroupVersionResource{Version: "v1", Resource: "configmaps"})
}

// grantResource lets the restricted user get, list and watch gvr in ns,
// once the server applies it; revoke takes that back, once applied.
func grantResource(t *testing.T, srv *testenv.Server, ns string, gvr schema.GroupVersionResource) (revoke func()) {
	t.Helper()
	return srv.Grant(t, ns, gvr)
}

// restoredEvents are rec's events restored from a state file.
func restoredEvents(rec *recorder[*corev1.ConfigMap]) []string {
	var out []string
	for _, e := range rec.all() {
		if e.Cause == kinformer.CauseRestore {
			out = append(out, e.Object.GetName())
		}
	}
	return out
}

// stateFile returns the one state file in dir, and its bytes.
func stateFile(t *testing.T, dir string) (string, []byte) {
	t.Helper()
	files, _ := filepath.Glob(filepath.Join(dir, "*.kinformer"))
	if len(files) != 1 {
		t.Fatalf("state files in %s: %v, want one", dir, files)
	}
	b, err := os.ReadFile(files[0])
	if err != nil {
		t.Fatal(err)
	}
	return files[0], b
}

// A file written while the user could read the configmaps, then the Role
// revoked: a new informer restores nothing (no object in the cache, no
// restored event), WaitForSync returns the 403, and the file is left as
// it was, byte for byte. Granted again, the informer restores it then.
func TestDurableRevokedRole(t *testing.T) {
	bothWays(t, testDurableRevokedRole)
}

func testDurableRevokedRole(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	admin := clientset(t, srv.Config())
	for _, n := range []string{"a", "b", "c"} {
		mustCreate(t, admin, configMap(ns, n, nil, "secret-"+n))
	}
	revoke := grantConfigMaps(t, srv, ns)
	dir := t.TempDir()
	first, _, _, _ := durable(t, srv.RestrictedConfig(), ns, dir)
	first.Stop()
	path, before := stateFile(t, dir)
	revoke()

	inf := kinformer.New[*corev1.ConfigMap](clientset(t, srv.RestrictedConfig()).CoreV1().ConfigMaps(ns),
		variant(&kinformer.Options[*corev1.ConfigMap]{StateDir: dir, StateInterval: 50 * time.Millisecond}))
	rec := &recorder[*corev1.ConfigMap]{}
	inf.AddHandler(rec.handle)
	inf.Start()
	t.Cleanup(inf.Stop)
	err := inf.WaitForSync(bounded(t, callTimeout))
	if !apierrors.IsForbidden(err) || !strings.Contains(err.Error(), "forbidden") {
		t.Fatalf("WaitForSync = %v, want the 403", err)
	}
	t.Logf("WaitForSync: %v", err)
	// The informer retries (backoff from 0.6 s): give it a few.
	time.Sleep(2 * time.Second)
	if n := inf.Cache().Len(); n != 0 {
		t.Fatalf("%d objects in the cache of a client the server refuses", n)
	}
	if got := restoredEvents(rec); len(got) != 0 {
		t.Fatalf("restored events %v for a client the server refuses", got)
	}
	inf.Stop()
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("the state file: %v", err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("the state file changed")
	}

	// Granted again: restored, then caught up.
	grantConfigMaps(t, srv, ns)
	again, _, _, rec2 := durable(t, srv.RestrictedConfig(), ns, dir)
	if got := restoredEvents(rec2); len(got) != 3 {
		t.Fatalf("restored %v once allowed again, want a, b and c", got)
	}
	if again.Cache().Len() != 3 {
		t.Fatalf("%d objects, want 3", again.Cache().Len())
	}
}

// Two users, one state directory: a Factory acting as another user does
// not restore the file the first wrote, though it may list the same
// configmaps: each user has a file of its own.
func TestDurableOtherUsersFile(t *testing.T) {
	bothWays(t, testDurableOtherUsersFile)
}

func testDurableOtherUsersFile(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	admin := clientset(t, srv.Config())
	for _, n := range []string{"a", "b"} {
		mustCreate(t, admin, configMap(ns, n, nil, "x"))
	}
	grantConfigMaps(t, srv, ns)
	dir := t.TempDir()
	run := func(cfg *rest.Config) []kinformer.Event[*corev1.ConfigMap] {
		f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{StateDir: dir})
		defer f.Stop()
		inf, err := kinformer.Shared[*corev1.ConfigMap](f, ns, variant[*corev1.ConfigMap](nil))
		if err != nil {
			t.Fatal(err)
		}
		rec := &recorder[*corev1.ConfigMap]{}
		reg := inf.AddHandler(rec.handle)
		f.Start()
		if err := f.WaitForSync(bounded(t, callTimeout)); err != nil {
			t.Fatal(err)
		}
		eventually(t, 10*time.Second, "the handler to catch up with the sync", reg.HasSynced)
		return rec.all()
	}
	run(srv.Config()) // the admin fills the directory
	for _, e := range run(srv.RestrictedConfig()) {
		if e.Cause == kinformer.CauseRestore {
			t.Fatalf("the restricted user restored %s from the admin's file", e.Object.GetName())
		}
	}
	if files, _ := filepath.Glob(filepath.Join(dir, "*.kinformer")); len(files) != 2 {
		t.Fatalf("state files %v, want one per user", files)
	}
	// Each finds its own again.
	restored := 0
	for _, e := range run(srv.Config()) {
		if e.Cause == kinformer.CauseRestore {
			restored++
		}
	}
	if restored != 2 {
		t.Fatalf("the admin restored %d objects from its own file, want 2", restored)
	}
}

// A state file or directory that is not private is refused: an ERROR
// event wrapping ErrSnapshot that says why, nothing restored, the
// informer syncs by a plain list, and the file is neither read, nor set
// aside, nor changed, nor followed.
func TestDurableUnsafeState(t *testing.T) {
	bothWays(t, testDurableUnsafeState)
}

func testDurableUnsafeState(t *testing.T) {
	srv := testenv.Shared(t)
	ns := testenv.NewNamespace(t, srv.Config())
	admin := clientset(t, srv.Config())
	for _, n := range []string{"a", "b"} {
		mustCreate(t, admin, configMap(ns, n, nil, "x"))
	}
	for _, tc := range []struct {
		name  string
		root  bool                                 // needs root, to give the file away
		spoil func(t *testing.T, dir, path string) // after a first informer wrote path in dir
		check func(t *testing.T, dir, path string) // after the second
		want  string                               // in the error
	}{
		{
			name: "file owned by another user", root: true,
			spoil: func(t *testing.T, _, path string) {
				if err := os.Chown(path, 65534, -1); err != nil {
					t.Fatal(err)
				}
			},
			want: "owned by uid 65534",
		},
		{
			name: "world-writable directory",
			spoil: func(t *testing.T, dir, _ string) {
				if err := os.Chmod(dir, 0o777); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(dir, 0o700) })
			},
			want: "may write",
		},
		{
			name: "group-writable directory",
			spoil: func(t *testing.T, dir, _ string) {
				if err := os.Chmod(dir, 0o770); err != nil {
					t.Fatal(err)
				}
				t.Cleanup(func() { os.Chmod(dir, 0o700) })
			},
			want: "may write",
		},
		{
			name: "symbolic link in place of the file",
			spoil: func(t *testing.T, _, path string) {
				// Where another user would like a 1 GiB file made.
				target := filepath.Join(t.TempDir(), "victim")
				if err := os.Remove(path); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(target, path); err != nil {
					t.Fatal(err)
				}
			},
			check: func(t *testing.T, _, path string) {
				target, err := os.Readlink(path)
				if err != nil {
					t.Fatalf("the link: %v", err)
				}
				if _, err := os.Lstat(target); !errors.Is(err, os.ErrNotExist) {
					t.Fatalf("the link was followed: %s: %v", target, err)
				}
			},
			want: "symbolic link",
		},
		{
			name: "symbolic link in place of the file, to a state file",
			spoil: func(t *testing.T, _, path string) {
				// A valid state file elsewhere, of the same identity.
				other := filepath.Join(t.TempDir(), filepath.Base(path))
				if err := os.Rename(path, other); err != nil {
					t.Fatal(err)
				}
				if err := os.Symlink(other, path); err != nil {
					t.Fatal(err)
				}
			},
			want: "symbolic link",
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root, to give a file away")
			}
			dir := t.TempDir()
			first, _, _, _ := durable(t, srv.Config(), ns, dir)
			first.Stop()
			path, before := stateFile(t, dir)
			tc.spoil(t, dir, path)

			inf, lw, _, rec := durable(t, srv.Config(), ns, dir)
			if got := restoredEvents(rec); len(got) != 0 {
				t.Fatalf("restored %v", got)
			}
			if lists, _, _ := lw.calls(); len(lists) != 1 || lists[0].Limit == 1 {
				t.Fatalf("lists %+v, want one full list", lists)
			}
			if inf.Cache().Len() != 2 {
				t.Fatalf("%d objects, want 2 listed", inf.Cache().Len())
			}
			var snapErr error
			for _, e := range rec.all() {
				if e.Type == kinformer.Error && errors.Is(e.Err, kinformer.ErrSnapshot) {
					snapErr = e.Err
				}
			}
			if snapErr == nil || !strings.Contains(snapErr.Error(), tc.want) {
				t.Fatalf("ERROR event wrapping ErrSnapshot: %v, want one saying %q", snapErr, tc.want)
			}
			t.Log(snapErr)
			inf.Stop()
			if _, err := os.Lstat(path + ".bad"); err == nil {
				t.Fatal("the file was set aside")
			}
			if tc.check != nil {
				tc.check(t, dir, path)
				return
			}
			after, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			if !bytes.Equal(before, after) {
				t.Fatal("the file changed")
			}
		})
	}
}
