//go:build darwin || freebsd || netbsd || openbsd || dragonfly

package testenv

import (
	"os/exec"
	"syscall"
)

// sysProcAttr puts the server in its own process group so that Kill can
// signal everything it started. (There is no parent-death signal on these
// systems; Stop and the stale-directory sweep do the cleanup.)
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true}
}

func startProcess(cmd *exec.Cmd) error { return cmd.Start() }
