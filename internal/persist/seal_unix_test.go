//go:build unix

package persist

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// refusedAtOnce checks that fn, given a FIFO where a key file is
// expected, returns an error saying it is not a regular file, and does not
// hang (open waits for a FIFO's writer).
func refusedAtOnce(t *testing.T, fifo string, fn func() error) {
	t.Helper()
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { done <- fn() }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("with a FIFO for %s: %v", fifo, err)
		}
	case <-time.After(5 * time.Second):
		t.Fatalf("with a FIFO for %s: hangs", fifo)
	}
}

// A FIFO where the key file is expected is refused at once, not waited on.
func TestReadKeysRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	refusedAtOnce(t, path, func() error { _, err := ReadKeys(path); return err })
}

// A FIFO in place of the state directory's own key (kinformer.key) is
// refused at once: the start used to hang on it.
func TestPrepareDirRefusesAFIFOKey(t *testing.T) {
	dir := t.TempDir()
	refusedAtOnce(t, filepath.Join(dir, KeyFile), func() error { _, err := PrepareDir(dir); return err })
}
