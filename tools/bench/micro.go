package main

// The micro subcommand: the cache micro-benchmarks (cache_bench_test.go at
// the repository root) into docs/benchmarks.md.
//
//	cd tools/bench && go run . micro

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

const (
	microBegin = "<!-- micro-benchmarks: begin -->"
	microEnd   = "<!-- micro-benchmarks: end -->"
)

// microFlags: the micro subcommand runs the cache micro-benchmarks at the
// repository root and puts their summary into the report's micro-benchmark
// section.
func microFlags(fs *flag.FlagSet) func(*bench) error {
	count := fs.Int("count", 5, "go test -count")
	return func(b *bench) error { return micro(b, *count) }
}

func micro(bench *bench, count int) error {
	root := bench.root
	gotest := []string{"test", "-run", "^$", "-bench", "BenchmarkCache", "-benchmem", "-count", fmt.Sprint(count), "."}
	logf("running go %s at %s", strings.Join(gotest, " "), root)
	cmd := exec.Command("go", gotest...)
	cmd.Dir = root
	cmd.Stderr = os.Stderr
	raw, err := cmd.Output()
	if err != nil {
		return fmt.Errorf("go test: %w\n%s", err, raw)
	}
	m := describeMachine()
	var b strings.Builder
	fmt.Fprintf(&b, "%s\n## Cache micro-benchmarks\n\n", microBegin)
	fmt.Fprintf(&b, "`cache_bench_test.go` at the repository root: kinformer's `Cache[*corev1.ConfigMap]` next to client-go's `cache.NewIndexer` (a thread-safe store with the same namespace index), filled with the same 10,000 ConfigMaps (100 namespaces). GetByKey and ByIndex run on every core (`b.RunParallel`), List, Update and Replace on one, and `writers=1` adds one goroutine updating random objects (put/Update) in a loop for the whole benchmark. Made on %s with `%s`, %d cores, **shared with other engineers' builds** (load %s), by:\n\n", m.Date, m.GoVersion, m.NProc, m.LoadStart)
	fmt.Fprintf(&b, "    cd tools/bench && go run . micro    # = go %s at the root, then benchstat -col /impl\n\n", strings.Join(gotest, " "))
	if bs, err := exec.LookPath("benchstat"); err == nil || fileExists(filepath.Join(gobin(), "benchstat")) {
		if err != nil {
			bs = filepath.Join(gobin(), "benchstat")
		}
		tmp, _ := os.CreateTemp("", "cachebench-*.txt")
		tmp.Write(raw)
		tmp.Close()
		defer os.Remove(tmp.Name())
		sum, err := exec.Command(bs, "-col", "/impl", tmp.Name()).CombinedOutput()
		if err != nil {
			return fmt.Errorf("benchstat: %w\n%s", err, sum)
		}
		fmt.Fprintf(&b, "benchstat, columns by implementation (the second column's ratio is client-go relative to kinformer: `+100%%` means client-go takes twice as long):\n\n```\n%s```\n\n", sum)
	}
	fmt.Fprintf(&b, "<details><summary>Raw go test output</summary>\n\n```\n%s```\n\n</details>\n%s\n", raw, microEnd)

	return bench.section(b.String())
}

func fileExists(p string) bool { _, err := os.Stat(p); return err == nil }

func gobin() string {
	if out, err := exec.Command("go", "env", "GOBIN").Output(); err == nil && strings.TrimSpace(string(out)) != "" {
		return strings.TrimSpace(string(out))
	}
	out, _ := exec.Command("go", "env", "GOPATH").Output()
	return filepath.Join(strings.TrimSpace(string(out)), "bin")
}
