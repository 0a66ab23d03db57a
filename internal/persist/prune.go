package persist

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/kinformer/kinformer/internal/snapshot"
)

// A state directory gathers files no informer will use again: those set
// aside as unreadable (".bad": damaged, or encrypted under keys no longer
// given), and those named under a directory key that was since replaced
// (kinformer.key removed or changed: names are digests under it, so no
// informer finds them). Unused finds them; the first Open of a directory
// in a process reports what it can see cheaply (reportLeftovers); Prune
// removes them.

// UnusedFile is a file of a state directory that no informer will use.
type UnusedFile struct {
	Path string
	Size int64
	Why  string
}

// Unused lists the files of dir no informer will use: set aside, named
// under another directory key, or not a state file that can be read. A
// file in use (locked by an informer) is never listed. It reads the
// identity of each state file (checking it as a load does).
func Unused(dir string) ([]UnusedFile, error) {
	if err := snapshot.CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	key, err := readKey(filepath.Join(dir, KeyFile))
	if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var out []UnusedFile
	for _, e := range entries {
		name := e.Name()
		path := filepath.Join(dir, name)
		why := ""
		switch {
		case !e.Type().IsRegular():
			continue
		case strings.HasSuffix(name, ".kinformer.bad"):
			why = "set aside: it could not be used (damaged, or encrypted under keys not given)"
		case !strings.HasSuffix(name, ".kinformer"):
			continue
		default:
			why = unusedStateFile(dir, name, key)
		}
		if why == "" {
			continue
		}
		fi, err := e.Info()
		if err != nil {
			continue // gone meanwhile
		}
		out = append(out, UnusedFile{Path: path, Size: fi.Size(), Why: why})
	}
	return out, nil
}

// unusedStateFile says why the state file name in dir is of no use to
// any informer, or "" if it may be: in use (locked by a process, key or
// no key: one that runs on while kinformer.key was removed still uses
// its file), empty (being made: bbolt writes its first pages under its
// lock, which comes a moment after the file), or named as key names it.
func unusedStateFile(dir, name string, key []byte) string {
	path := filepath.Join(dir, name)
	if fi, err := os.Lstat(path); err != nil || fi.Size() == 0 {
		return ""
	}
	sealed, err := snapshot.Identity(path, 100*time.Millisecond)
	switch {
	case errors.Is(err, snapshot.ErrInUse):
		return ""
	case key == nil:
		return "named under a directory key that is gone (" + KeyFile + " was removed)"
	case err != nil:
		return "unreadable: " + err.Error()
	case Path(dir, readablePart(name), key, sealed) != path:
		return "named under another directory key (" + KeyFile + " was replaced): no informer finds it"
	}
	return ""
}

// readablePart is the name a state file was made with (Path): before its
// digest.
func readablePart(file string) string {
	base := strings.TrimSuffix(file, ".kinformer")
	if i := strings.LastIndexByte(base, '-'); i >= 0 {
		return base[:i]
	}
	return base
}

// Prune removes the files Unused lists, and returns them.
func Prune(dir string) ([]UnusedFile, error) {
	files, err := Unused(dir)
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, f := range files {
		if err := os.Remove(f.Path); err != nil && !errors.Is(err, fs.ErrNotExist) {
			errs = append(errs, err)
		}
	}
	return files, errors.Join(errs...)
}

var leftoversReported sync.Map // directory → struct{}: reported once per process

// reportLeftovers reports, the first time a process opens dir, the files
// set aside in it (and, if its key (key) was just made, the state files
// named under the one before): what and how big, and how to remove them.
// Set-aside files by name and size; the state files of a fresh key as
// Unused judges them (unusedStateFile), so that one in use or being made
// (another informer that started at the same moment on the fresh
// directory) is never reported.
func reportLeftovers(dir string, freshKey bool, key []byte, report func(error)) {
	if _, done := leftoversReported.LoadOrStore(dir, struct{}{}); done {
		return
	}
	entries, err := os.ReadDir(dir)
	if err != nil {
		return
	}
	var names []string
	var size int64
	for _, e := range entries {
		n := e.Name()
		switch {
		case !e.Type().IsRegular():
			continue
		case strings.HasSuffix(n, ".kinformer.bad"):
		case !freshKey || !strings.HasSuffix(n, ".kinformer"):
			continue
		case unusedStateFile(dir, n, key) == "":
			continue
		}
		if fi, err := e.Info(); err == nil {
			names = append(names, n)
			size += fi.Size()
		}
	}
	if len(names) == 0 {
		return
	}
	shown := names
	if len(shown) > 5 {
		shown = append(shown[:5:5], fmt.Sprintf("and %d more", len(names)-5))
	}
	report(fmt.Errorf("%s holds %d files no informer will use (%.1f MiB: %s): set aside as unreadable, or named under a directory key since replaced; `kinformer state prune --state-dir %s` (or kinformer.PruneStateDir) removes them",
		dir, len(names), float64(size)/(1<<20), strings.Join(shown, ", "), dir))
}

// Forget removes the state file at path, of an informer that will not
// run again (a namespace that left a view): unless another process uses
// it. A file already gone is no error.
func Forget(path string) error {
	if _, err := snapshot.Identity(path, 100*time.Millisecond); errors.Is(err, snapshot.ErrInUse) {
		return nil
	}
	if err := os.Remove(path); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}
