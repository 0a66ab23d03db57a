package snapshot

import (
	"maps"
	"os"
	"path/filepath"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
)

// smallSnapshot returns the bytes of a snapshot of a few entries, cut to
// the pages bbolt uses.
func smallSnapshot(t testing.TB) []byte {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	s, err := Open(path, testID, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, &Batch{Puts: map[string][]byte{"default/a": []byte("A"), "default/b": []byte("BB"), "kube-system/c": {}}, RV: "7"})
	commit(t, s, &Batch{Puts: map[string][]byte{"default/d": []byte("DDD")}, Dels: []string{"default/b"}, RV: "8"})
	var used int64
	if err := s.db.View(func(tx *bolt.Tx) error { used = tx.Size(); return nil }); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return b[:used]
}

// FuzzLoad: whatever the file holds, Open and Load return (an error or
// entries), never panic or crash; what one Load returns, the next returns
// too; and a commit to a file Load accepted is what the next Load returns,
// or that Load fails.
func FuzzLoad(f *testing.F) {
	valid := smallSnapshot(f)
	f.Add(valid)
	f.Add([]byte{})
	for _, n := range []int{len(valid) - 1, len(valid) - 4096, len(valid) / 2, 8192, 4096, 100} {
		if n > 0 && n < len(valid) {
			f.Add(valid[:n])
		}
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		// A loop of pages could make bbolt loop forever: fail, with the
		// input, rather than hang the fuzzer.
		hung := time.AfterFunc(10*time.Second, func() { panic("Open, Load or Commit hung for 10s") })
		defer hung.Stop()
		path := filepath.Join(t.TempDir(), "s")
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		s, err := Open(path, testID, Options{NoSync: true, LockTimeout: 10 * time.Millisecond})
		if err != nil {
			return
		}
		got, rv, err := tryLoad(s)
		if err != nil {
			s.Close()
			return
		}
		again, rv2, err := tryLoad(s)
		if err != nil || rv2 != rv || !maps.Equal(again, got) {
			s.Close()
			t.Fatalf("Load gave %d entries at %q, then %d at %q, %v", len(got), rv, len(again), rv2, err)
		}
		if err := s.Close(); err != nil {
			return
		}
		if rv != "" { // else Load did not say what the file holds
			_ = commitAndCheck(t, path, got)
		}
	})
}
