package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/kinformer/kinformer/internal/testenv"
)

// The tests here build the real kinformer binary and run it, most of them
// against the real local API server of internal/testenv.

var binDir string

// raceEnabled is set by race_test.go when the tests run with -race, so that
// the binary under test is built with it too.
var raceEnabled bool

func TestMain(m *testing.M) {
	code := func() int {
		dir, err := os.MkdirTemp("", "kinformer-cli-test-")
		if err != nil {
			panic(err)
		}
		defer os.RemoveAll(dir)
		binDir = dir
		return m.Run()
	}()
	testenv.StopShared()
	os.Exit(code)
}

var built struct {
	once sync.Once
	path string
	err  error
}

// binary builds the command once per test run (with -race if the tests
// run with it) and returns its path.
func binary(t testing.TB) string {
	t.Helper()
	built.once.Do(func() {
		path := filepath.Join(binDir, "kinformer")
		args := []string{"build", "-o", path}
		if raceEnabled {
			args = append(args, "-race")
		}
		cmd := exec.Command(filepath.Join(goroot(), "bin", "go"), append(args, ".")...)
		out, err := cmd.CombinedOutput()
		if err != nil {
			built.err = errors.New("go build: " + err.Error() + "\n" + string(out))
			return
		}
		built.path = path
	})
	if built.err != nil {
		t.Fatal(built.err)
	}
	return built.path
}

func goroot() string {
	out, err := exec.Command("go", "env", "GOROOT").Output()
	if err != nil {
		return "/usr/local/go"
	}
	return strings.TrimSpace(string(out))
}

// proc is a running kinformer.
type proc struct {
	t      testing.TB
	cmd    *exec.Cmd
	lines  chan string // stdout, line by line; closed at EOF
	stderr *syncBuffer
	done   chan struct{}
	code   int
}

type syncBuffer struct {
	mu sync.Mutex // guards b
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// start runs the binary with args; env entries are added to the
// environment. It is killed at the end of the test if still running.
func start(t testing.TB, env []string, args ...string) *proc {
	t.Helper()
	return startCmd(t, exec.Command(binary(t), args...), env)
}

// startCmd is start for cmd, which runs the binary (through a shell that
// execs it, say).
func startCmd(t testing.TB, cmd *exec.Cmd, env []string) *proc {
	t.Helper()
	cmd.Env = append(cleanEnv(), env...)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	p := &proc{t: t, cmd: cmd, lines: make(chan string, 1000), stderr: &syncBuffer{}, done: make(chan struct{})}
	cmd.Stderr = p.stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	readDone := make(chan struct{})
	go func() {
		defer close(readDone)
		defer close(p.lines)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 1<<20), 16<<20)
		for sc.Scan() {
			p.lines <- sc.Text()
		}
	}()
	go func() {
		<-readDone // Wait closes the pipe: read it all first
		err := cmd.Wait()
		p.code = exitCode(err)
		close(p.done)
	}()
	t.Cleanup(func() {
		select {
		case <-p.done:
		default:
			_ = cmd.Process.Kill()
			<-p.done
		}
	})
	return p
}

func exitCode(err error) int {
	var ee *exec.ExitError
	if errors.As(err, &ee) {
		return ee.ExitCode()
	}
	if err != nil {
		return -1
	}
	return 0
}

// cleanEnv is the test's environment without anything that would point
// kinformer at a cluster by accident.
func cleanEnv() []string {
	var out []string
	for _, kv := range os.Environ() {
		k, _, _ := strings.Cut(kv, "=")
		switch k {
		case "KUBECONFIG", "KUBERNETES_SERVICE_HOST", "KUBERNETES_SERVICE_PORT", "POD_NAMESPACE":
			continue
		}
		out = append(out, kv)
	}
	return out
}

// next returns the next line of stdout, failing the test after timeout.
func (p *proc) next(timeout time.Duration) string {
	p.t.Helper()
	select {
	case l, ok := <-p.lines:
		if !ok {
			<-p.done
			p.t.Fatalf("kinformer exited (code %d) while a line was expected; stderr:\n%s", p.code, p.stderr)
		}
		return l
	case <-time.After(timeout):
		p.t.Fatalf("no output line within %v; stderr:\n%s", timeout, p.stderr)
	}
	return ""
}

// wait waits for the process to exit and returns its exit code.
func (p *proc) wait(timeout time.Duration) int {
	p.t.Helper()
	select {
	case <-p.done:
		return p.code
	case <-time.After(timeout):
		p.t.Fatalf("kinformer still running after %v; stderr:\n%s", timeout, p.stderr)
	}
	return 0
}

// interrupt sends SIGINT and returns the exit code.
func (p *proc) interrupt() int {
	p.t.Helper()
	if err := p.cmd.Process.Signal(syscall.SIGINT); err != nil {
		p.t.Fatal(err)
	}
	return p.wait(30 * time.Second)
}

// rest drains the remaining stdout lines (after exit).
func (p *proc) rest() []string {
	var out []string
	for l := range p.lines {
		out = append(out, l)
	}
	return out
}

// runCmd runs kinformer to completion and returns its exit code, stdout and
// stderr.
func runCmd(t testing.TB, env []string, args ...string) (int, string, string) {
	t.Helper()
	return runBin(t, binary(t), env, args...)
}

// runBin is runCmd for a given binary.
func runBin(t testing.TB, bin string, env []string, args ...string) (int, string, string) {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	cmd := exec.CommandContext(ctx, bin, args...)
	cmd.Env = append(cleanEnv(), env...)
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	if ctx.Err() != nil {
		t.Fatalf("kinformer %s: still running after 60s; stderr:\n%s", strings.Join(args, " "), stderr.String())
	}
	return exitCode(err), stdout.String(), stderr.String()
}
