//go:build unix

package snapshot

import (
	"errors"
	"os"
	"syscall"
)

// tryLock takes the lock bbolt takes (flock, exclusive) on f without
// waiting: false if another holds it. Closing f lets it go.
func tryLock(f *os.File) (bool, error) {
	err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX|syscall.LOCK_NB)
	if errors.Is(err, syscall.EWOULDBLOCK) {
		return false, nil
	}
	return err == nil, err
}
