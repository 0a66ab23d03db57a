//go:build !unix

package snapshot

import "io/fs"

// Elsewhere (Windows) there is no O_NOFOLLOW, and no owner or mode bits
// to check: access is the ACLs' business, and none of this is checked.
const (
	noFollow   = 0
	checksMode = false
	NonBlock   = 0 // see private_unix.go
)

func ownerOf(fs.FileInfo) (int, bool) { return 0, false }
