package snapshot

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"syscall"
)

// A state file is loaded into a cache whose handlers act on what it holds,
// so it must be the user's own: a regular file, owned by this process's
// user, that no one else may read or write, reached by its own name and
// not through a symbolic link planted in its place (which bbolt would
// follow, creating or growing the file it points to).

// ErrUnsafe: a file or directory that another user owns or may write, or
// a symbolic link where a file should be. It is never read, nor changed.
var ErrUnsafe = errors.New("unsafe")

// OpenPrivate opens path as os.OpenFile does, without following a
// symbolic link in its last component, and checks what it opened: a
// regular file of this process's user with no permission for group or
// others. A file it creates has mode perm (which must grant nothing to
// group or others).
func OpenPrivate(path string, flag int, perm os.FileMode) (*os.File, error) {
	f, err := os.OpenFile(path, flag|noFollow|syscall.O_CLOEXEC|NonBlock, perm)
	if err != nil {
		if errors.Is(err, syscall.ELOOP) {
			return nil, fmt.Errorf("%w: %s is a symbolic link, not followed (remove it)", ErrUnsafe, path)
		}
		return nil, err
	}
	fi, err := f.Stat()
	if err == nil {
		err = checkPrivate(path, fi)
	}
	if err != nil {
		f.Close()
		return nil, err
	}
	return f, nil
}

// checkPrivate checks an opened file's information (fstat: the file
// opened, not whatever the name leads to by now).
func checkPrivate(path string, fi fs.FileInfo) error {
	switch {
	case fi.Mode()&fs.ModeSymlink != 0:
		return fmt.Errorf("%w: %s is a symbolic link, not followed (remove it)", ErrUnsafe, path)
	case !fi.Mode().IsRegular():
		return fmt.Errorf("%w: %s is not a regular file (%s)", ErrUnsafe, path, fi.Mode().Type())
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return fmt.Errorf("%w: %s is owned by uid %d, not by this process's user (uid %d); not read", ErrUnsafe, path, uid, os.Geteuid())
	}
	if p := fi.Mode().Perm(); p&0o077 != 0 && checksMode {
		return fmt.Errorf("%w: %s has mode %04o: group or others may use it; not read (chmod 600 %s)", ErrUnsafe, path, p, path)
	}
	return nil
}

// CheckPrivateDir checks dir (following a symbolic link: a state
// directory may be one): a directory owned by this process's user that
// group and others cannot write, so that no one else can plant, replace or
// rename the files in it.
func CheckPrivateDir(dir string) error {
	_, err := CheckDir(dir)
	return err
}

// A WritableDir is a directory on the way to a state directory that group
// or others may write and that is not sticky: another user able to write
// it could rename what is in it and put their own in its place (the state
// directory, or a directory or symbolic link on the way to it), and so
// replace the state files. It is accepted (see checkPath), and worth a
// warning. A sticky one (/tmp, 1777) is not listed: there, only an
// entry's owner may rename or remove it.
type WritableDir struct {
	Path string      // as reached from the state directory's name
	Mode fs.FileMode // its type, permission and special bits
}

// Octal is w's mode as chmod and ls -l write it: "0777", "2775".
func (w WritableDir) Octal() string {
	m := uint32(w.Mode.Perm())
	for bit, b := range map[fs.FileMode]uint32{fs.ModeSetuid: 0o4000, fs.ModeSetgid: 0o2000, fs.ModeSticky: 0o1000} {
		if w.Mode&bit != 0 {
			m |= b
		}
	}
	return fmt.Sprintf("%04o", m)
}

// CheckDir checks dir as CheckPrivateDir does, and lists the directories
// on the way to it that it accepts though others may write them
// (WritableDir), in the order met walking up from it.
func CheckDir(dir string) ([]WritableDir, error) {
	fi, err := os.Stat(dir)
	if err != nil {
		return nil, err
	}
	if !fi.IsDir() {
		return nil, fmt.Errorf("%w: %s is not a directory", ErrUnsafe, dir)
	}
	if uid, ok := ownerOf(fi); ok && uid != os.Geteuid() {
		return nil, fmt.Errorf("%w: the directory %s is owned by uid %d, not by this process's user (uid %d)", ErrUnsafe, dir, uid, os.Geteuid())
	}
	if p := fi.Mode().Perm(); p&0o022 != 0 && checksMode {
		return nil, fmt.Errorf("%w: the directory %s has mode %04o: group or others may write in it (chmod 700 %s)", ErrUnsafe, dir, p, dir)
	}
	if checksMode {
		return checkPath(dir)
	}
	return nil, nil
}

// checkPath checks the way to dir as ssh's StrictModes does, in part: a
// symbolic link on it must be this user's or root's (another user could
// point it elsewhere), and every directory above it this user's or
// root's. Else another user could swap the state directory, or a
// directory above it, for one of theirs. Unlike StrictModes, a directory
// above that others may write is not refused: Kubernetes volumes are
// (an emptyDir is 0777, an fsGroup volume 2775), and state directories
// live in them. Those (unless sticky) are returned, for a warning: the
// directories that hold each component of the way as written, and those
// above the real directory, each once.
func checkPath(dir string) ([]WritableDir, error) {
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil, err
	}
	me := os.Geteuid()
	owned := func(fi fs.FileInfo) (int, bool) {
		uid, ok := ownerOf(fi)
		return uid, !ok || uid == me || uid == 0
	}
	var writable []WritableDir
	var seen []fs.FileInfo
	note := func(p string, fi fs.FileInfo) {
		if fi.Mode().Perm()&0o022 == 0 || fi.Mode()&fs.ModeSticky != 0 {
			return
		}
		for _, s := range seen {
			if os.SameFile(s, fi) {
				return
			}
		}
		seen = append(seen, fi)
		writable = append(writable, WritableDir{Path: p, Mode: fi.Mode()})
	}
	// The symbolic links on the way, each component as written, and the
	// directories that hold them.
	for p := abs; ; p = filepath.Dir(p) {
		if fi, err := os.Lstat(p); err == nil && fi.Mode()&fs.ModeSymlink != 0 {
			if uid, ok := owned(fi); !ok {
				return nil, fmt.Errorf("%w: %s, on the way to the state directory %s, is a symbolic link of uid %d: another user may point it elsewhere", ErrUnsafe, p, dir, uid)
			}
		}
		if filepath.Dir(p) == p {
			break
		}
		if fi, err := os.Stat(filepath.Dir(p)); err == nil {
			note(filepath.Dir(p), fi)
		}
	}
	// The directories above the real one.
	real, err := filepath.EvalSymlinks(abs)
	if err != nil {
		return nil, err
	}
	for p := filepath.Dir(real); ; p = filepath.Dir(p) {
		fi, err := os.Stat(p)
		if err != nil {
			return nil, err
		}
		if uid, ok := owned(fi); !ok {
			return nil, fmt.Errorf("%w: %s, above the state directory %s, is owned by uid %d: it may replace the directory", ErrUnsafe, p, dir, uid)
		}
		note(p, fi)
		if filepath.Dir(p) == p {
			return writable, nil
		}
	}
}
