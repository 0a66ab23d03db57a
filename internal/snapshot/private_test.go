//go:build unix

package snapshot

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
)

// written returns the path of a snapshot with one object committed, and
// its bytes.
func written(t *testing.T) (string, []byte) {
	t.Helper()
	path := filepath.Join(t.TempDir(), "s")
	s, err := Open(path, testID, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if err := s.Commit(&Batch{Puts: map[string][]byte{"k": []byte("v")}, RV: "7"}); err != nil {
		t.Fatal(err)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	return path, b
}

// Opening, loading and closing a snapshot does not change its file.
func TestOpenWritesNothing(t *testing.T) {
	path, before := written(t)
	s, err := Open(path, testID, Options{NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	if _, rv := load(t, s); rv != "7" {
		t.Fatalf("rv %q", rv)
	}
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	after, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(before, after) {
		t.Fatal("Open, Load and Close changed the file")
	}
}

// A file that is not private is ErrUnsafe, unread and unchanged; a
// symbolic link is not followed, even to create the file.
func TestOpenUnsafe(t *testing.T) {
	for _, tc := range []struct {
		name  string
		root  bool
		spoil func(t *testing.T, path string)
		want  string
	}{
		{"another user's", true, func(t *testing.T, path string) {
			if err := os.Chown(path, 65534, -1); err != nil {
				t.Fatal(err)
			}
		}, "owned by uid 65534"},
		{"readable by others", false, func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o644); err != nil {
				t.Fatal(err)
			}
		}, "chmod 600"},
		{"readable by group", false, func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o640); err != nil {
				t.Fatal(err)
			}
		}, "mode 0640"},
		{"writable by group", false, func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o620); err != nil {
				t.Fatal(err)
			}
		}, "mode 0620"},
		{"readable and writable by group", false, func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o660); err != nil {
				t.Fatal(err)
			}
		}, "mode 0660"},
		{"writable by others", false, func(t *testing.T, path string) {
			if err := os.Chmod(path, 0o602); err != nil {
				t.Fatal(err)
			}
		}, "mode 0602"},
		{"a symbolic link to a snapshot", false, func(t *testing.T, path string) {
			other := path + ".real"
			if err := os.Rename(path, other); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(other, path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a dangling symbolic link", false, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Symlink(filepath.Join(t.TempDir(), "victim"), path); err != nil {
				t.Fatal(err)
			}
		}, "symbolic link"},
		{"a directory", false, func(t *testing.T, path string) {
			if err := os.Remove(path); err != nil {
				t.Fatal(err)
			}
			if err := os.Mkdir(path, 0o700); err != nil {
				t.Fatal(err)
			}
		}, "not a regular file"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			if tc.root && os.Geteuid() != 0 {
				t.Skip("needs root, to give a file away")
			}
			path, _ := written(t)
			tc.spoil(t, path)
			before := snapshotOf(t, path)
			s, err := Open(path, testID, Options{NoSync: true})
			if err == nil {
				s.Close()
			}
			if !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("Open = %v, want ErrUnsafe saying %q", err, tc.want)
			}
			if after := snapshotOf(t, path); after != before {
				t.Fatalf("the path changed: %s, was %s", after, before)
			}
		})
	}
}

// snapshotOf describes what is at path, and where a link leads.
func snapshotOf(t *testing.T, path string) string {
	t.Helper()
	fi, err := os.Lstat(path)
	if err != nil {
		t.Fatal(err)
	}
	d := fi.Mode().String()
	if fi.Mode()&os.ModeSymlink != 0 {
		target, _ := os.Readlink(path)
		tfi, err := os.Lstat(target)
		d += " → " + target
		if err == nil {
			d += fmt.Sprintf(" %s %d bytes", tfi.Mode(), tfi.Size())
		} else {
			d += " (none)"
		}
		return d
	}
	if fi.Mode().IsRegular() {
		b, _ := os.ReadFile(path)
		d += " " + string(b)
	}
	return d
}

func TestCheckPrivateDir(t *testing.T) {
	dir := t.TempDir()
	if err := CheckPrivateDir(dir); err != nil {
		t.Fatalf("a 0700 directory: %v", err)
	}
	for _, mode := range []os.FileMode{0o777, 0o770, 0o702, 0o720} {
		if err := os.Chmod(dir, mode); err != nil {
			t.Fatal(err)
		}
		if err := CheckPrivateDir(dir); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "chmod 700") {
			t.Errorf("mode %04o: %v, want ErrUnsafe with the fix", mode, err)
		}
	}
	if err := os.Chmod(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(dir); err != nil {
		t.Errorf("a 0755 directory (no one else may write): %v", err)
	}
	if os.Geteuid() == 0 {
		if err := os.Chown(dir, 65534, -1); err != nil {
			t.Fatal(err)
		}
		if err := CheckPrivateDir(dir); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "uid 65534") {
			t.Errorf("another user's directory: %v", err)
		}
	}
}

// The way to a state directory is checked, in part as ssh's StrictModes
// does: a symbolic link on the way that another user owns, or a directory
// above owned by another user, makes it unsafe; a directory above that
// others may write (a Kubernetes volume) does not.
func TestCheckPrivateDirPath(t *testing.T) {
	base := t.TempDir()
	mk := func(parts ...string) string {
		p := filepath.Join(append([]string{base}, parts...)...)
		if err := os.MkdirAll(p, 0o700); err != nil {
			t.Fatal(err)
		}
		return p
	}
	open := mk("open")
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	under := mk("open", "state")
	if err := CheckPrivateDir(under); err != nil {
		t.Errorf("under a world-writable directory (an emptyDir volume): %v", err)
	}

	if os.Geteuid() != 0 {
		t.Skip("needs root, to give a symbolic link away")
	}
	link := filepath.Join(base, "link")
	if err := os.Symlink(under, link); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(link); err != nil {
		t.Errorf("through this user's symbolic link: %v", err)
	}
	if err := os.Lchown(link, 65534, -1); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(link); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "symbolic link of uid 65534") {
		t.Errorf("through another user's symbolic link: %v", err)
	}
	if err := os.Chown(open, 65534, -1); err != nil {
		t.Fatal(err)
	}
	if err := CheckPrivateDir(under); !errors.Is(err, ErrUnsafe) || !strings.Contains(err.Error(), "owned by uid 65534") {
		t.Errorf("under another user's directory: %v", err)
	}
}

// CheckDir lists the directories on the way that group or others may
// write and that are not sticky (accepted, for a warning): a 0777 or 2775
// parent, not a 1777 (/tmp) or 0700 one; and one that holds a symbolic
// link on the way.
func TestCheckDirWritable(t *testing.T) {
	// mine keeps what CheckDir lists under base: t.TempDir's own parents
	// are the machine's.
	mine := func(base string, writable []WritableDir) (out []string) {
		for _, w := range writable {
			if strings.HasPrefix(w.Path, base) {
				out = append(out, w.Path+" "+w.Octal())
			}
		}
		return out
	}
	for _, tc := range []struct {
		mode os.FileMode
		want string // the mode listed; "": not listed
	}{
		{0o777, "0777"},                 // an emptyDir volume
		{0o775 | os.ModeSetgid, "2775"}, // an fsGroup volume
		{0o770, "0770"},
		{0o777 | os.ModeSticky, ""}, // /tmp
		{0o755, ""},
		{0o700, ""},
	} {
		base := t.TempDir()
		parent := filepath.Join(base, "volume")
		dir := filepath.Join(parent, "state")
		if err := os.MkdirAll(dir, 0o700); err != nil {
			t.Fatal(err)
		}
		if err := os.Chmod(parent, tc.mode); err != nil {
			t.Fatal(err)
		}
		writable, err := CheckDir(dir)
		if err != nil {
			t.Fatalf("under mode %v: %v", tc.mode, err)
		}
		want := []string(nil)
		if tc.want != "" {
			want = []string{parent + " " + tc.want}
		}
		if got := mine(base, writable); !slices.Equal(got, want) {
			t.Errorf("under mode %v: listed %q, want %q", tc.mode, got, want)
		}
	}

	// Through a symbolic link in a directory others may write: the
	// directory holding the link is listed, once, though the real state
	// directory's parents are private.
	base := t.TempDir()
	real := filepath.Join(base, "private", "state")
	open := filepath.Join(base, "open")
	for _, d := range []string{real, open} {
		if err := os.MkdirAll(d, 0o700); err != nil {
			t.Fatal(err)
		}
	}
	if err := os.Chmod(open, 0o777); err != nil {
		t.Fatal(err)
	}
	link := filepath.Join(open, "state")
	if err := os.Symlink(real, link); err != nil {
		t.Fatal(err)
	}
	writable, err := CheckDir(link)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := mine(base, writable), []string{open + " 0777"}; !slices.Equal(got, want) {
		t.Errorf("through a link in a 0777 directory: listed %q, want %q", got, want)
	}
}
