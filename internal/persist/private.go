package persist

import (
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"log/slog"
	"os"
	"path/filepath"
	"sync"

	"github.com/kinformer/kinformer/internal/snapshot"
)

// A state directory is trusted: its files are loaded into caches, and
// their names and identities are derived from whom the informers act as.
// So it must be private (snapshot.CheckPrivateDir: the user's own, that
// no one else may write), as must its files (snapshot.OpenPrivate), and
// it keeps a key of its own (KeyFile) that makes those names and
// identities keyed digests: without the key, no one can check a guess of
// a credential against a file's name.

// KeyFile is the name of a state directory's key in it: 32 random bytes,
// made on first use.
const KeyFile = "kinformer.key"

const keySize = 32

// PrepareDir makes dir (mode 0700) if it does not exist, checks that it
// is private, and returns its key, making KeyFile (mode 0600) on first
// use. An unsafe directory or key file is an error wrapping
// snapshot.ErrUnsafe.
func PrepareDir(dir string) ([]byte, error) {
	key, _, err := prepareDir(dir)
	return key, err
}

// CheckDir makes dir (0700) if it does not exist and checks it and its
// key, if it has one, as PrepareDir does, without making a key: the
// informer that first opens the directory does, and reports then what an
// earlier key left.
func CheckDir(dir string) error {
	if _, err := checkDir(dir); err != nil {
		return err
	}
	if _, err := readKey(filepath.Join(dir, KeyFile)); err != nil && !errors.Is(err, fs.ErrNotExist) {
		return err
	}
	return nil
}

// checkDir makes dir (0700) if it does not exist and checks it
// (snapshot.CheckDir): the directories on the way that others may write.
func checkDir(dir string) ([]snapshot.WritableDir, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	return snapshot.CheckDir(dir)
}

// prepareDir is PrepareDir, and also returns the directories on the way
// to dir that others may write (snapshot.CheckDir): accepted, for a
// warning (warnWritable).
func prepareDir(dir string) ([]byte, []snapshot.WritableDir, error) {
	writable, err := checkDir(dir)
	if err != nil {
		return nil, nil, err
	}
	path := filepath.Join(dir, KeyFile)
	key, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		key, err = makeKey(dir, path)
	}
	if err != nil {
		return nil, nil, err
	}
	return key, writable, nil
}

var writableWarned sync.Map // directory → struct{}: warned once per process

// warnWritable logs a warning for each directory of writable, the first
// time a process finds it on the way to a state directory (dir). A
// warning, not a failure: the directory is used, as it must be in a
// Kubernetes volume (an emptyDir is 0777, an fsGroup volume 2775), and
// so a log line rather than an error reported (an Error event each
// informer's handlers would see, for a volume as Kubernetes makes it).
func warnWritable(log *slog.Logger, dir string, writable []snapshot.WritableDir) {
	if log == nil || !log.Enabled(context.Background(), slog.LevelWarn) {
		return // not spent on a logger that drops it: a later informer's may not
	}
	for _, w := range writable {
		if _, done := writableWarned.LoadOrStore(w.Path, struct{}{}); done {
			continue
		}
		log.Warn("kinformer: a directory on the way to the state directory is writable by group or others, and not sticky: another user able to write it could replace the state files; used anyway, as a Kubernetes volume must be (chmod go-w, or +t, if it need not be shared)",
			"dir", w.Path, "mode", w.Octal(), "stateDir", dir)
	}
}

func readKey(path string) ([]byte, error) {
	f, err := snapshot.OpenPrivate(path, os.O_RDONLY, 0)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	key, err := io.ReadAll(io.LimitReader(f, keySize+1))
	if err != nil {
		return nil, err
	}
	if len(key) != keySize {
		return nil, fmt.Errorf("%s: %d bytes, not a key of %d (remove it: the directory's state files then start cold)", path, len(key), keySize)
	}
	return key, nil
}

// makeKey writes a new key aside, then links it into place: a process
// that reads the key never sees it half written, and of two that make it
// at once, the second reads the first's.
func makeKey(dir, path string) ([]byte, error) {
	key := make([]byte, keySize)
	if _, err := rand.Read(key); err != nil {
		return nil, err
	}
	tmp, err := os.CreateTemp(dir, "."+KeyFile+"-*") // O_EXCL, mode 0600
	if err != nil {
		return nil, err
	}
	defer os.Remove(tmp.Name())
	_, err = tmp.Write(key)
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return nil, err
	}
	if err := os.Link(tmp.Name(), path); errors.Is(err, fs.ErrExist) {
		return readKey(path)
	} else if err != nil {
		return nil, err
	}
	return key, nil
}

// keyed is the HMAC-SHA256 of s under key, in hex.
func keyed(key []byte, s string) string {
	m := hmac.New(sha256.New, key)
	m.Write([]byte(s))
	return hex.EncodeToString(m.Sum(nil))
}
