package persist

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"maps"
	"path/filepath"
	"regexp"
	"slices"
	"strings"

	"k8s.io/client-go/rest"
)

// Format is the version of what the objects in a state file are (their
// encoding, the key, the identity's fields). Bump it when they change.
const Format = "kinformer-state/2"

// Identity describes the watch a state file belongs to: a file is applied
// only to an informer with the same identity.
type Identity struct {
	// Source is the server, API group and version, namespace and
	// resource; and, from the Factory and the CLI, whom the client acts
	// as (User). A file keeps it only sealed (Sealed).
	Source            string
	Type              string // the Go type of the objects, with its package path
	Name              string // Options.Name
	LabelSelector     string
	FieldSelector     string
	Key               string // the key function's name
	Transform         string // the transform's name, or "none"
	KeepManagedFields bool
	// Fields is the projection's paths (Options.Fields), comma-separated;
	// "" for whole objects.
	Fields string
	// Encrypted: the objects are encrypted with state keys (Config.Keys).
	Encrypted bool
}

// String is the identity in full, as it is compared.
func (id Identity) String() string {
	lines := []string{
		Format,
		"source=" + id.Source,
		"type=" + id.Type,
		"name=" + id.Name,
		"labelSelector=" + id.LabelSelector,
		"fieldSelector=" + id.FieldSelector,
		"key=" + id.Key,
		"transform=" + id.Transform,
		fmt.Sprintf("keepManagedFields=%t", id.KeepManagedFields),
	}
	if id.Fields != "" {
		// Only when projected: the files of whole objects keep their
		// names from before projections.
		lines = append(lines, "fields="+id.Fields)
	}
	if id.Encrypted {
		// Only when encrypted, as fields.
		lines = append(lines, "encrypted=aes-256-gcm")
	}
	return strings.Join(lines, "\n")
}

// Sealed is the identity as a state file in the directory of key stores
// it, and its name is made from (Path): the source, which may say whom the
// informer acts as, only as its keyed digest. The rest stays readable, for
// the error that says how a file differs.
func (id Identity) Sealed(key []byte) string {
	id.Source = "hmac-sha256:" + keyed(key, id.Source)
	return id.String()
}

var unsafeFileChars = regexp.MustCompile(`[^A-Za-z0-9._-]+`)

// Path is the state file of the sealed identity in dir, whose key is key:
// a readable name for people, and a keyed digest of the identity so that
// two watches never share a file.
func Path(dir, name string, key []byte, sealed string) string {
	name = unsafeFileChars.ReplaceAllString(name, "_")
	if len(name) > 64 {
		name = name[:64]
	}
	return filepath.Join(dir, name+"-"+keyed(key, sealed)[:16]+".kinformer")
}

// User identifies whom cfg acts as, for an identity's Source: a SHA-256
// of its credentials and of whom it impersonates. It is unsalted, so it
// is never written as it is: a state file has it only sealed with its
// directory's key (Identity.Sealed).
//
// A token read from a file (BearerTokenFile, as in a Pod) counts by the
// file's name, not its content, which is rotated. Credentials that a
// custom transport adds (rest.Config.WrapTransport) are not seen.
func User(cfg *rest.Config) string {
	h := sha256.New()
	field := func(name, v string) { fmt.Fprintf(h, "%s:%d:%s;", name, len(v), v) }
	token := cfg.BearerToken
	if cfg.BearerTokenFile != "" {
		token = ""
	}
	field("user", cfg.Username)
	field("password", cfg.Password)
	field("token", token)
	field("tokenFile", cfg.BearerTokenFile)
	field("certFile", cfg.CertFile)
	field("cert", string(cfg.CertData))
	field("keyFile", cfg.KeyFile)
	field("key", string(cfg.KeyData))
	if e := cfg.ExecProvider; e != nil {
		field("exec", e.Command)
		for _, a := range e.Args {
			field("arg", a)
		}
		for _, v := range e.Env {
			field("env", v.Name+"="+v.Value)
		}
	}
	if a := cfg.AuthProvider; a != nil {
		field("authProvider", a.Name)
		for _, k := range slices.Sorted(maps.Keys(a.Config)) {
			// Not the tokens it refreshes and stores back.
			if !strings.Contains(k, "token") && !strings.Contains(k, "expir") {
				field("auth."+k, a.Config[k])
			}
		}
	}
	as := cfg.Impersonate
	field("as", as.UserName)
	field("asUID", as.UID)
	for _, g := range as.Groups {
		field("asGroup", g)
	}
	for _, k := range slices.Sorted(maps.Keys(as.Extra)) {
		field("asExtra", k+"="+strings.Join(as.Extra[k], ","))
	}
	return hex.EncodeToString(h.Sum(nil))
}
