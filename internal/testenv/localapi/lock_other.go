//go:build !(linux || darwin || freebsd || netbsd || openbsd || dragonfly)

package localapi

import (
	"errors"
	"os"
)

var errUnsupported = errors.New("localapi: the local API server is not supported on this OS")

func lockFile(*os.File) error   { return errUnsupported }
func unlockFile(*os.File) error { return errUnsupported }
