//go:build unix

package persist

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
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

// warnedUnder returns, for each warning in the JSON log lines of buf
// about a directory under base, its "dir mode" (t.TempDir's own parents
// are the machine's), and empties buf.
func warnedUnder(t *testing.T, buf *bytes.Buffer, base string) []string {
	t.Helper()
	var out []string
	for line := range strings.Lines(buf.String()) {
		var rec struct{ Level, Dir, Mode string }
		if err := json.Unmarshal([]byte(line), &rec); err != nil {
			t.Fatalf("a log line: %v: %s", err, line)
		}
		if rec.Level == slog.LevelWarn.String() && strings.HasPrefix(rec.Dir, base) {
			out = append(out, rec.Dir+" "+rec.Mode)
		}
	}
	buf.Reset()
	return out
}

// A state directory under a directory that group or others may write,
// and that is not sticky (a Kubernetes volume), is used, with a warning
// (a log line: no failure is reported) naming that directory and its
// mode, once per directory in a process; under a sticky one (/tmp) or a
// private one, none.
func TestPersisterWarnsOfWritableParent(t *testing.T) {
	open := func(dir string, log *slog.Logger) {
		t.Helper()
		p, reports := testPersister(t, dir)
		p.cfg.Log = log
		openPersister(t, p)
		p.Start()
		p.Stop()
		if errs := reports(); len(errs) != 0 {
			t.Errorf("%s: reported %v, want nothing (a warning is logged)", dir, errs)
		}
	}
	for _, tc := range []struct {
		mode os.FileMode
		warn bool
	}{
		{0o777, true},
		{0o777 | os.ModeSticky, false},
		{0o700, false},
	} {
		base := t.TempDir()
		parent := filepath.Join(base, "volume")
		if err := os.Mkdir(parent, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, tc.mode); err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer // written by Open, on this goroutine
		log := slog.New(slog.NewJSONHandler(&buf, &slog.HandlerOptions{Level: slog.LevelWarn}))

		// A logger that drops warnings does not spend the one.
		open(filepath.Join(parent, "state"), slog.New(slog.DiscardHandler))
		open(filepath.Join(parent, "state"), log)
		var want []string
		if tc.warn {
			want = []string{fmt.Sprintf("%s %04o", parent, tc.mode.Perm())}
		}
		if got := warnedUnder(t, &buf, base); !slices.Equal(got, want) {
			t.Errorf("under mode %v: warnings %q, want %q", tc.mode, got, want)
		}
		// Once per directory in a process: not again for it, nor for
		// another state directory in it.
		open(filepath.Join(parent, "state"), log)
		open(filepath.Join(parent, "other"), log)
		if got := warnedUnder(t, &buf, base); len(got) != 0 {
			t.Errorf("under mode %v, opened again: warnings %q, want none", tc.mode, got)
		}
	}
}
