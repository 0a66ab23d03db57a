package testenv

import (
	"context"
	"sync"

	"github.com/kinformer/kinformer/internal/testenv/localapi"
)

// EnvBinary names the environment variable that overrides where the
// localapi binary comes from. If it names an existing file, that binary is
// used as is and nothing is built. Otherwise it names the directory in which
// Build puts (and caches) the binary.
const EnvBinary = localapi.EnvBinary

var buildMu struct {
	sync.Mutex
	path string // set after a successful build in this process
}

// Build builds tools/localapi (its own Go module, which depends on
// k8s.io/kubernetes) with the local Go toolchain and returns the path of the
// binary (see localapi.Build: a stable path, by default
// $(go env GOCACHE)/../kinformer-localapi/localapi; a warm call takes a
// second or two, a cold one many minutes, reported on stderr a line a
// minute). The result is memoised for the life of the process.
func Build(ctx context.Context) (string, error) {
	buildMu.Lock()
	defer buildMu.Unlock()
	if buildMu.path != "" {
		return buildMu.path, nil
	}
	p, err := localapi.Build(ctx, localapi.Options{Prefix: "testenv"})
	if err != nil {
		return "", err
	}
	buildMu.path = p
	return p, nil
}
