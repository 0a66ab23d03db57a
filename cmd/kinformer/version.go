package main

import (
	"context"
	"fmt"
	"runtime/debug"

	"github.com/spf13/pflag"
)

// version is the module version the binary was built from, or "devel".
func version() string {
	if bi, ok := debug.ReadBuildInfo(); ok && bi.Main.Version != "" && bi.Main.Version != "(devel)" {
		return bi.Main.Version
	}
	return "devel"
}

func runVersion(_ context.Context, e *env, args []string) error {
	fs := pflag.NewFlagSet("version", pflag.ContinueOnError)
	if err := parseFlags(e, fs, args, "version", "Prints the version of "+e.prog+".\n"); err != nil {
		return err
	}
	if fs.NArg() > 0 {
		return usageErrorf("version: unexpected argument %q", fs.Arg(0))
	}
	fmt.Fprintf(e.stdout, "kinformer %s\n", version())
	return nil
}
