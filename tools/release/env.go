package main

import (
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// The environment a user outside the repository needs to use kinformer's
// modules before they are published (README.md, "Install"): a file proxy
// of this tree first, then whatever proxy the go command used already; and
// no checksum-database lookup for kinformer's own modules, which the
// database has never seen. hack/consumer.sh builds with exactly these lines.

// defaultEnvDir is where `release env` writes its proxy unless told.
func defaultEnvDir() (string, error) {
	d, err := os.UserCacheDir()
	if err != nil {
		return "", fmt.Errorf("no user cache directory (%w): give -out DIR", err)
	}
	return filepath.Join(d, "kinformer", "proxy"), nil
}

// envLines are the shell lines that make the go command read kinformer's
// modules from the file proxy at dir. upstream is the GOPROXY already in
// use and nosumdb the GONOSUMDB already set, both kept.
func envLines(w io.Writer, dir, version, upstream, nosumdb string) error {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return err
	}
	proxy := "file://" + filepath.ToSlash(abs)
	if upstream != "" && upstream != "off" {
		proxy += "," + upstream
	}
	lib := modules[0].path
	skip := lib
	if nosumdb != "" && !hasPattern(nosumdb, lib) {
		skip = nosumdb + "," + lib
	} else if nosumdb != "" {
		skip = nosumdb
	}
	_, err = fmt.Fprintf(w, "# kinformer %s, not yet published: its modules from a file proxy of %s\nexport GOPROXY=%s\nexport GONOSUMDB=%s\n",
		version, abs, shellQuote(proxy), shellQuote(skip))
	return err
}

// hasPattern reports whether the comma-separated list holds pattern.
func hasPattern(list, pattern string) bool {
	for _, p := range strings.Split(list, ",") {
		if strings.TrimSpace(p) == pattern {
			return true
		}
	}
	return false
}

// shellQuote quotes s for a POSIX shell.
func shellQuote(s string) string {
	return "'" + strings.ReplaceAll(s, "'", `'\''`) + "'"
}

// goEnv is `go env NAME` as the go command resolves it (environment, then
// its configuration file, then its default).
func goEnv(name string) (string, error) {
	out, err := exec.Command("go", "env", name).Output()
	if err != nil {
		return "", fmt.Errorf("go env %s: %w", name, err)
	}
	return strings.TrimSpace(string(out)), nil
}

// envCommand writes the proxy to dir and prints the lines.
func envCommand(w io.Writer, root, dir string) error {
	if dir == "" {
		d, err := defaultEnvDir()
		if err != nil {
			return err
		}
		dir = d
	}
	upstream, err := goEnv("GOPROXY")
	if err != nil {
		return err
	}
	nosumdb, err := goEnv("GONOSUMDB")
	if err != nil {
		return err
	}
	version, err := writeProxy(root, dir, "")
	if err != nil {
		return err
	}
	return envLines(w, dir, version, upstream, nosumdb)
}
