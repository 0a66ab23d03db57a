package persist

import (
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

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
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	if err := snapshot.CheckPrivateDir(dir); err != nil {
		return nil, err
	}
	path := filepath.Join(dir, KeyFile)
	key, err := readKey(path)
	if errors.Is(err, fs.ErrNotExist) {
		return makeKey(dir, path)
	}
	return key, err
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
