package main

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/snapshot"
)

// --state-dir: the library's durable cache (Options.StateDir). The CLI's
// informers use a dynamic client, which cannot say what it watches, so the
// CLI names it (Options.StateKey); the library adds the selectors and the
// rest of the informer's identity.

const stateDirUsage = "keep the cache in a file in `DIR` and start from it next time: the objects as they were, then what changed meanwhile"

func bindStateDir(fs *pflag.FlagSet, dir *string) {
	fs.Var(stateDirValue{dir}, "state-dir", stateDirUsage)
}

// stateDirValue is --state-dir: a directory that is refused at once, with
// the problem and its fix, if it is not private (the user's own, and no
// one else may write in it), rather than warned about at each informer's
// start, which the library would do and go on without it.
type stateDirValue struct{ dir *string }

func (v stateDirValue) String() string {
	if v.dir == nil {
		return ""
	}
	return *v.dir
}

func (v stateDirValue) Type() string { return "string" }

func (v stateDirValue) Set(dir string) error {
	if dir != "" {
		// Made (0700) if it does not exist, and checked; the library
		// checks the same again before using it, and makes its key then
		// (and so sees, and reports, a key that was removed).
		if err := persist.CheckDir(dir); err != nil {
			return fmt.Errorf("state directory refused: %w", err)
		}
	}
	*v.dir = dir
	return nil
}

// --state-key-file, or KINFORMER_STATE_KEY: the keys that encrypt the
// state files (Options.StateKeys). Without them Secrets are not kept.

const stateKeyFileUsage = "encrypt the state files with the keys in `FILE`: one per line, 32 bytes in base64 each (head -c 32 /dev/urandom | base64), the first encrypts, all decrypt; else the keys in $" + stateKeyEnv + "; without keys, Secrets are not kept"

// stateKeyEnv holds state keys when --state-key-file is not given
// (separated by newlines or commas).
const stateKeyEnv = "KINFORMER_STATE_KEY"

// stateKeys are the state keys of a command: its --state-key-file, read
// by load once the flags are parsed.
type stateKeys struct {
	file string
	keys [][]byte
}

func bindStateKeyFile(fs *pflag.FlagSet, k *stateKeys) {
	fs.StringVar(&k.file, "state-key-file", "", stateKeyFileUsage)
}

// load reads the keys of --state-key-file, or else of KINFORMER_STATE_KEY;
// an error is a usage error (a key file that cannot be used is refused at
// once, not found out by each informer). A key file that group or others
// may read is used, and warned of, as ssh warns of a private key's.
func (k *stateKeys) load(warn func(string)) error {
	var err error
	switch env := os.Getenv(stateKeyEnv); {
	case k.file != "":
		if k.keys, err = kinformer.ReadStateKeys(k.file); err != nil {
			return usageErrorf("--state-key-file: %v", err)
		}
		if fi, err := os.Stat(k.file); err == nil && runtime.GOOS != "windows" && fi.Mode().Perm()&0o077 != 0 {
			warn(fmt.Sprintf("--state-key-file %s (mode %#o) may be read by group or others: whoever reads it can read the Secrets in the state files (chmod 600 %s)",
				k.file, fi.Mode().Perm(), k.file))
		}
	case env != "":
		if k.keys, err = kinformer.ParseStateKeys(env); err != nil {
			return usageErrorf("%s: %v", stateKeyEnv, err)
		}
	}
	return nil
}

// warnSecrets says, once per resource, that the library keeps no state
// file of Secrets without keys (it logs it only on -v).
func (k *stateKeys) warnSecrets(e *env, res resource, dir string) {
	if dir != "" && len(k.keys) == 0 && res.gvr.Group == "" && res.gvr.Resource == "secrets" {
		e.warn("secrets are not kept in --state-dir without --state-key-file (or $" + stateKeyEnv + "): they are listed at every start")
	}
}

// warnStateDir warns of the directories on the way to --state-dir that
// group or others may write (and are not sticky): they are accepted, as a
// Kubernetes volume's must be, but another user able to write one could
// replace the state files. The library logs it, which the CLI shows only
// with --verbose. The directory was made with the flag
// (stateDirValue.Set); one that cannot be used is the informers' to
// report.
func warnStateDir(e *env, dir string) {
	if dir == "" {
		return
	}
	writable, err := snapshot.CheckDir(dir)
	if err != nil {
		return
	}
	for _, w := range writable {
		e.warn(fmt.Sprintf("--state-dir %s: %s (mode %s) may be written by group or others, and is not sticky: another user able to write it could replace the state files (chmod go-w, or +t, if it need not be shared)", dir, w.Path, w.Octal()))
	}
}

// stateKey names the watch of resource res in namespace ("" for all
// namespaces, or a cluster-scoped resource) on cfg's cluster, as cfg's user:
// what the library cannot learn from a dynamic client. Two clusters,
// resources, scopes or users never share a key, so never a file: a file
// written with one user's rights is not served to another. The user is a
// digest of the credentials (persist.User, as the library's Factory
// does), which the library keeps on disk only keyed with the state
// directory's own key.
func stateKey(cfg *rest.Config, res resource, namespace string) string {
	scope := "ns=" + namespace
	if namespace == "" {
		scope = "all-namespaces"
	}
	return fmt.Sprintf("%s %s %s user=%s", cfg.Host, res.gvr, scope, persist.User(cfg))
}

// isStateError reports whether err is about the state file: the informer
// goes on without it (a full list), so it is a warning, not a failure.
func isStateError(err error) bool { return errors.Is(err, kinformer.ErrSnapshot) }

// restoreLine is the line that says what a watch of what (configmaps,
// widgets.example.com) restored from --state-dir, and how long it took
// to catch up with the server (took, from its start): "" if it restored
// nothing (no file; a file set aside is a warning of its own).
//
//	kinformer: restored 1,234 configmaps from DIR/FILE (rv 5678), caught up in 412ms
//	kinformer: restored 1,234 configmaps from 3 state files in DIR, caught up in 412ms
func restoreLine(prog, what string, rs []kinformer.StateRestore, took time.Duration) string {
	if len(rs) == 0 {
		return ""
	}
	n := 0
	for _, r := range rs {
		n += r.Objects
	}
	from := fmt.Sprintf("%s (rv %s)", rs[0].File, rs[0].ResourceVersion)
	if len(rs) > 1 {
		from = fmt.Sprintf("%d state files in %s", len(rs), filepath.Dir(rs[0].File))
	}
	return escapeTerminal(fmt.Sprintf("%s: restored %s %s from %s, caught up in %v", prog, thousands(n), what, from, took.Round(time.Millisecond)))
}

// thousands writes n with a comma between groups of three digits: 1,234.
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0 && s[i-1] != '-'; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
