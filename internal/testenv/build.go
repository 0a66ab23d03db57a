package testenv

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"time"
)

// EnvBinary names the environment variable that overrides where the
// localapi binary comes from. If it names an existing file, that binary is
// used as is and nothing is built. Otherwise it names the directory in which
// Build puts (and caches) the binary.
const EnvBinary = "KINFORMER_LOCALAPI"

var buildMu struct {
	sync.Mutex
	path string // set after a successful build in this process
}

// Build builds tools/localapi (its own Go module, which depends on
// k8s.io/kubernetes) with the local Go toolchain and returns the path of the
// binary. The binary lives at a stable path, by default
// $(go env GOCACHE)/../kinformer-localapi/localapi, and `go build` decides
// whether anything needs rebuilding: a warm call takes a second or two, a
// cold one (empty build cache) several minutes. A file lock serialises
// builds across concurrently running test binaries. The result is memoised
// for the life of the process.
func Build(ctx context.Context) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildMu.path != "" {
		return buildMu.path, nil
	}
	p, err := build(ctx)
	if err != nil {
		return "", err
	}
	buildMu.path = p
	return p, nil
}

func build(ctx context.Context) (string, error) {
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
	src, err := sourceDir()
	if err != nil {
		return "", err
	}
	if err := os.MkdirAll(outDir, 0o755); err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	out, err := filepath.Abs(filepath.Join(outDir, "localapi"))
	if err != nil {
		return "", err
	}

	lock, err := os.OpenFile(filepath.Join(outDir, "build.lock"), os.O_CREATE|os.O_RDWR, 0o644)
	if err != nil {
		return "", fmt.Errorf("testenv: %w", err)
	}
	defer lock.Close()
	if err := lockFile(lock); err != nil {
		return "", fmt.Errorf("testenv: locking %s: %w", lock.Name(), err)
	}
	defer unlockFile(lock)

	if _, err := os.Stat(out); err != nil {
		fmt.Fprintf(os.Stderr, "testenv: building %s from %s (a cold build of kube-apiserver takes several minutes)\n", out, src)
	}
	start := time.Now()
	cmd := exec.CommandContext(ctx, goTool, "build", "-o", out, ".")
	cmd.Dir = src
	// tools/localapi is its own module; never let a workspace or the
	// caller's build flags (e.g. -race from a test run) leak in.
	cmd.Env = append(os.Environ(), "GOWORK=off", "GOFLAGS="+cleanGoflags(os.Getenv("GOFLAGS")))
	var output bytes.Buffer
	cmd.Stdout = &output
	cmd.Stderr = &output
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("testenv: go build in %s failed after %v: %w\n%s", src, time.Since(start).Round(time.Second), err, output.String())
	}
	if d := time.Since(start); d > 30*time.Second {
		fmt.Fprintf(os.Stderr, "testenv: built %s in %v\n", out, d.Round(time.Second))
	}
	return out, nil
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
		return "", fmt.Errorf("testenv: no Go toolchain to build the local API server: %w", err)
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
		return "", fmt.Errorf("testenv: no cache directory for the localapi binary (go env GOCACHE: %v; %v); set %s", err, uerr, EnvBinary)
	}
	return filepath.Join(dir, "kinformer-localapi"), nil
}

// sourceDir finds tools/localapi: first relative to this source file, then
// by walking up from the working directory.
func sourceDir() (string, error) {
	isSrc := func(dir string) bool {
		data, err := os.ReadFile(filepath.Join(dir, "go.mod"))
		return err == nil && bytes.Contains(data, []byte("module github.com/kinformer/kinformer/tools/localapi"))
	}
	if _, file, _, ok := runtime.Caller(0); ok && filepath.IsAbs(file) {
		dir := filepath.Join(filepath.Dir(file), "..", "..", "tools", "localapi")
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
	return "", errors.New("testenv: cannot find tools/localapi (run tests from inside the kinformer repository, or set " + EnvBinary + " to a built binary)")
}
