//go:build unix

package snapshot

import (
	"io/fs"
	"syscall"
)

const (
	noFollow   = syscall.O_NOFOLLOW
	checksMode = true
	// NonBlock opens a FIFO at once, where open would wait for a writer:
	// whatever is found where a file is expected is then refused for not
	// being a regular one, instead of hanging the start. It changes
	// nothing for a regular file.
	NonBlock = syscall.O_NONBLOCK
)

// ownerOf returns the uid that owns the file fi describes.
func ownerOf(fi fs.FileInfo) (int, bool) {
	st, ok := fi.Sys().(*syscall.Stat_t)
	if !ok {
		return 0, false
	}
	return int(st.Uid), true
}
