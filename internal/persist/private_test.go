//go:build unix

package persist

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/kinformer/kinformer/internal/snapshot"
)

// groupModes grant the group (or others) something, and nothing more
// than the owner has: each makes a file shared, and so unsafe.
var groupModes = []os.FileMode{0o640, 0o620, 0o660, 0o604, 0o602}

// A key file that group or others may read or write is refused: whoever
// may read it can check guesses of a credential against the file names,
// and whoever may write it can choose them. The key is neither used nor
// replaced.
func TestPrepareDirSharedKey(t *testing.T) {
	for _, mode := range groupModes {
		dir := t.TempDir()
		key, err := PrepareDir(dir)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(dir, KeyFile)
		if fi, err := os.Stat(path); err != nil || fi.Mode().Perm() != 0o600 {
			t.Fatalf("the key file made: %v, %v; want mode 0600", fi, err)
		}
		if err := os.Chmod(path, mode); err != nil {
			t.Fatal(err)
		}
		if _, err := PrepareDir(dir); !errors.Is(err, snapshot.ErrUnsafe) || !strings.Contains(err.Error(), "chmod 600") {
			t.Errorf("a key file of mode %04o: PrepareDir = %v; want ErrUnsafe saying chmod 600", mode, err)
		}
		if b, err := os.ReadFile(path); err != nil || !bytes.Equal(b, key) {
			t.Errorf("a key file of mode %04o was replaced: %x, %v", mode, b, err)
		}
	}
}

// A state file that group or others may read or write is not loaded: the
// informer runs without it, says why, and leaves it as it is.
func TestPersisterSharedStateFile(t *testing.T) {
	for _, mode := range groupModes {
		dir := t.TempDir()
		p, _ := testPersister(t, dir)
		openPersister(t, p)
		p.Record("a/one", labelled("a", "one", "1"), false, "1")
		p.Start()
		p.Stop()
		if err := os.Chmod(p.Path(), mode); err != nil {
			t.Fatal(err)
		}
		before, err := os.ReadFile(p.Path())
		if err != nil {
			t.Fatal(err)
		}

		p2, reports := testPersister(t, dir)
		items, rv, ok := p2.Open(true, checkKey)
		if ok {
			p2.Start()
			p2.Stop()
			t.Errorf("a state file of mode %04o: opened, restoring %d objects at %q; want it refused", mode, len(items), rv)
			continue
		}
		if errs := reports(); len(errs) != 1 || !errors.Is(errs[0], snapshot.ErrUnsafe) {
			t.Errorf("a state file of mode %04o: reports %v, want one ErrUnsafe", mode, errs)
		}
		after, err := os.ReadFile(p.Path())
		if err != nil || !bytes.Equal(before, after) {
			t.Errorf("a state file of mode %04o changed (%v)", mode, err)
		}
		if _, err := os.Stat(p.Path() + ".bad"); !os.IsNotExist(err) {
			t.Errorf("a state file of mode %04o was set aside: %v", mode, err)
		}
	}
}
