package main

import (
	"bytes"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
)

func TestEnvLines(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct {
		name, upstream, nosumdb string
		wantProxy, wantSkip     string
	}{
		{"defaults", "https://proxy.example,direct", "", "file://" + dir + ",https://proxy.example,direct", "github.com/kinformer/kinformer"},
		{"proxy off", "off", "", "file://" + dir, "github.com/kinformer/kinformer"},
		{"keeps GONOSUMDB", "direct", "corp.example/*", "file://" + dir + ",direct", "corp.example/*,github.com/kinformer/kinformer"},
		{"already there", "direct", "github.com/kinformer/kinformer", "file://" + dir + ",direct", "github.com/kinformer/kinformer"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var b bytes.Buffer
			if err := envLines(&b, dir, "v0.1.0", tc.upstream, tc.nosumdb); err != nil {
				t.Fatal(err)
			}
			// The lines, run by a shell, give the go command this environment.
			sh := exec.Command("sh", "-c", b.String()+`printf '%s\n%s\n' "$GOPROXY" "$GONOSUMDB"`)
			sh.Env = os.Environ()
			out, err := sh.Output()
			if err != nil {
				t.Fatalf("sh: %v\n%s", err, b.String())
			}
			got := strings.Split(strings.TrimSuffix(string(out), "\n"), "\n")
			if len(got) != 2 || got[0] != tc.wantProxy || got[1] != tc.wantSkip {
				t.Errorf("GOPROXY, GONOSUMDB = %q, want %q, %q\nlines:\n%s", got, tc.wantProxy, tc.wantSkip, b.String())
			}
		})
	}
}

// The proxy `release env` points at holds every published module at the
// version it names.
func TestEnvCommandWritesTheProxy(t *testing.T) {
	root, err := repoRoot()
	if err != nil {
		t.Skip(err)
	}
	dir := t.TempDir()
	var b bytes.Buffer
	if err := envCommand(&b, root, dir); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "export GOPROXY='file://"+dir) {
		t.Fatalf("lines do not point at %s:\n%s", dir, b.String())
	}
	for _, m := range modules {
		list, err := os.ReadFile(filepath.Join(dir, m.path, "@v", "list"))
		if err != nil {
			t.Fatalf("%s: %v", m.path, err)
		}
		v := strings.TrimSpace(string(list))
		if !strings.Contains(b.String(), "kinformer "+v+",") {
			t.Errorf("%s is at %s in the proxy; the lines say:\n%s", m.path, v, b.String())
		}
	}
}
