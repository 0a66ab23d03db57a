package main

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"strings"

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
// namespaces, or a cluster-scoped resource) on cfg's cluster, as cfg's user:
// what the library cannot learn from a dynamic client. Two clusters,
// resources, scopes or users never share a key, so never a file: a file
// written with one user's rights is not served to another until a 403.
func stateKey(cfg *rest.Config, res resource, namespace string) string {
	scope := "ns=" + namespace
	if namespace == "" {
		scope = "all-namespaces"
	}
	return fmt.Sprintf("%s %s %s user=%s", cfg.Host, res.gvr, scope, userOf(cfg))
}

// userOf identifies whom cfg acts as, without saying any secret: the user
// and groups impersonated, and a hash of the credentials (the key is kept
// in the state file).
func userOf(cfg *rest.Config) string {
	h := sha256.New()
	for _, s := range []string{cfg.Username, cfg.Password, cfg.BearerToken, cfg.BearerTokenFile,
		cfg.CertFile, string(cfg.CertData), cfg.KeyFile, string(cfg.KeyData)} {
		fmt.Fprintf(h, "%d:%s;", len(s), s)
	}
	if cfg.ExecProvider != nil {
		fmt.Fprintf(h, "exec:%s %q;", cfg.ExecProvider.Command, cfg.ExecProvider.Args)
	}
	if cfg.AuthProvider != nil {
		fmt.Fprintf(h, "auth:%s;", cfg.AuthProvider.Name)
	}
	as := cfg.Impersonate.UserName
	if len(cfg.Impersonate.Groups) > 0 {
		as += " groups=" + strings.Join(cfg.Impersonate.Groups, ",")
	}
	if cfg.Impersonate.UID != "" {
		as += " uid=" + cfg.Impersonate.UID
	}
	return fmt.Sprintf("%x as=%s", h.Sum(nil)[:8], as)
}

// isStateError reports whether err is about the state file: the informer
// goes on without it (a full list), so it is a warning, not a failure.
func isStateError(err error) bool { return errors.Is(err, kinformer.ErrSnapshot) }
