package testenv

import (
	"os/exec"
	"runtime"
	"sync"
	"syscall"
)

// sysProcAttr puts the server in its own process group (so that Kill can
// signal everything it started) and makes the kernel SIGKILL it when the
// test process dies, even if the test binary panics or is killed.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Setpgid: true, Pdeathsig: syscall.SIGKILL}
}

// The parent-death signal fires when the *thread* that forked the child
// exits, not the process. Go may retire a thread (when a goroutine locked to
// it exits), so all children are forked from one locked thread that lives
// as long as the process.
var (
	forkOnce sync.Once
	forkReqs chan func()
)

func startProcess(cmd *exec.Cmd) error {
	forkOnce.Do(func() {
		forkReqs = make(chan func())
		go func() {
			runtime.LockOSThread()
			for f := range forkReqs {
				f()
			}
		}()
	})
	errc := make(chan error, 1)
	forkReqs <- func() { errc <- cmd.Start() }
	return <-errc
}
