package main

import (
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/kinformer/kinformer/internal/testenv"
)

// hack/demo.sh with DEMO_SECONDS runs the watch on its own local API server
// with traffic, stops by itself, exits 0 and leaves nothing running.
func TestDemoScript(t *testing.T) {
	t.Parallel()
	if testenv.Skipping() {
		t.Skip("testenv: " + testenv.EnvSkip + " is set")
	}
	if _, err := exec.LookPath("bash"); err != nil {
		t.Skip("no bash")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 15*time.Minute)
	defer cancel()
	localapi, err := testenv.Build(ctx)
	if err != nil {
		t.Fatal(err)
	}
	script, err := filepath.Abs(filepath.Join("..", "..", "hack", "demo.sh"))
	if err != nil {
		t.Fatal(err)
	}

	runCtx, cancelRun := context.WithTimeout(ctx, 2*time.Minute)
	defer cancelRun()
	cmd := exec.CommandContext(runCtx, "bash", script)
	cmd.Env = append(cleanEnv(), "DEMO_SECONDS=10", "KINFORMER_LOCALAPI="+localapi, "KINFORMER_BIN="+binary(t))
	cmd.Cancel = func() error { return cmd.Process.Signal(syscall.SIGTERM) }
	cmd.WaitDelay = 30 * time.Second
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err = cmd.Run()
	took := time.Since(start)
	t.Logf("demo ran %v; stderr:\n%s", took.Round(100*time.Millisecond), stderr.String())

	pids := pidsIn(stderr.String())
	t.Cleanup(func() {
		for _, pid := range pids {
			_ = syscall.Kill(-pid, syscall.SIGKILL)
			_ = syscall.Kill(pid, syscall.SIGKILL)
		}
	})
	if code := exitCode(err); code != 0 || runCtx.Err() != nil {
		t.Fatalf("demo exit code %d (%v), want 0", code, err)
	}
	if took < 10*time.Second {
		t.Errorf("demo stopped after %v, before DEMO_SECONDS=10", took)
	}

	out := stdout.String()
	if !strings.HasPrefix(out, "EVENT") || !regexp.MustCompile(`(?m)^ADDED\s+demo-[12]\s+cm-\d+\s`).MatchString(out) {
		t.Errorf("stdout lacks the table with the traffic's configmaps:\n%s", out)
	}
	errs := stderr.String()
	for _, want := range []string{"local API server ready at https://127.0.0.1:", "events in", "stopped; nothing left running"} {
		if !strings.Contains(errs, want) {
			t.Errorf("stderr lacks %q", want)
		}
	}

	// Nothing left running: not the server, the generator or the watch.
	if len(pids) < 2 {
		t.Fatalf("found %d pids in the demo's stderr, want the server's and the generator's", len(pids))
	}
	for _, pid := range pids {
		if err := syscall.Kill(pid, 0); !errors.Is(err, syscall.ESRCH) {
			t.Errorf("process %d still exists after the demo (kill 0: %v)", pid, err)
		}
	}
	if m := regexp.MustCompile(`work dir (\S+)`).FindStringSubmatch(errs); m == nil {
		t.Error("no work dir in stderr")
	} else {
		if _, err := os.Stat(m[1]); !os.IsNotExist(err) {
			t.Errorf("work dir %s not removed (%v)", m[1], err)
		}
		if runtime.GOOS == "linux" {
			if left := processesMentioning(m[1]); len(left) > 0 {
				t.Errorf("processes still running with the demo's work dir: %q", left)
			}
		}
	}
}

func pidsIn(s string) []int {
	var pids []int
	for _, m := range regexp.MustCompile(`\(pid (\d+)\)`).FindAllStringSubmatch(s, -1) {
		if pid, err := strconv.Atoi(m[1]); err == nil && pid > 1 {
			pids = append(pids, pid)
		}
	}
	return pids
}

// processesMentioning lists the command lines under /proc that contain s.
func processesMentioning(s string) []string {
	var out []string
	cmdlines, _ := filepath.Glob("/proc/[0-9]*/cmdline")
	for _, f := range cmdlines {
		data, err := os.ReadFile(f)
		if err == nil && bytes.Contains(data, []byte(s)) {
			out = append(out, f+": "+string(bytes.ReplaceAll(data, []byte{0}, []byte{' '})))
		}
	}
	return out
}
