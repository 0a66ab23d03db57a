package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// These run the binary but need no API server: usage is checked before
// any configuration is loaded.

func TestUsageErrors(t *testing.T) {
	t.Parallel()
	tests := []struct {
		args []string
		msg  string
	}{
		{nil, "Usage:"},
		{[]string{"watch"}, "missing RESOURCE"},
		{[]string{"watch", "pods", "configmaps"}, "want one RESOURCE"},
		{[]string{"watch", "pods", "-o", "yaml"}, `unknown output format "yaml"`},
		{[]string{"watch", "pods", "--bogus"}, "unknown flag: --bogus"},
		{[]string{"watch", "pods", "--resync", "soon"}, `invalid argument "soon"`},
		{[]string{"watch", "pods", "-A", "-n", "x"}, "mutually exclusive"},
		{[]string{"watch", "pods", "--skip-forbidden-namespaces"}, "--skip-forbidden-namespaces goes with --namespace-selector"},
		{[]string{"serve", "pods", "--skip-forbidden-namespaces"}, "--skip-forbidden-namespaces goes with --namespace-selector"},
		{[]string{"bogus"}, `unknown command "bogus"`},
		{[]string{"-A"}, "missing command"},
	}
	for _, tt := range tests {
		code, stdout, stderr := runCmd(t, nil, tt.args...)
		if code != exitUsage || !strings.Contains(stderr, tt.msg) || stdout != "" {
			t.Errorf("kinformer %q: exit %d, stdout %q, stderr %q; want exit %d and %q on stderr only", tt.args, code, stdout, stderr, exitUsage, tt.msg)
		}
	}
}

func TestHelp(t *testing.T) {
	t.Parallel()
	for _, args := range [][]string{{"--help"}, {"help"}, {"-h"}, {"watch", "--help"}, {"help", "watch"}} {
		code, stdout, stderr := runCmd(t, nil, args...)
		if code != 0 || stderr != "" {
			t.Errorf("kinformer %q: exit %d, stderr %q; want 0 and nothing on stderr", args, code, stderr)
		}
		for _, want := range []string{"kinformer watch RESOURCE", "Exit codes:", "3  unknown resource", "6  forbidden"} {
			if !strings.Contains(stdout, want) {
				t.Errorf("kinformer %q: help lacks %q:\n%s", args, want, stdout)
			}
		}
	}
	_, stdout, _ := runCmd(t, nil, "watch", "--help")
	for _, flag := range []string{"--kubeconfig", "--context", "-n, --namespace", "-A, --all-namespaces", "-l, --selector", "--field-selector", "-o, --output", "--resync", "--state-dir DIR", "--namespace-selector", "--skip-forbidden-namespaces"} {
		if !strings.Contains(stdout, flag) {
			t.Errorf("watch --help lacks %s", flag)
		}
	}
	_, serveHelp, _ := runCmd(t, nil, "serve", "--help")
	for _, flag := range []string{"--namespace-selector", "--skip-forbidden-namespaces", "--state-dir DIR"} {
		if !strings.Contains(serveHelp, flag) {
			t.Errorf("serve --help lacks %s", flag)
		}
	}
	for _, want := range []string{"RESTORED", `"cause":"restore"`, "set aside"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("watch --help does not explain --state-dir: lacks %q", want)
		}
	}
	code, stdout, _ := runCmd(t, nil, "version")
	if code != 0 || !strings.HasPrefix(stdout, "kinformer ") {
		t.Errorf("version: exit %d, %q", code, stdout)
	}
}

// Named kubectl-kinformer, it is a kubectl plugin and says so.
func TestKubectlPlugin(t *testing.T) {
	t.Parallel()
	link := filepath.Join(t.TempDir(), "kubectl-kinformer")
	if err := os.Symlink(binary(t), link); err != nil {
		t.Fatal(err)
	}
	code, out, _ := runBin(t, link, nil, "--help")
	if code != 0 || !strings.Contains(out, "kubectl kinformer watch RESOURCE") || strings.Contains(out, "\n  kinformer watch") {
		t.Errorf("plugin help (exit %d) does not say \"kubectl kinformer watch\":\n%s", code, out)
	}
	code, _, stderr := runBin(t, link, nil, "watch")
	if code != exitUsage || !strings.Contains(stderr, "kubectl kinformer: watch: missing RESOURCE") {
		t.Errorf("plugin usage error: exit %d, %q", code, stderr)
	}
}
