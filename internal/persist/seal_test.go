package persist

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer/internal/snapshot"
)

func newKey(t *testing.T) []byte {
	t.Helper()
	k := make([]byte, KeySize)
	if _, err := rand.Read(k); err != nil {
		t.Fatal(err)
	}
	return k
}

// sealedPersister is testPersister with keys.
func sealedPersister(t *testing.T, dir string, keys ...[]byte) (*Persister[*corev1.ConfigMap], func() []error) {
	t.Helper()
	p, reports := testPersister(t, dir)
	p.cfg.Identity.Encrypted, p.cfg.Keys = true, keys
	p.sealer, p.keyErr = newSealer(keys)
	return p, reports
}

// commitA runs p (opened) to commit ns/a at resourceVersion rv, and stops
// it.
func commitA(p *Persister[*corev1.ConfigMap], rv string) {
	p.Start()
	b := p.Batch()
	b.Put("ns/a", labelled("ns", "a", rv))
	b.End(rv)
	p.Stop()
}

// stateFile returns the bytes of dir's one state file.
func stateFile(t *testing.T, dir string) []byte {
	t.Helper()
	m, err := filepath.Glob(filepath.Join(dir, "*.kinformer"))
	if err != nil || len(m) != 1 {
		t.Fatalf("state files %v (%v), want one", m, err)
	}
	b, err := os.ReadFile(m[0])
	if err != nil {
		t.Fatal(err)
	}
	return b
}

// The objects of a file written with keys are not on disk in the clear;
// the same keys restore them; the key rotated (new first, old kept) still
// restores them and encrypts the file again with the new key, which then
// restores them alone; another key restores nothing, reports the file
// with its size, and sets it aside.
func TestSealedStateFile(t *testing.T) {
	dir := t.TempDir()
	old, fresh, other := newKey(t), newKey(t), newKey(t)
	const secret = "hunter2-the-value-only-this-object-has"
	write := func(keys ...[]byte) {
		p, reports := sealedPersister(t, dir, keys...)
		openPersister(t, p)
		p.Start()
		b := p.Batch()
		cm := labelled("ns", "a", "5")
		cm.Data["password"] = secret
		b.Put("ns/a", cm)
		b.End("5")
		p.Stop()
		if errs := reports(); len(errs) != 0 {
			t.Fatal(errs)
		}
	}
	restore := func(keys ...[]byte) (map[string]*corev1.ConfigMap, []error) {
		p, reports := sealedPersister(t, dir, keys...)
		items, _, ok := p.Open(true, checkKey)
		if !ok {
			t.Fatal("open: persistence off")
		}
		p.Start()
		p.Stop()
		return items, reports()
	}
	write(old)
	if b := stateFile(t, dir); bytes.Contains(b, []byte(secret)) || bytes.Contains(b, []byte("hunter2")) {
		t.Fatal("the object's value is in the state file in the clear")
	}
	if items, errs := restore(old); len(errs) != 0 || items["ns/a"].Data["password"] != secret {
		t.Fatalf("restored with its key: %v, errors %v", items, errs)
	}
	before := stateFile(t, dir)
	if items, errs := restore(fresh, old); len(errs) != 0 || items["ns/a"].Data["password"] != secret {
		t.Fatalf("restored with the key rotated: %v, errors %v", items, errs)
	}
	if bytes.Equal(before, stateFile(t, dir)) {
		t.Fatal("the file was not encrypted again with the new key")
	}
	if items, errs := restore(fresh); len(errs) != 0 || items["ns/a"].Data["password"] != secret {
		t.Fatalf("restored with the new key alone: %v, errors %v", items, errs)
	}
	items, errs := restore(other)
	if len(items) != 0 || len(errs) != 1 || !strings.Contains(errs[0].Error(), "encrypted with a state key not given") ||
		!strings.Contains(errs[0].Error(), " bytes)") || !strings.Contains(errs[0].Error(), "set aside") {
		t.Fatalf("with another key: %d objects, errors %v; want none, and the file reported with its size and set aside", len(items), errs)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(m) != 1 {
		t.Fatalf("files set aside: %v", m)
	}
}

func TestParseKeys(t *testing.T) {
	a, b := base64.StdEncoding.EncodeToString(newKey(t)), base64.StdEncoding.EncodeToString(newKey(t))
	for _, tc := range []struct {
		text string
		n    int
		err  string
	}{
		{a + "\n", 1, ""},
		{"# rotated 2026-12-03\n" + b + "\n\n" + a + "\n", 2, ""},
		{a + "," + b, 2, ""},
		{"", 0, "no state key"},
		{"not base64!", 0, "not base64"},
		{base64.StdEncoding.EncodeToString([]byte("short")), 0, "5 bytes, want 32"},
	} {
		keys, err := ParseKeys(tc.text)
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("ParseKeys(%q): %v, want an error saying %q", tc.text, err, tc.err)
			}
			continue
		}
		if err != nil || len(keys) != tc.n {
			t.Errorf("ParseKeys(%q): %d keys, %v; want %d", tc.text, len(keys), err, tc.n)
		}
	}
}

// A directory whose key was replaced keeps the files named under the old
// one, which no informer finds again; with the files set aside, Unused
// lists them (not the file in use, nor the one named under the key), the
// first open of the directory in a process reports them once with their
// size, and Prune removes them.
func TestUnusedAndPrune(t *testing.T) {
	dir := t.TempDir()
	write := func(name string) string {
		p, _ := sealedPersister(t, dir, newKey(t))
		p.cfg.Name = name
		openPersister(t, p)
		commitA(p, "1")
		return p.Path()
	}
	old := write("old")
	if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	leftoversReported.Delete(dir)
	var reports []error
	p, _ := sealedPersister(t, dir, newKey(t))
	p.cfg.Name = "current"
	p.cfg.Report = func(err error) { reports = append(reports, err) }
	openPersister(t, p) // a new key: the old file is orphaned
	commitA(p, "1")
	if len(reports) != 1 || !strings.Contains(reports[0].Error(), "1 files no informer will use") || !strings.Contains(reports[0].Error(), filepath.Base(old)) {
		t.Fatalf("reports at the first open of the directory: %v", reports)
	}
	bad := filepath.Join(dir, "other-0123456789abcdef.kinformer.bad")
	if err := os.WriteFile(bad, []byte("garbage"), 0o600); err != nil {
		t.Fatal(err)
	}
	// A file in use is never listed.
	inUse, _ := sealedPersister(t, dir, newKey(t))
	inUse.cfg.Name = "busy"
	openPersister(t, inUse)
	defer func() { inUse.Start(); inUse.Stop() }()

	files, err := Unused(dir)
	if err != nil {
		t.Fatal(err)
	}
	got := map[string]string{}
	for _, f := range files {
		got[filepath.Base(f.Path)] = f.Why
		if f.Size <= 0 {
			t.Errorf("%s: size %d", f.Path, f.Size)
		}
	}
	if len(got) != 2 || !strings.Contains(got[filepath.Base(old)], "directory key") || !strings.Contains(got[filepath.Base(bad)], "set aside") {
		t.Fatalf("Unused: %v; want the old key's file and the one set aside", got)
	}
	if _, err := Prune(dir); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{old, bad} {
		if _, err := os.Stat(f); !errors.Is(err, fs.ErrNotExist) {
			t.Errorf("%s after Prune: %v", f, err)
		}
	}
	if _, err := os.Stat(p.Path()); err != nil {
		t.Errorf("the current file after Prune: %v", err)
	}
}

// Turning StateKeys on removes the file the informer wrote without them
// (a copy of every object in the clear), and says so.
func TestKeysRemoveTheClearFile(t *testing.T) {
	dir := t.TempDir()
	p, _ := testPersister(t, dir)
	openPersister(t, p)
	commitA(p, "1")
	clearFile := p.Path()
	sealed, reports := sealedPersister(t, dir, newKey(t))
	openPersister(t, sealed)
	sealed.Start()
	sealed.Stop()
	if _, err := os.Stat(clearFile); !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("the file in the clear after keys were given: %v", err)
	}
	if errs := reports(); len(errs) != 1 || !strings.Contains(errs[0].Error(), "written without StateKeys") {
		t.Fatalf("reports: %v", errs)
	}
}

// With kinformer.key removed, a file a process still uses is not listed
// (it was, and Prune removed it under the process), nor an empty one
// (being made: bbolt locks it a moment after it exists); once the process
// is done with its file, it is.
func TestUnusedSparesFilesInUse(t *testing.T) {
	dir := t.TempDir()
	busy, _ := sealedPersister(t, dir, newKey(t))
	busy.cfg.Name = "busy"
	openPersister(t, busy)
	busy.Start()
	b := busy.Batch()
	b.Put("ns/a", labelled("ns", "a", "1"))
	b.End("1")
	if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	empty := filepath.Join(dir, "new-0123456789abcdef.kinformer")
	if err := os.WriteFile(empty, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	files, err := Prune(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 0 {
		t.Errorf("pruned while a process uses its file: %v", files)
	}
	for _, f := range []string{busy.Path(), empty} {
		if _, err := os.Stat(f); err != nil {
			t.Errorf("%s after Prune: %v", filepath.Base(f), err)
		}
	}
	busy.Stop()
	files, err = Unused(dir)
	if err != nil {
		t.Fatal(err)
	}
	if len(files) != 1 || files[0].Path != busy.Path() || !strings.Contains(files[0].Why, "gone") {
		t.Errorf("Unused once the process is done: %v, want %s alone (its key gone)", files, filepath.Base(busy.Path()))
	}
}

// A value is opened by whichever given key has its id and decrypts it:
// ids are 4 bytes of the key's digest, and two keys may share one.
func TestSealKeysSharingAnID(t *testing.T) {
	k1, k2 := newKey(t), newKey(t)
	only2, err := newSealer([][]byte{k2})
	if err != nil {
		t.Fatal(err)
	}
	v, err := only2.seal("identity", "ns/a", []byte("secret"))
	if err != nil {
		t.Fatal(err)
	}
	both, err := newSealer([][]byte{k1, k2})
	if err != nil {
		t.Fatal(err)
	}
	both.ids[0] = both.ids[1] // k1's id the same as k2's
	plain, old, err := both.open("identity", "ns/a", v)
	if err != nil || string(plain) != "secret" || !old {
		t.Fatalf("open with two keys of one id: %q, old %v, %v; want secret, old (the second key)", plain, old, err)
	}
	if _, _, err := both.open("identity", "ns/b", v); err == nil || !strings.Contains(err.Error(), "does not decrypt") {
		t.Fatalf("open under another entry key: %v, want does not decrypt", err)
	}
}

// A file read whole under an older key whose encryption again under the
// first key fails to commit (a full disk) is restored and kept, and the
// failure said: it is good under the keys given, not a file to set aside.
func TestFailedResealKeepsTheFile(t *testing.T) {
	dir := t.TempDir()
	old, fresh := newKey(t), newKey(t)
	p, _ := sealedPersister(t, dir, old)
	openPersister(t, p)
	commitA(p, "5")
	before := stateFile(t, dir)

	commitResealed = func(*snapshot.Store, *snapshot.Batch) error { return errors.New("no space left on device") }
	defer func() { commitResealed = func(st *snapshot.Store, b *snapshot.Batch) error { return st.Commit(b) } }()
	p, reports := sealedPersister(t, dir, fresh, old)
	items, rv := openPersister(t, p)
	p.Start()
	p.Stop()
	errs := reports()
	if rv != "5" || items["ns/a"] == nil {
		t.Errorf("restored: rv %q, %d objects; want rv 5 and ns/a", rv, len(items))
	}
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), "no space left") || !strings.Contains(errs[0].Error(), "older key") || strings.Contains(errs[0].Error(), "set aside") {
		t.Errorf("reports: %v; want the failed commit said, the file not set aside", errs)
	}
	if m, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(m) != 0 {
		t.Errorf("files set aside: %v", m)
	}
	if !bytes.Equal(before, stateFile(t, dir)) {
		t.Error("the file changed, though its commit failed")
	}
}

// Two informers that start at once on a fresh directory both find no key
// before one of them makes it: the second's first report must not list
// the first's file (in use) nor a file being made (empty), only a state
// file that really is named under another key.
func TestLeftoversSpareFilesInUseOnAFreshKey(t *testing.T) {
	dir := t.TempDir()
	// A leftover: written under a key since removed.
	old, _ := sealedPersister(t, dir, newKey(t))
	old.cfg.Name = "old"
	openPersister(t, old)
	commitA(old, "1")
	if err := os.Remove(filepath.Join(dir, KeyFile)); err != nil {
		t.Fatal(err)
	}
	// The first informer makes the new key and holds its file.
	first, _ := sealedPersister(t, dir, newKey(t))
	first.cfg.Name = "first"
	openPersister(t, first)
	first.Start()
	b := first.Batch()
	b.Put("ns/a", labelled("ns", "a", "1"))
	b.End("1")
	defer first.Stop()
	// A third one's file, made but not yet written.
	making := filepath.Join(dir, "making-0123456789abcdef.kinformer")
	if err := os.WriteFile(making, nil, 0o600); err != nil {
		t.Fatal(err)
	}
	key, err := readKey(filepath.Join(dir, KeyFile))
	if err != nil {
		t.Fatal(err)
	}
	leftoversReported.Delete(dir)
	var reports []error
	reportLeftovers(dir, true, key, func(err error) { reports = append(reports, err) })
	if len(reports) != 1 {
		t.Fatalf("reports: %v; want one, of the old key's file", reports)
	}
	msg := reports[0].Error()
	if !strings.Contains(msg, "1 files no informer will use") || !strings.Contains(msg, filepath.Base(old.Path())) ||
		strings.Contains(msg, filepath.Base(first.Path())) || strings.Contains(msg, filepath.Base(making)) {
		t.Errorf("report %q: want the old key's file %s alone, not %s (in use) nor %s (being made)",
			msg, filepath.Base(old.Path()), filepath.Base(first.Path()), filepath.Base(making))
	}
}
