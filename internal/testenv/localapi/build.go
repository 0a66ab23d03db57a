// Package localapi builds tools/localapi, the local kube-apiserver with
// embedded etcd that the tests (internal/testenv), `make localapi` and
// `make demo` run. It imports only the standard library, so that the
// command which builds the server for `make` (./build) compiles at once
// on a machine that has compiled nothing yet.
//
// A cold build compiles some 2,000 packages (k8s.io/kubernetes's apiserver
// and its dependencies): Build reports what it builds, then a line a minute
// with the time so far and the packages compiled. The binary reports the
// version of k8s.io/kubernetes that tools/localapi/go.mod requires, as a
// release build of that version would (`kubectl version`, GET /version).
package localapi

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"runtime"
	"strings"
	"time"
)

// EnvBinary names the environment variable that overrides where the
// localapi binary comes from. If it names an existing file, that binary is
// used as is and nothing is built. Otherwise it names the directory in which
// Build puts (and caches) the binary.
const EnvBinary = "KINFORMER_LOCALAPI"

// ColdBuild is how long a build with an empty build cache takes, as the
// first message of a build says.
const ColdBuild = "7-12 minutes on 2 idle cores, 20-25 or more on busy ones"

// Options are Build's.
type Options struct {
	// Log receives the progress lines (default os.Stderr).
	Log io.Writer
	// Prefix starts each line (default "localapi").
	Prefix string
}

// Build builds tools/localapi (its own Go module, which depends on
// k8s.io/kubernetes) with the local Go toolchain and returns the path of the
// binary. The binary lives at a stable path, by default
// $(go env GOCACHE)/../kinformer-localapi/localapi, and `go build` decides
// whether anything needs rebuilding: a warm call takes a second or two, a
// cold one (empty build cache) many minutes, reported a line a minute. A
// file lock serialises builds across concurrent callers.
func Build(ctx context.Context, o Options) (string, error) {
	if o.Log == nil {
		o.Log = os.Stderr
	}
	if o.Prefix == "" {
		o.Prefix = "localapi"
	}
	outDir := ""
	if env := os.Getenv(EnvBinary); env != "" {
		fi, err := os.Stat(env)
		if err == nil && fi.Mode().IsRegular() {
			return filepath.Abs(env)
		}
		outDir = env
	}
	goTool, err := goCommand()
	if err != nil {
		return "", err
	}
	if outDir == "" {
		outDir, err = defaultOutDir(ctx, goTool)
		if err != nil {
			return "", err
		}
	}
	src, err := SourceDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("%s: %w", o.Prefix, err)
	}
	out, err := filepath.Abs(filepath.Join(outDir, "localapi"))
	if err != nil {
		return "", err
	}

	lock, err := os.OpenFile(filepath.Join(outDir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.Prefix, err)
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return "", fmt.Errorf("%s: locking %s: %w", o.Prefix, lock.Name(), err)
	}
	defer unlockFile(lock)

	// tools/localapi is its own module; never let a workspace or the
	// caller's build flags (e.g. -race from a test run) leak in.
	env := append(os.Environ(), "GOWORK=off", "GOFLAGS="+cleanGoflags(os.Getenv("GOFLAGS")))
	version, err := ModuleVersion(ctx, goTool, src, env)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.Prefix, err)
	}
	ldflags, err := LDFlags(version)
	if err != nil {
		return "", fmt.Errorf("%s: %w", o.Prefix, err)
	}

	p := newProgress(o.Log, o.Prefix, time.Now)
	if _, err := os.Stat(out); err != nil {
		fmt.Fprintf(o.Log, "%s: building %s: kube-apiserver %s with etcd, from %s; the first build compiles about 2,000 packages (%s), a line a minute follows\n",
			o.Prefix, out, version, src, ColdBuild)
	}
	cmd := exec.CommandContext(ctx, goTool, "build", "-v", "-ldflags", ldflags, "-o", out, ".")
	cmd.Dir = src
	cmd.Env = env
	count := func() (int, error) { return countDeps(ctx, goTool, src, env) }
	ticker := time.NewTicker(time.Minute)
	defer ticker.Stop()
	if err := run(cmd, p, ticker.C, count); err != nil {
		return "", fmt.Errorf("%s: go build in %s failed after %v: %w\n%s", o.Prefix, src, p.elapsed(), err, p.output())
	}
	if d := p.elapsed(); d > 30*time.Second {
		fmt.Fprintf(o.Log, "%s: built %s in %s\n", o.Prefix, out, p.summary())
	}
	return out, nil
}

// run runs cmd (a go build -v) to its end, its output to p, and reports
// progress on every tick; at the first it starts counting the packages the
// build needs, for the lines after it.
func run(cmd *exec.Cmd, p *progress, ticks <-chan time.Time, count func() (int, error)) error {
	cmd.Stdout, cmd.Stderr = p, p
	if err := cmd.Start(); err != nil {
		return err
	}
	done := make(chan error, 1)
	go func() { done <- cmd.Wait() }()
	counting := false
	for {
		select {
		case err := <-done:
			return err
		case <-ticks:
			p.report()
			if !counting && count != nil {
				counting = true
				go func() {
					if n, err := count(); err == nil {
						p.setTotal(n)
					}
				}()
			}
		}
	}
}

// countDeps counts the packages the binary is made of, the standard
// library's included (`go list -deps`): the most a build compiles.
func countDeps(ctx context.Context, goTool, src string, env []string) (int, error) {
	cmd := exec.CommandContext(ctx, goTool, "list", "-deps", ".")
	cmd.Dir = src
	cmd.Env = env
	out, err := cmd.Output()
	if err != nil {
		return 0, err
	}
	n := 0
	sc := bufio.NewScanner(bytes.NewReader(out))
	for sc.Scan() {
		if sc.Text() != "" {
			n++
		}
	}
	return n, nil
}

// ModuleVersion is the version of k8s.io/kubernetes that the module in src
// (tools/localapi) builds with: its requirement, or its replacement's.
func ModuleVersion(ctx context.Context, goTool, src string, env []string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool, "list", "-m", "-f", "{{.Version}} {{with .Replace}}{{.Version}}{{end}}", "k8s.io/kubernetes")
	cmd.Dir = src
	cmd.Env = env
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	out, err := cmd.Output()
	if err != nil {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes in %s: %w\n%s", src, err, stderr.String())
	}
	f := strings.Fields(string(out))
	if len(f) == 0 {
		return "", fmt.Errorf("go list -m k8s.io/kubernetes in %s: no version", src)
	}
	return f[len(f)-1], nil
}

var versionRE = regexp.MustCompile(`^v(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)\.(0|[1-9][0-9]*)(.*)$`)

// LDFlags are the linker flags that make the binary report version, as
// Kubernetes' own build does (hack/lib/version.sh: gitVersion, gitMajor,
// gitMinor, "+" after the minor of a pre-release, and gitTreeState, in
// k8s.io/component-base/version, which the server's /version reports, and
// k8s.io/client-go/pkg/version). gitCommit and buildDate keep their
// defaults: the module has no commit, and a date would relink every build.
// Only the link step depends on these flags, so builds with and without
// them share the compiled packages.
func LDFlags(version string) (string, error) {
	m := versionRE.FindStringSubmatch(version)
	if m == nil {
		return "", fmt.Errorf("k8s.io/kubernetes version %q is not vMAJOR.MINOR.PATCH", version)
	}
	major, minor := m[1], m[2]
	if m[4] != "" {
		minor += "+"
	}
	var b strings.Builder
	for _, pkg := range []string{"k8s.io/component-base/version", "k8s.io/client-go/pkg/version"} {
		for _, kv := range [][2]string{{"gitVersion", version}, {"gitMajor", major}, {"gitMinor", minor}, {"gitTreeState", "clean"}} {
			fmt.Fprintf(&b, " -X %s.%s=%s", pkg, kv[0], kv[1])
		}
	}
	return strings.TrimSpace(b.String()), nil
}

// cleanGoflags keeps only GOFLAGS entries that are harmless for building the
// server binary.
func cleanGoflags(flags string) string {
	var keep []string
	for _, f := range strings.Fields(flags) {
		switch {
		case strings.HasPrefix(f, "-race"), strings.HasPrefix(f, "-cover"),
			strings.HasPrefix(f, "-mod="), strings.HasPrefix(f, "-modfile="):
			continue
		}
		keep = append(keep, f)
	}
	return strings.Join(keep, " ")
}

func goCommand() (string, error) {
	exe := "go"
	if runtime.GOOS == "windows" {
		exe = "go.exe"
	}
	if root := runtime.GOROOT(); root != "" {
		p := filepath.Join(root, "bin", exe)
		if _, err := os.Stat(p); err == nil {
			return p, nil
		}
	}
	p, err := exec.LookPath("go")
	if err != nil {
		return "", fmt.Errorf("localapi: no Go toolchain to build the local API server: %w", err)
	}
	return p, nil
}

func defaultOutDir(ctx context.Context, goTool string) (string, error) {
	cmd := exec.CommandContext(ctx, goTool, "env", "GOCACHE")
	cmd.Env = append(os.Environ(), "GOWORK=off")
	out, err := cmd.Output()
	cache := strings.TrimSpace(string(out))
	if err == nil && cache != "" && cache != "off" && filepath.IsAbs(cache) {
		return filepath.Join(filepath.Dir(cache), "kinformer-localapi"), nil
	}
	dir, uerr := os.UserCacheDir()
	if uerr != nil {
		return "", fmt.Errorf("localapi: no cache directory for the localapi binary (go env GOCACHE: %v; %v); set %s", err, uerr, EnvBinary)
	}
	return filepath.Join(dir, "kinformer-localapi"), nil
}

// SourceDir finds tools/localapi: first relative to this source file, then
// by walking up from the working directory.
func SourceDir() (string, error) {
	isSrc := func(dir string) bool {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && bytes.Contains(data, []byte("module github.com/kinformer/kinformer/tools/localapi"))
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "..", "tools", "localapi")
		if isSrc(dir) {
			return filepath.Clean(dir), nil
		}
	}
	wd, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for dir := wd; ; {
		if cand := filepath.Join(dir, "tools", "localapi"); isSrc(cand) {
			return cand, nil
		}
		parent := filepath.Dir(dir)
		if parent == dir {
			break
		}
		dir = parent
	}
	return "", errors.New("localapi: cannot find tools/localapi (run from inside the kinformer repository, or set " + EnvBinary + " to a built binary)")
}
