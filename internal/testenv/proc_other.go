//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package testenv

import (
	"errors"
	"os"
	"os/exec"
	"syscall"
)

var errUnsupported = errors.New("testenv: the local API server is not supported on this OS")

func lockFile(*os.File) error                 { return errUnsupported }
func unlockFile(*os.File) error               { return errUnsupported }
func killGroup(int, syscall.Signal) error     { return errUnsupported }
func signalProcess(int, syscall.Signal) error { return errUnsupported }
func processAlive(int) bool                   { return false }
func sysProcAttr() *syscall.SysProcAttr       { return nil }
func startProcess(*exec.Cmd) error            { return errUnsupported }
