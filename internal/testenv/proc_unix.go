//go:build linux || darwin || freebsd || netbsd || openbsd || dragonfly

package testenv

import (
	"errors"
	"syscall"
)

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
