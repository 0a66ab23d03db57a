//go:build !unix

package main

import "net"

var smallBufferDialer *net.Dialer // none: the test that needs it is skipped
