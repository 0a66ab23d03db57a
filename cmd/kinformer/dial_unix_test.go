//go:build unix

package main

import (
	"net"
	"syscall"
)

// smallBufferDialer dials with a 4 KiB receive buffer (no autotuning): a
// client that does not read stalls its server after a few MiB.
var smallBufferDialer = &net.Dialer{Control: func(_, _ string, c syscall.RawConn) error {
	var err error
	if cerr := c.Control(func(fd uintptr) {
		err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, 4096)
	}); cerr != nil {
		return cerr
	}
	return err
}}
