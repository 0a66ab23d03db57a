// Command release holds the checks that keep kinformer's modules
// releasable:
//
//	go run ./tools/release proxy -out DIR [-version V]
//	go run ./tools/release api [-w]
//	go run ./tools/release version V
//	go run ./tools/release env [-out DIR]
//
// proxy writes a file-based Go module proxy (GOPROXY=file://DIR) that
// holds each of the repository's published modules (the library,
// controllerruntime, cmd/kinformer) at version V, made from the working
// tree (tracked and untracked files git does not ignore) as the go command
// would make them from a tag: hack/consumer.sh builds programs against it
// as a user outside the repository would, with no replace and no
// workspace. V defaults to the version the sub-modules require of the
// library, which is the version being prepared (see docs/development.md,
// "Releasing").
//
// api writes (-w) or checks the exported API of every public package of
// those modules against api/*.txt, one line per feature (see api.go).
//
// version makes V the version being released (see version.go).
//
// env writes that proxy (by default under the user's cache directory) and
// prints the shell lines that make the go command use it: what a user
// needs before the version is published (README.md, "Install"; see
// env.go).
package main

import (
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
)

// A module this repository publishes.
type module struct {
	path string // module path
	dir  string // relative to the repository root
	api  string // api/ file of its exported API; "" for a command
}

var modules = []module{
	{"github.com/kinformer/kinformer", ".", "kinformer.txt"},
	{"github.com/kinformer/kinformer/controllerruntime", "controllerruntime", "controllerruntime.txt"},
	{"github.com/kinformer/kinformer/cmd/kinformer", "cmd/kinformer", ""},
}

func main() {
	if len(os.Args) < 2 {
		usage()
	}
	root, err := repoRoot()
	if err != nil {
		fatal(err)
	}
	switch os.Args[1] {
	case "proxy":
		fs := flag.NewFlagSet("proxy", flag.ExitOnError)
		out := fs.String("out", "", "directory to write the proxy to (GOPROXY=file://DIR)")
		version := fs.String("version", "", "version of every module (default: the library version the sub-modules require)")
		_ = fs.Parse(os.Args[2:])
		if *out == "" || fs.NArg() > 0 {
			usage()
		}
		v, err := writeProxy(root, *out, *version)
		if err != nil {
			fatal(err)
		}
		fmt.Println(v)
	case "env":
		fs := flag.NewFlagSet("env", flag.ExitOnError)
		out := fs.String("out", "", "directory to write the proxy to (default: kinformer/proxy under the user's cache directory)")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() > 0 {
			usage()
		}
		if err := envCommand(os.Stdout, root, *out); err != nil {
			fatal(err)
		}
	case "api":
		fs := flag.NewFlagSet("api", flag.ExitOnError)
		write := fs.Bool("w", false, "write api/*.txt instead of checking them")
		_ = fs.Parse(os.Args[2:])
		if fs.NArg() > 0 {
			usage()
		}
		if err := apiCommand(root, *write); err != nil {
			fatal(err)
		}
	case "version":
		if len(os.Args) != 3 {
			usage()
		}
		if err := setVersion(root, os.Args[2]); err != nil {
			fatal(err)
		}
	default:
		usage()
	}
}

func usage() {
	fmt.Fprintln(os.Stderr, "usage: release proxy -out DIR [-version V] | release api [-w] | release version V | release env [-out DIR]")
	os.Exit(2)
}

func fatal(err error) {
	fmt.Fprintln(os.Stderr, "release:", err)
	os.Exit(1)
}

// repoRoot is the top of the git work tree holding the current directory.
func repoRoot() (string, error) {
	out, err := exec.Command("git", "rev-parse", "--show-toplevel").Output()
	if err != nil {
		return "", fmt.Errorf("git rev-parse --show-toplevel: %w (run inside the repository)", err)
	}
	return filepath.Clean(strings.TrimSpace(string(out))), nil
}
