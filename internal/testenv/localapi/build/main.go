// Command build builds the local API server (tools/localapi) as the tests
// do, with progress on stderr, and prints the binary's path on stdout:
//
//	GOWORK=off go run ./internal/testenv/localapi/build
//
// $KINFORMER_LOCALAPI works as for the tests: an existing file is used as
// is, a directory is where the binary goes. `make localapi` and `make demo`
// build it this way. It imports only the standard library, so that nothing
// is compiled unseen before the build's own progress lines.
package main

import (
	"context"
	"fmt"
	"os"
	"os/signal"
	"syscall"

	"github.com/kinformer/kinformer/internal/testenv/localapi"
)

func main() {
	if len(os.Args) > 1 {
		fmt.Fprintln(os.Stderr, "usage: go run ./internal/testenv/localapi/build (no arguments; $"+localapi.EnvBinary+" is the binary or the directory for it)")
		os.Exit(2)
	}
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	out, err := localapi.Build(ctx, localapi.Options{Prefix: "localapi"})
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		os.Exit(1)
	}
	fmt.Println(out)
}
