package persist

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
)

// Format is the version of what the objects in a state file are (their
// encoding, the key, the identity's fields). Bump it when they change.
const Format = "kinformer-state/1"

// Identity describes the watch a state file belongs to: a file is applied
// only to an informer with the same identity.
type Identity struct {
	Source            string // the server, API group and version, namespace and resource
	Type              string // the Go type of the objects, with its package path
	Name              string // Options.Name
	LabelSelector     string
	FieldSelector     string
	Key               string // the key function's name
	Transform         string // the transform's name, or "none"
	KeepManagedFields bool
}

// String is the identity as the file stores it.
func (id Identity) String() string {
	return strings.Join([]string{
		Format,
		"source=" + id.Source,
		"type=" + id.Type,
		"name=" + id.Name,
		"labelSelector=" + id.LabelSelector,
		"fieldSelector=" + id.FieldSelector,
		"key=" + id.Key,
		"transform=" + id.Transform,
		fmt.Sprintf("keepManagedFields=%t", id.KeepManagedFields),
	}, "\n")
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Path is the state file of identity in dir: a readable name for people,
// a hash of the identity so that two watches never share a file.
func Path(dir, name, identity string) string {
	sum := sha256.Sum256([]byte(identity))
	name = unsafeFileChars.ReplaceAllString(name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	return filepath.Join(dir, name+"-"+hex.EncodeToString(sum[:8])+".kinformer")
}
