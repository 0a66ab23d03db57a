package persist

import (
	"bytes"
	"crypto/rand"
	"encoding/base64"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

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
	var mu sync.Mutex // guards errs
	var errs []error
	p := New(Config[*corev1.ConfigMap]{
		Dir:      dir,
		Name:     "configmaps",
		Identity: Identity{Source: "test configmaps", Encrypted: true},
		Snapshot: snapshot.Options{NoSync: true, LockTimeout: 100 * time.Millisecond},
		Interval: time.Hour,
		Codec:    NewCodec[*corev1.ConfigMap](nil),
		Keys:     keys,
		Report: func(err error) {
			mu.Lock()
			errs = append(errs, err)
			mu.Unlock()
		},
	})
	return p, func() []error {
		mu.Lock()
		defer mu.Unlock()
		return append([]error(nil), errs...)
	}
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
