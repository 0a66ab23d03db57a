package kinformer

import (
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// notInLibraryGraph are modules a program that imports only the library must
// not get in its module graph: the command's (cmd/kinformer is its own
// module for this reason) and controller-runtime. A path matches itself and
// the modules below it (sigs.k8s.io/kustomize/api, …).
var notInLibraryGraph = []string{
	"github.com/spf13/cobra",
	"k8s.io/cli-runtime",
	"sigs.k8s.io/kustomize",
	"sigs.k8s.io/controller-runtime",
}

// onlyRequiredBy names, for a module of notInLibraryGraph, the modules that
// may require it. go.etcd.io/bbolt's go.mod requires cobra for bbolt's own
// command, which is in the same module as the package the library imports:
// so cobra's go.mod is in the graph, but none of its packages is built. Any
// other module that requires cobra still fails the test.
var onlyRequiredBy = map[string][]string{
	"github.com/spf13/cobra": {"go.etcd.io/bbolt"},
}

// TestModuleGraph runs `go list -m all` in the library's module and fails
// on any module of notInLibraryGraph in it.
func TestModuleGraph(t *testing.T) {
	goTool, err := exec.LookPath("go")
	if errors.Is(err, exec.ErrNotFound) {
		t.Skip("no go command:", err)
	}
	if err != nil {
		t.Fatal(err)
	}
	run := func(dir string, args ...string) string {
		t.Helper()
		cmd := exec.Command(goTool, args...)
		cmd.Dir = dir
		// The library's own graph, not a workspace's.
		cmd.Env = append(os.Environ(), "GOWORK=off")
		var stderr strings.Builder
		cmd.Stderr = &stderr
		out, err := cmd.Output()
		if err != nil {
			t.Fatalf("go %s: %v\n%s", strings.Join(args, " "), err, stderr.String())
		}
		return string(out)
	}

	gomod := strings.TrimSpace(run(".", "env", "GOMOD"))
	if !filepath.IsAbs(gomod) {
		t.Fatalf("go env GOMOD = %q: not in a module", gomod)
	}
	root := filepath.Dir(gomod)
	if mod := strings.TrimSpace(run(root, "list", "-m")); mod != "github.com/kinformer/kinformer" {
		t.Fatalf("%s is module %q, not the library", gomod, mod)
	}

	matches := func(path, name string) bool {
		return path == name || strings.HasPrefix(path, name+"/")
	}
	modulePath := func(s string) string { path, _, _ := strings.Cut(s, "@"); return path }
	var graph []string // `go mod graph`, read when first needed
	for line := range strings.Lines(run(root, "list", "-m", "all")) {
		fields := strings.Fields(line)
		if len(fields) == 0 {
			continue
		}
		path := fields[0]
		for _, name := range notInLibraryGraph {
			if !matches(path, name) {
				continue
			}
			allowed, ok := onlyRequiredBy[name]
			if !ok {
				t.Errorf("%s is in the library's module graph (go list -m all in %s): only the command (cmd/kinformer, its own module) may depend on it", strings.TrimSpace(line), root)
				continue
			}
			if graph == nil {
				graph = strings.Split(run(root, "mod", "graph"), "\n")
			}
			for _, edge := range graph {
				from, to, ok := strings.Cut(edge, " ")
				if !ok || modulePath(to) != path || slices.Contains(allowed, modulePath(from)) {
					continue
				}
				t.Errorf("%s is in the library's module graph (go list -m all in %s), required by %s: only %s may require it", strings.TrimSpace(line), root, from, strings.Join(allowed, ", "))
			}
		}
	}
}
