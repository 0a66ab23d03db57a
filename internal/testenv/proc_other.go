//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package testenv

import (
	"errors"
	"os/exec"
	"syscall"
)

var errUnsupported = errors.New("testenv: the local API server is not supported on this OS")

func killGroup(int, syscall.Signal) error     { return errUnsupported }
func signalProcess(int, syscall.Signal) error { return errUnsupported }
func processAlive(int) bool                   { return false }
func sysProcAttr() *syscall.SysProcAttr       { return nil }
func startProcess(*exec.Cmd) error            { return errUnsupported }
