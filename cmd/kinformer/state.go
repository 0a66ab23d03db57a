package main

import (
	"errors"
	"fmt"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
)

// --state-dir: the library's durable cache (Options.StateDir). The CLI's
// informers use a dynamic client, which cannot say what it watches, so the
// CLI names it (Options.StateKey); the library adds the selectors and the
// rest of the informer's identity.

const stateDirUsage = "keep the cache in a file in `DIR` and start from it next time: the objects as they were, then what changed meanwhile"

func bindStateDir(fs *pflag.FlagSet, dir *string) {
	fs.StringVar(dir, "state-dir", "", stateDirUsage)
}

// stateKey names the watch of resource res in namespace ("" for all
// namespaces, or a cluster-scoped resource) on cfg's cluster: what the
// library cannot learn from a dynamic client. Two clusters, resources or
// scopes never share a key, so never a file.
func stateKey(cfg *rest.Config, res resource, namespace string) string {
	scope := "ns=" + namespace
	if namespace == "" {
		scope = "all-namespaces"
	}
	return fmt.Sprintf("%s %s %s", cfg.Host, res.gvr, scope)
}

// isStateError reports whether err is about the state file: the informer
// goes on without it (a full list), so it is a warning, not a failure.
func isStateError(err error) bool { return errors.Is(err, kinformer.ErrSnapshot) }
