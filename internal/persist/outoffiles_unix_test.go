//go:build unix

package persist

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

const outOfFilesEnv = "KINFORMER_TEST_OUT_OF_FILES_DIR"

// A process out of file descriptors (EMFILE) opens no state file: it says
// so, with what to do, and runs without it, leaving the file as it is
// (not set aside as damaged) for the next start, which restores it. The
// opening runs in a child process with a low RLIMIT_NOFILE, filled up but
// for 0, 1, … descriptors, until an open succeeds.
func TestPersisterOutOfFiles(t *testing.T) {
	if dir := os.Getenv(outOfFilesEnv); dir != "" {
		outOfFilesChild(t, dir)
		return
	}
	dir := t.TempDir()
	p, _ := committedOne(t, dir)
	p.Start()
	p.Stop()
	cmd := exec.Command(os.Args[0], "-test.run=^TestPersisterOutOfFiles$", "-test.count=1", "-test.v")
	cmd.Env = append(os.Environ(), outOfFilesEnv+"="+dir)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("child: %v\n%s", err, out)
	}
	if !strings.Contains(string(out), "failed at 0 free") {
		t.Fatalf("child did not report its failures:\n%s", out)
	}
	t.Logf("child:\n%s", out)
	if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) > 0 {
		t.Errorf("set aside for lack of descriptors: %v", bad)
	}
	if items, rv := reload(t, dir); rv != "1" || len(items) != 1 {
		t.Errorf("after the process ran out of files: restored %d objects at %q, want 1 at 1", len(items), rv)
	}
}

func outOfFilesChild(t *testing.T, dir string) {
	var lim syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_NOFILE, &lim); err != nil {
		t.Skip(err)
	}
	if err := syscall.Setrlimit(syscall.RLIMIT_NOFILE, &syscall.Rlimit{Cur: 64, Max: lim.Max}); err != nil {
		t.Skip(err)
	}
	for free := 0; free < 20; free++ {
		var fill []*os.File
		for {
			f, err := os.Open(os.DevNull)
			if err != nil {
				if !errors.Is(err, syscall.EMFILE) {
					t.Fatal(err)
				}
				break
			}
			fill = append(fill, f)
		}
		for _, f := range fill[len(fill)-free:] {
			f.Close()
		}
		p, reports := testPersister(t, dir)
		_, _, ok := p.Open(true, checkKey)
		if ok {
			p.Start()
			p.Stop()
		}
		for _, f := range fill {
			f.Close()
		}
		errs := reports()
		if ok {
			t.Logf("opened with %d free", free)
			return
		}
		if len(errs) == 0 {
			t.Fatalf("%d free: no file, and nothing reported", free)
		}
		for _, err := range errs {
			if !strings.Contains(err.Error(), "too many open files") || !strings.Contains(err.Error(), "ulimit -n") {
				t.Errorf("%d free: reported %q; want too many open files, and ulimit -n", free, err)
			}
		}
		t.Logf("failed at %d free: %v", free, errs)
		if bad, _ := filepath.Glob(filepath.Join(dir, "*.bad")); len(bad) > 0 {
			t.Fatalf("%d free: set aside for lack of descriptors: %v", free, bad)
		}
	}
	t.Fatal("never opened")
}
