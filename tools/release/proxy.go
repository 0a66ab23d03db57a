package main

import (
	"bytes"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path"
	"path/filepath"
	"strings"
	"time"

	"golang.org/x/mod/modfile"
	mod "golang.org/x/mod/module"
	"golang.org/x/mod/semver"
	"golang.org/x/mod/zip"
)

// writeProxy writes every published module at version (or, if version is
// "", at the version the sub-modules require of the library) into dir in
// the layout of a GOPROXY (https://go.dev/ref/mod#goproxy-protocol), and
// returns the version.
func writeProxy(root, dir, version string) (string, error) {
	if version == "" {
		v, err := requiredLibraryVersion(root)
		if err != nil {
			return "", err
		}
		version = v
	}
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return "", fmt.Errorf("version %q is not a canonical semantic version (vMAJOR.MINOR.PATCH)", version)
	}
	if major := semver.Major(version); major != "v0" && major != "v1" {
		return "", fmt.Errorf("version %s: a %s module path needs a /%s suffix, which these modules do not have", version, major, major)
	}
	files, err := workingTreeFiles(root)
	if err != nil {
		return "", err
	}
	for _, m := range modules {
		if err := writeModule(root, dir, m, version, files); err != nil {
			return "", fmt.Errorf("%s@%s: %w", m.path, version, err)
		}
	}
	return version, nil
}

// requiredLibraryVersion is the version of the library that the published
// sub-modules require; they must agree.
func requiredLibraryVersion(root string) (string, error) {
	lib := modules[0].path
	version := ""
	for _, m := range modules[1:] {
		f, err := readModFile(filepath.Join(root, m.dir, "go.mod"))
		if err != nil {
			return "", err
		}
		v := ""
		for _, r := range f.Require {
			if r.Mod.Path == lib {
				v = r.Mod.Version
			}
		}
		for _, r := range f.Replace {
			if r.Old.Path == lib {
				return "", fmt.Errorf("%s/go.mod replaces %s: a user's build ignores a dependency's replace, so a release must not need it (the workspace, go.work, is for development)", m.dir, lib)
			}
		}
		switch {
		case v == "":
			return "", fmt.Errorf("%s/go.mod does not require %s", m.dir, lib)
		case version != "" && v != version:
			return "", fmt.Errorf("%s/go.mod requires %s@%s, another sub-module @%s: release them at one version", m.dir, lib, v, version)
		}
		version = v
	}
	// The workspace must point that version at this tree (see go.work).
	data, err := os.ReadFile(filepath.Join(root, "go.work"))
	if err != nil {
		return "", err
	}
	work, err := modfile.ParseWork("go.work", data, nil)
	if err != nil {
		return "", err
	}
	for _, m := range modules[:2] { // what other modules of the workspace require
		found := false
		for _, r := range work.Replace {
			if r.Old.Path == m.path {
				found = true
				if r.Old.Version != version || filepath.Clean(r.New.Path) != filepath.Clean(m.dir) {
					return "", fmt.Errorf("go.work replaces %s %s => %s; want %s => ./%s, the version the sub-modules require", m.path, r.Old.Version, r.New.Path, version, m.dir)
				}
			}
		}
		if !found {
			return "", fmt.Errorf("go.work does not replace %s %s => ./%s", m.path, version, m.dir)
		}
	}
	return version, nil
}

func readModFile(file string) (*modfile.File, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return nil, err
	}
	return modfile.Parse(file, data, nil)
}

// workingTreeFiles lists the files a commit of the working tree would
// hold, relative to root with slashes: tracked files that still exist and
// untracked ones git does not ignore (build outputs stay out).
func workingTreeFiles(root string) ([]string, error) {
	cmd := exec.Command("git", "ls-files", "-z", "--cached", "--others", "--exclude-standard")
	cmd.Dir = root
	out, err := cmd.Output()
	if err != nil {
		return nil, fmt.Errorf("git ls-files: %w", err)
	}
	var files []string
	for _, f := range strings.Split(string(out), "\x00") {
		if f == "" {
			continue
		}
		if fi, err := os.Lstat(filepath.Join(root, filepath.FromSlash(f))); err != nil || !fi.Mode().IsRegular() {
			continue // deleted in the working tree, or a symlink (never in a module zip)
		}
		files = append(files, f)
	}
	return files, nil
}

// writeModule writes m's .info, .mod, .zip and list files. The zip holds
// the files under m.dir; zip.Create leaves out those of nested modules
// (a directory with its own go.mod) and of vendor directories, as the go
// command does.
func writeModule(root, dir string, m module, version string, files []string) error {
	prefix := ""
	if m.dir != "." {
		prefix = m.dir + "/"
	}
	var zfiles []zip.File
	for _, f := range files {
		if rel, ok := strings.CutPrefix(f, prefix); ok {
			zfiles = append(zfiles, treeFile{rel: rel, abs: filepath.Join(root, filepath.FromSlash(f))})
		}
	}
	gomod, err := os.ReadFile(filepath.Join(root, m.dir, "go.mod"))
	if err != nil {
		return err
	}
	escaped, err := mod.EscapePath(m.path)
	if err != nil {
		return err
	}
	vdir := filepath.Join(dir, filepath.FromSlash(escaped), "@v")
	if err := os.MkdirAll(vdir, 0o755); err != nil {
		return err
	}
	var zbuf bytes.Buffer
	if err := zip.Create(&zbuf, mod.Version{Path: m.path, Version: version}, zfiles); err != nil {
		return err
	}
	info, err := json.Marshal(struct {
		Version string
		Time    time.Time
	}{version, time.Now().UTC().Truncate(time.Second)})
	if err != nil {
		return err
	}
	for name, data := range map[string][]byte{
		version + ".zip":  zbuf.Bytes(),
		version + ".mod":  gomod,
		version + ".info": info,
		"list":            []byte(version + "\n"),
	} {
		if err := os.WriteFile(filepath.Join(vdir, name), data, 0o644); err != nil {
			return err
		}
	}
	return nil
}

// treeFile is a file of the working tree, at its path in the module.
type treeFile struct{ rel, abs string }

func (f treeFile) Path() string                 { return path.Clean(f.rel) }
func (f treeFile) Lstat() (os.FileInfo, error)  { return os.Lstat(f.abs) }
func (f treeFile) Open() (io.ReadCloser, error) { return os.Open(f.abs) }
