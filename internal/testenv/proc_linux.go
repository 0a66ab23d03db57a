package testenv

import "syscall"

// sysProcAttr puts the server in its own process group (so that Kill can
// signal everything it started) and makes the kernel SIGKILL it when the
// test process dies, even if the test binary panics or is killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}
