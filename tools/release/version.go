package main

import (
	"fmt"
	"os"
	"path/filepath"
	"regexp"

	"golang.org/x/mod/semver"
)

// setVersion makes version the one being released: every sub-module that
// requires the library or the controller-runtime module requires it at
// version (cmd/kinformer, controllerruntime, tools/bench), and go.work
// points that version at this tree. The tags are then cut on the commit
// that holds the change (docs/development.md, "Releasing").
func setVersion(root, version string) error {
	if !semver.IsValid(version) || semver.Canonical(version) != version {
		return fmt.Errorf("version %q is not a canonical semantic version (vMAJOR.MINOR.PATCH)", version)
	}
	published := map[string]bool{modules[0].path: true, modules[1].path: true}
	for _, dir := range []string{"cmd/kinformer", "controllerruntime", "tools/bench"} {
		file := filepath.Join(root, dir, "go.mod")
		f, err := readModFile(file)
		if err != nil {
			return err
		}
		for _, r := range f.Require {
			if published[r.Mod.Path] {
				if err := f.AddRequire(r.Mod.Path, version); err != nil {
					return err
				}
			}
		}
		if err := writeFormatted(file, f.Format); err != nil {
			return err
		}
	}
	// go.work's replacements keep their place and comments: only the
	// versions change.
	file := filepath.Join(root, "go.work")
	data, err := os.ReadFile(file)
	if err != nil {
		return err
	}
	for _, m := range modules[:2] {
		re := regexp.MustCompile(`(?m)^(\s*(?:replace\s+)?` + regexp.QuoteMeta(m.path) + `\s+)v\S+(\s+=>)`)
		if !re.Match(data) {
			return fmt.Errorf("go.work: no replacement of %s at a version", m.path)
		}
		data = re.ReplaceAll(data, []byte("${1}"+version+"${2}"))
	}
	if err := os.WriteFile(file, data, 0o644); err != nil {
		return err
	}
	_, err = requiredLibraryVersion(root) // all in step
	return err
}

func writeFormatted(file string, format func() ([]byte, error)) error {
	out, err := format()
	if err != nil {
		return err
	}
	return os.WriteFile(file, out, 0o644)
}
