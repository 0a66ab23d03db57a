package localapi

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"sync"
	"testing"
	"time"
)

const fakeGoEnv = "KINFORMER_LOCALAPI_FAKE_GO_BUILD"

// TestHelperFakeGoBuild is the slow `go build -v` of the tests below, run
// as a subprocess: what go build prints while it compiles (package names,
// a download, a package's warnings), then nothing until its stdin closes,
// then a last package; it fails if the variable says "fail".
func TestHelperFakeGoBuild(t *testing.T) {
	mode := os.Getenv(fakeGoEnv)
	if mode == "" {
		t.Skip("helper for TestBuildReportsProgress")
	}
	fmt.Fprintln(os.Stderr, "go: downloading k8s.io/kubernetes v1.37.2")
	fmt.Fprintln(os.Stderr, "k8s.io/apimachinery/pkg/runtime")
	fmt.Fprintln(os.Stderr, "# k8s.io/some/cgo")
	fmt.Fprintln(os.Stderr, "cgo-gcc-prolog: warning: something")
	fmt.Fprint(os.Stderr, "k8s.io/apiserver/pkg/")
	fmt.Fprintln(os.Stderr, "server")
	_, _ = io.Copy(io.Discard, os.Stdin)
	fmt.Fprintln(os.Stderr, "github.com/kinformer/kinformer/tools/localapi")
	if mode == "fail" {
		fmt.Fprintln(os.Stderr, "./main.go:1:1: broken")
		os.Exit(1)
	}
	os.Exit(0)
}

type fakeClock struct {
	mu sync.Mutex
	t  time.Time
}

func (c *fakeClock) now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.t
}

func (c *fakeClock) advance(d time.Duration) time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.t = c.t.Add(d)
	return c.t
}

type syncBuffer struct {
	mu sync.Mutex
	b  strings.Builder
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.b.String()
}

func waitFor(t *testing.T, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(30 * time.Second)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// fakeBuild starts run on the fake go build, with a fake clock and ticks
// the test sends; closing the returned stdin lets the build end.
func fakeBuild(t *testing.T, mode string) (p *progress, log *syncBuffer, clock *fakeClock, ticks chan time.Time, stdin io.Closer, errc chan error) {
	t.Helper()
	clock = &fakeClock{t: time.Date(2026, 12, 4, 9, 0, 0, 0, time.UTC)}
	log = &syncBuffer{}
	p = newProgress(log, "testenv", clock.now)
	cmd := exec.Command(os.Args[0], "-test.run=^TestHelperFakeGoBuild$")
	cmd.Env = append(os.Environ(), fakeGoEnv+"="+mode)
	in, err := cmd.StdinPipe()
	if err != nil {
		t.Fatal(err)
	}
	ticks = make(chan time.Time)
	errc = make(chan error, 1)
	go func() { errc <- run(cmd, p, ticks, func() (int, error) { return 2159, nil }) }()
	t.Cleanup(func() { in.Close() })
	return p, log, clock, ticks, in, errc
}

// A slow build says, at every tick (a minute apart in Build), how long it
// has run and how many packages it has compiled; from the second on, of how
// many at most.
func TestBuildReportsProgress(t *testing.T) {
	p, log, clock, ticks, stdin, errc := fakeBuild(t, "ok")
	compiled := func(n int) func() bool {
		return func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.compiled == n }
	}
	waitFor(t, "two packages compiled", compiled(2))
	ticks <- clock.advance(time.Minute)
	waitFor(t, "the count of packages", func() bool { p.mu.Lock(); defer p.mu.Unlock(); return p.total != 0 })
	ticks <- clock.advance(time.Minute + 400*time.Millisecond)
	stdin.Close()
	if err := <-errc; err != nil {
		t.Fatalf("run: %v", err)
	}

	lines := strings.Split(strings.TrimSuffix(log.String(), "\n"), "\n")
	want := []string{
		"testenv: still building, 1m0s: 2 packages compiled, last k8s.io/apiserver/pkg/server; 1 module downloaded",
		"testenv: still building, 2m0s: 2 packages compiled of at most 2159 (those already in the build cache are not compiled again), last k8s.io/apiserver/pkg/server; 1 module downloaded",
	}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Errorf("progress lines:\n%s\nwant:\n%s", strings.Join(lines, "\n"), strings.Join(want, "\n"))
	}
	if got, want := p.summary(), "2m0s, 3 packages compiled"; got != want {
		t.Errorf("summary %q, want %q", got, want)
	}
	if got, want := p.output(), "# k8s.io/some/cgo\ncgo-gcc-prolog: warning: something\n"; got != want {
		t.Errorf("output besides package names %q, want %q", got, want)
	}
}

// A failed build's error shows what go build said, without the hundreds of
// package names -v adds.
func TestBuildFailureKeepsTheErrors(t *testing.T) {
	p, log, _, _, stdin, errc := fakeBuild(t, "fail")
	stdin.Close()
	if err := <-errc; err == nil {
		t.Fatal("run of a failing build: no error")
	}
	if log.String() != "" {
		t.Errorf("progress lines without a tick: %q", log.String())
	}
	out := p.output()
	if !strings.Contains(out, "./main.go:1:1: broken") || strings.Contains(out, "k8s.io/apimachinery/pkg/runtime") {
		t.Errorf("output of the failed build:\n%s", out)
	}
}

func TestIsPackageLine(t *testing.T) {
	for s, want := range map[string]bool{
		"k8s.io/kubernetes/pkg/controlplane":                   true,
		"net/http":                                             true,
		"github.com/kinformer/kinformer/tools/localapi":        true,
		"# k8s.io/kubernetes/pkg/controlplane":                 false,
		"go: downloading k8s.io/kubernetes v1.37.2":            false,
		"./main.go:12:2: undefined: x":                         false,
		"/root/go/pkg/mod/x@v1/y.go:3:1: warning: unused":      false,
		"note: module requires Go 1.27 with toolchain go1.27.": false,
	} {
		if got := isPackageLine(s); got != want {
			t.Errorf("isPackageLine(%q) = %v, want %v", s, got, want)
		}
	}
}

func TestLDFlags(t *testing.T) {
	for _, tc := range []struct{ version, major, minor string }{
		{"v1.37.2", "1", "37"},
		{"v1.38.0-alpha.1", "1", "38+"},
	} {
		got, err := LDFlags(tc.version)
		if err != nil {
			t.Fatalf("LDFlags(%q): %v", tc.version, err)
		}
		for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
			for _, want := range []string{
				"-X " + pkg + ".gitVersion=" + tc.version + " ",
				"-X " + pkg + ".gitMajor=" + tc.major + " ",
				"-X " + pkg + ".gitMinor=" + tc.minor + " ",
			} {
				if !strings.Contains(got+" ", want) {
					t.Errorf("LDFlags(%q) = %q: no %q", tc.version, got, want)
				}
			}
		}
	}
	for _, bad := range []string{"", "1.37.2", "v1.37", "master"} {
		if got, err := LDFlags(bad); err == nil {
			t.Errorf("LDFlags(%q) = %q, want an error", bad, got)
		}
	}
}
