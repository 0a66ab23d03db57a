package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"maps"
	"math/rand/v2"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	bolt "go.etcd.io/bbolt"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

const testID = "watch A"

// open opens path for testID, failing the test on an error, and closes it
// at the end of the test.
func open(t testing.TB, path string) *Store {
	t.Helper()
	s, err := Open(path, testID, Options{NoSync: true})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	t.Cleanup(func() { s.Close() })
	return s
}

// load returns everything Load gives, failing the test on an error.
func load(t testing.TB, s *Store) (map[string]string, string) {
	t.Helper()
	got, rv, err := tryLoad(s)
	if err != nil {
		t.Fatalf("Load: %v", err)
	}
	return got, rv
}

func tryLoad(s *Store) (map[string]string, string, error) {
	got := map[string]string{}
	var last []byte
	rv, err := s.Load(func(k, v []byte) error {
		if last != nil && bytes.Compare(last, k) >= 0 {
			return fmt.Errorf("keys out of order: %q after %q", k, last)
		}
		last = bytes.Clone(k)
		got[string(k)] = string(v)
		return nil
	})
	return got, rv, err
}

func commit(t testing.TB, s *Store, b *Batch) {
	t.Helper()
	if err := s.Commit(b); err != nil {
		t.Fatalf("Commit: %v", err)
	}
}

func TestRoundTrip(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s, err := Open(path, testID, Options{})
	if err != nil {
		t.Fatal(err)
	}
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1"), "b": []byte("2"), "c": []byte("3")}, RV: "10"})
	commit(t, s, &Batch{Puts: map[string][]byte{"b": []byte("22"), "d": {}}, Dels: []string{"a", "nope"}, RV: "11"})
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}

	s = open(t, path)
	got, rv := load(t, s)
	want := map[string]string{"b": "22", "c": "3", "d": ""}
	if rv != "11" || !maps.Equal(got, want) {
		t.Fatalf("Load = %v at %q, want %v at 11", got, rv, want)
	}
	if rv, err := s.ResourceVersion(); rv != "11" || err != nil {
		t.Fatalf("ResourceVersion = %q, %v", rv, err)
	}

	// A reset replaces everything; a key both deleted and put is put.
	commit(t, s, &Batch{Reset: true, Puts: map[string][]byte{"x": []byte("X"), "c": []byte("C")}, Dels: []string{"x"}, RV: "20"})
	got, rv = load(t, s)
	want = map[string]string{"x": "X", "c": "C"}
	if rv != "20" || !maps.Equal(got, want) {
		t.Fatalf("after reset: Load = %v at %q, want %v at 20", got, rv, want)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	s = open(t, path)
	if got, rv = load(t, s); rv != "20" || !maps.Equal(got, want) {
		t.Fatalf("reopened after reset: Load = %v at %q, want %v at 20", got, rv, want)
	}

	// A reset to no resourceVersion: nothing usable, fn is not called.
	commit(t, s, &Batch{Reset: true})
	if got, rv = load(t, s); rv != "" || len(got) != 0 {
		t.Fatalf("after an empty reset: Load = %v at %q", got, rv)
	}
}

func TestLoadFresh(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	rv, err := s.Load(func(k, v []byte) error {
		t.Errorf("fn called with %q", k)
		return nil
	})
	if rv != "" || err != nil {
		t.Fatalf("Load of a fresh file = %q, %v", rv, err)
	}
	if rv, err := s.ResourceVersion(); rv != "" || err != nil {
		t.Fatalf("ResourceVersion = %q, %v", rv, err)
	}
	// Reopening an existing empty snapshot does not rewrite it.
	s.Close()
	s = open(t, path)
	if _, rv := load(t, s); rv != "" {
		t.Fatalf("rv %q", rv)
	}
}

// Objects written while the resourceVersion is "" are not handed out, but
// are still checked.
func TestLoadNoRVChecksObjects(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1")}})
	got, rv := load(t, s)
	if rv != "" || len(got) != 0 {
		t.Fatalf("Load = %v at %q, want nothing", got, rv)
	}
}

func TestLoadFnError(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s"))
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1"), "b": []byte("2")}, RV: "5"})
	boom := errors.New("boom")
	calls := 0
	_, err := s.Load(func(k, v []byte) error { calls++; return boom })
	if !errors.Is(err, boom) || calls != 1 {
		t.Fatalf("Load = %v after %d calls, want boom after 1", err, calls)
	}
}

func TestIdentityMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1")}, RV: "5"})
	s.Close()

	other, err := Open(path, "watch B", Options{})
	if err != nil {
		t.Fatalf("Open: %v", err)
	}
	defer other.Close()
	_, err = other.Load(func(k, v []byte) error {
		t.Errorf("fn called with %q", k)
		return nil
	})
	if err == nil || !strings.Contains(err.Error(), "another watch") {
		t.Fatalf("Load with another identity = %v, want an error about another watch", err)
	}
}

func TestFormatMismatch(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1")}, RV: "5"})
	err := s.db.Update(func(tx *bolt.Tx) error {
		return tx.Bucket(bucketMeta).Put(keyFormat, []byte(strconv.Itoa(Format+1)))
	})
	if err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = open(t, path)
	if _, _, err := tryLoad(s); err == nil || !strings.Contains(err.Error(), "format") {
		t.Fatalf("Load of format %d = %v, want a format error", Format+1, err)
	}
}

func TestNotASnapshot(t *testing.T) {
	// A bbolt file of something else.
	path := filepath.Join(t.TempDir(), "s")
	db, err := bolt.Open(path, 0o600, nil)
	if err != nil {
		t.Fatal(err)
	}
	err = db.Update(func(tx *bolt.Tx) error {
		b, err := tx.CreateBucket(bucketMeta)
		if err != nil {
			return err
		}
		return b.Put([]byte("x"), []byte("y"))
	})
	db.Close()
	if err != nil {
		t.Fatal(err)
	}
	s := open(t, path)
	if _, _, err := tryLoad(s); err == nil {
		t.Fatal("Load of a bbolt file with no objects bucket succeeded")
	}
	if err := s.Commit(&Batch{RV: "1"}); err == nil {
		t.Fatal("Commit to a bbolt file with no objects bucket succeeded")
	}
}

func TestEmptyFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	if err := os.WriteFile(path, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	if s, err := Open(path, testID, Options{}); err == nil {
		s.Close()
		t.Fatal("Open of an empty file succeeded")
	}
}

func TestForeignFile(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for _, size := range []int{1, 100, 4096, 64 << 10} {
		path := filepath.Join(t.TempDir(), "s")
		b := make([]byte, size)
		for i := range b {
			b[i] = byte(r.Uint32())
		}
		if err := os.WriteFile(path, b, 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(path, testID, Options{}); err == nil {
			_, _, err = tryLoad(s)
			s.Close()
			if err == nil {
				t.Fatalf("%d random bytes: Open and Load succeeded", size)
			}
		}
	}
}

// bigSnapshot writes a closed snapshot of n entries of about 1 KiB, in
// commits of 50, then a last commit that puts "last" at rv "final". It
// returns its path, its bytes and its used size: the file grows in chunks,
// and only its pages below bbolt's high-water mark are read.
func bigSnapshot(t testing.TB, n int) (path string, file []byte, used int) {
	t.Helper()
	path = filepath.Join(t.TempDir(), "s")
	s, err := Open(path, testID, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	r := rand.New(rand.NewPCG(3, 4))
	puts := map[string][]byte{}
	for i := range n {
		v := make([]byte, 900+r.IntN(250))
		for j := range v {
			v[j] = 'a' + byte(r.IntN(26))
		}
		puts[fmt.Sprintf("ns-%d/obj-%05d", i%7, i)] = v
		if len(puts) == 50 {
			commit(t, s, &Batch{Puts: puts, RV: fmt.Sprint(i)})
			puts = map[string][]byte{}
		}
	}
	puts["last"] = []byte("L")
	commit(t, s, &Batch{Puts: puts, RV: "final"})
	err = s.db.View(func(tx *bolt.Tx) error { used = int(tx.Size()); return nil })
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	file, err = os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, file, used
}

// openAndLoad opens path and loads it, returning the first error.
func openAndLoad(path string) (map[string]string, string, error) {
	s, err := Open(path, testID, Options{NoSync: true, LockTimeout: 50 * time.Millisecond})
	if err != nil {
		return nil, "", err
	}
	defer s.Close()
	return tryLoad(s)
}

// writeTemp writes b as a new file in dir: each file is new, since one
// bolt.Open panicked on stays locked (see Open).
func writeTemp(t testing.TB, dir string, b []byte) string {
	t.Helper()
	f, err := os.CreateTemp(dir, "s")
	if err == nil {
		_, err = f.Write(b)
		if cerr := f.Close(); err == nil {
			err = cerr
		}
	}
	if err != nil {
		t.Fatal(err)
	}
	return f.Name()
}

func loadBytes(t testing.TB, dir string, b []byte) (map[string]string, string, error) {
	t.Helper()
	return openAndLoad(writeTemp(t, dir, b))
}

// commitAndCheck commits a change to the snapshot at path, which holds
// want, reopens it and loads it: it returns the first error, and fails the
// test if Load succeeds with anything but the change applied.
func commitAndCheck(t testing.TB, path string, want map[string]string) error {
	t.Helper()
	was := want
	want = maps.Clone(want)
	b := &Batch{Puts: map[string][]byte{"new": []byte("N")}, RV: "next"}
	want["new"] = "N"
	n := 0
	for k := range was {
		if n++; n%3 == 0 {
			b.Dels = append(b.Dels, k)
			delete(want, k)
		} else if n%3 == 1 {
			b.Puts[k] = []byte("changed " + k)
			want[k] = "changed " + k
		}
	}
	s, err := Open(path, testID, Options{NoSync: true, LockTimeout: 50 * time.Millisecond})
	if err != nil {
		return err
	}
	err = s.Commit(b)
	if cerr := s.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return err
	}
	got, rv, err := openAndLoad(path)
	if err != nil {
		return err
	}
	if rv != "next" || !maps.Equal(got, want) {
		t.Errorf("%s: after a commit, Load gave %d entries at %q, want %d at next, and no error", path, len(got), rv, len(want))
	}
	return nil
}

func TestTruncated(t *testing.T) {
	path, full, used := bigSnapshot(t, 300)
	want, wantRV, err := openAndLoad(path)
	if err != nil || len(want) != 301 || wantRV != "final" {
		t.Fatalf("the whole file: %d entries at %q, %v", len(want), wantRV, err)
	}
	dir := t.TempDir()
	const page = 4096
	sizes := []int{used / 2, used - page, used - 1, used / 2 / page * page, 4 * page, 3*page + 1, 2 * page, page + 10, page, 100, 3}
	for _, size := range sizes {
		got, rv, err := loadBytes(t, dir, full[:size])
		if err == nil {
			t.Errorf("truncated to %d of %d bytes used: Load gave %d entries at %q, no error", size, used, len(got), rv)
		} else {
			t.Logf("truncated to %d: %v", size, err)
		}
	}

	// Only free space lost: still the same snapshot.
	if got, rv, err := loadBytes(t, dir, full[:used]); err != nil || rv != wantRV || !maps.Equal(got, want) {
		t.Fatalf("truncated to its used %d bytes: %d entries at %q, %v", used, len(got), rv, err)
	}
}

// TestCorrupted flips bytes in the used part of a valid file, one at a
// time. Each is an error from Open or Load, or changes nothing Load
// returns: a byte no reader looks at (free pages, the unused end of a
// page, the older meta page), or a branch page's key that still routes
// every present key right. Such a key may still misroute a key a later
// commit adds: that is not detectable before the commit, so the test
// requires only that the commit fails or the next Load is right or fails.
func TestCorrupted(t *testing.T) {
	first, full, used := bigSnapshot(t, 200)
	full = full[:used]
	want, wantRV, err := openAndLoad(first)
	if err != nil {
		t.Fatal(err)
	}
	if err := commitAndCheck(t, writeTemp(t, t.TempDir(), full), want); err != nil {
		t.Fatal(err)
	}
	// bbolt keeps the meta pages of the last two commits and uses the
	// newer valid one: one damaged, the file is as the commit before left
	// it, a state as good (a watch from its resourceVersion catches up).
	prev, prevRV := maps.Clone(want), "199"
	delete(prev, "last")
	dir := t.TempDir()
	r := rand.New(rand.NewPCG(5, 6))
	var tries, failed, laterFailed, older int
	offsets := []int{16 + 20, 16 + 40, 4096 + 16 + 20, 4096 + 16 + 40} // in each meta page: its root, its high-water mark
	for off := 0; off < used; off += 2500 + r.IntN(5000) {
		offsets = append(offsets, off)
	}
	for _, off := range offsets {
		b := bytes.Clone(full)
		b[off] ^= byte(1 + r.IntN(255))
		tries++
		path := writeTemp(t, dir, b)
		got, rv, err := openAndLoad(path)
		if err != nil {
			failed++
			if testing.Verbose() {
				t.Logf("byte %d: %v", off, err)
			}
			continue
		}
		if rv == prevRV && maps.Equal(got, prev) {
			older++
			continue
		}
		if !maps.Equal(got, want) || rv != wantRV {
			t.Errorf("byte %d (page %d) flipped: Load gave %d entries at %q, no error", off, off/4096, len(got), rv)
			continue
		}
		// Unseen by Load, but it may be in a page a commit reads (a
		// branch key guides Get and Put): the next Load is right or an
		// error.
		if err := commitAndCheck(t, path, want); err != nil {
			laterFailed++
			if testing.Verbose() {
				t.Logf("byte %d, after a commit: %v", off, err)
			}
		}
	}
	t.Logf("%d corruptions tried: %d detected by Open or Load, %d after a commit, %d the previous commit, the others harmless", tries, failed, laterFailed, older)
	if older == 0 {
		t.Error("no damaged meta page fell back to the previous commit")
	}
}

func TestInUse(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1")}, RV: "5"})

	// bbolt's flock belongs to an open file description, so a second Open
	// conflicts even within one process.
	const timeout = 200 * time.Millisecond
	start := time.Now()
	s2, err := Open(path, testID, Options{LockTimeout: timeout})
	took := time.Since(start)
	if err == nil {
		s2.Close()
		t.Fatal("a second Open of a file in use succeeded")
	}
	if !errors.Is(err, ErrInUse) {
		t.Fatalf("a second Open = %v, want ErrInUse", err)
	}
	if took < timeout/2 || took > timeout+2*time.Second {
		t.Errorf("ErrInUse after %v, want about %v", took, timeout)
	}

	// Once the first lets go, the file opens, unchanged.
	s.Close()
	s2, err = Open(path, testID, Options{LockTimeout: timeout})
	if err != nil {
		t.Fatalf("Open after Close: %v", err)
	}
	defer s2.Close()
	if got, rv := load(t, s2); rv != "5" || got["a"] != "1" || len(got) != 1 {
		t.Fatalf("Load = %v at %q", got, rv)
	}
}

// TestRandomCommits checks the file against a model after each of many
// random commits; Load checks the checksum and count each time.
func TestRandomCommits(t *testing.T) {
	path := filepath.Join(t.TempDir(), "s")
	s := open(t, path)
	r := rand.New(rand.NewPCG(7, 8))
	model := map[string]string{}
	key := func() string { return fmt.Sprintf("k%02d", r.IntN(60)) }
	for i := range 300 {
		b := &Batch{Puts: map[string][]byte{}, RV: fmt.Sprint(i + 1)}
		if r.IntN(25) == 0 {
			b.Reset = true
			clear(model)
		}
		for range r.IntN(8) {
			k := key()
			b.Dels = append(b.Dels, k) // sometimes twice, sometimes absent
			delete(model, k)
		}
		for range r.IntN(8) {
			k := key()
			v := strings.Repeat(string(rune('a'+r.IntN(26))), r.IntN(3000))
			b.Puts[k] = []byte(v)
			model[k] = v
		}
		commit(t, s, b)
		if i%10 == 9 {
			s.Close()
			s = open(t, path)
		}
		got, rv := load(t, s)
		if rv != b.RV || !maps.Equal(got, model) {
			t.Fatalf("commit %d: Load = %d entries at %q, want %d at %q", i, len(got), rv, len(model), b.RV)
		}
	}
}

// A commit that fails (an empty key) changes nothing.
func TestCommitFailsWhole(t *testing.T) {
	s := open(t, filepath.Join(t.TempDir(), "s"))
	commit(t, s, &Batch{Puts: map[string][]byte{"a": []byte("1")}, RV: "1"})
	if err := s.Commit(&Batch{Puts: map[string][]byte{"b": []byte("2"), "": []byte("x")}, Dels: []string{"a"}, RV: "2"}); err == nil {
		t.Fatal("a commit with an empty key succeeded")
	}
	if got, rv := load(t, s); rv != "1" || !maps.Equal(got, map[string]string{"a": "1"}) {
		t.Fatalf("Load = %v at %q", got, rv)
	}
}

// A file bolt.Open panics on (a freelist page cut off) is an error, and
// costs no file descriptor.
func TestDamagedOpenKeepsNoDescriptor(t *testing.T) {
	if _, err := os.Stat("/proc/self/fd"); err != nil {
		t.Skip("no /proc/self/fd")
	}
	_, full, _ := bigSnapshot(t, 300)
	fds := func() int {
		e, err := os.ReadDir("/proc/self/fd")
		if err != nil {
			t.Fatal(err)
		}
		return len(e)
	}
	before := fds()
	for range 10 {
		path := filepath.Join(t.TempDir(), "s")
		if err := os.WriteFile(path, full[:4*4096], 0o600); err != nil {
			t.Fatal(err)
		}
		if s, err := Open(path, testID, Options{}); err == nil {
			s.Close()
			t.Fatal("Open of a file cut to 4 pages succeeded")
		}
	}
	if after := fds(); after > before+2 {
		t.Fatalf("%d open descriptors before 10 failed Opens, %d after", before, after)
	}
}
