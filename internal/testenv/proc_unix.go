//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testenv

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

// killGroup sends sig to the process group led by pid (the server runs in
// its own group, see sysProcAttr).
func killGroup(pid int, sig syscall.Signal) error {
	return syscall.Kill(-pid, sig)
}

func signalProcess(pid int, sig syscall.Signal) error {
	return syscall.Kill(pid, sig)
}

// processAlive reports whether a process with this pid exists.
func processAlive(pid int) bool {
	err := syscall.Kill(pid, 0)
	return err == nil || errors.Is(err, syscall.EPERM)
}
