package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/persist"
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
		// Made (0700) if it does not exist, with its key; the library
		// checks the same again before using it.
		if _, err := persist.PrepareDir(dir); err != nil {
			return fmt.Errorf("state directory refused: %w", err)
		}
	}
	*v.dir = dir
	return nil
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
