//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package localapi

import (
	"errors"
	"os"
	"syscall"
)

// lockFile takes an exclusive advisory lock on f, blocking until it is free.
func lockFile(f *os.File) error {
	for {
		err := syscall.Flock(int(f.Fd()), syscall.LOCK_EX)
		if !errors.Is(err, syscall.EINTR) {
			return err
		}
	}
}

func unlockFile(f *os.File) error {
	return syscall.Flock(int(f.Fd()), syscall.LOCK_UN)
}
