//go:build unix

package persist

import (
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

// A FIFO where the key file is expected is refused at once, not waited on.
func TestReadKeysRefusesAFIFO(t *testing.T) {
	path := filepath.Join(t.TempDir(), "keys")
	if err := syscall.Mkfifo(path, 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := ReadKeys(path); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("ReadKeys of a FIFO: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("ReadKeys of a FIFO hangs")
	}
}

// A FIFO in place of the state directory's own key (kinformer.key) is
// refused at once: the start used to hang on it.
func TestPrepareDirRefusesAFIFOKey(t *testing.T) {
	dir := t.TempDir()
	if err := syscall.Mkfifo(filepath.Join(dir, "kinformer.key"), 0o600); err != nil {
		t.Skip(err)
	}
	done := make(chan error, 1)
	go func() { _, err := PrepareDir(dir); done <- err }()
	select {
	case err := <-done:
		if err == nil || !strings.Contains(err.Error(), "not a regular file") {
			t.Fatalf("PrepareDir with a FIFO for its key: %v", err)
		}
	case <-time.After(5 * time.Second):
		t.Fatal("PrepareDir with a FIFO for its key hangs")
	}
}
