package main

import (
	"context"
	"fmt"

	"github.com/spf13/pflag"

	"github.com/kinformer/kinformer"
)

// `kinformer state prune`: remove the files of a state directory that no
// informer will use (kinformer.PruneStateDir).

const stateLong = `Removes the files of a --state-dir directory that no informer will use:
those set aside as unreadable (*.kinformer.bad: damaged, or encrypted under
keys no longer given) and those named under a directory key since replaced
(kinformer.key removed or changed). A file in use by a running watch or
serve is left alone. Each file is printed with its size and why; with
--dry-run nothing is removed.
`

type stateFlags struct {
	dir    string
	dryRun bool
}

func (f *stateFlags) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("state", pflag.ContinueOnError)
	fs.StringVar(&f.dir, "state-dir", "", "the state directory (`DIR`)")
	fs.BoolVar(&f.dryRun, "dry-run", false, "list the files, remove nothing")
	return fs
}

func runState(_ context.Context, e *env, args []string) error {
	var f stateFlags
	fs := f.flagSet()
	if err := parseFlags(e, fs, args, "state prune --state-dir DIR [--dry-run]", stateLong); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0 || fs.Arg(0) != "prune":
		return usageErrorf("state: want the subcommand prune (%s state prune --state-dir DIR)", e.prog)
	case fs.NArg() > 1:
		return usageErrorf("state prune: unexpected argument %q", fs.Arg(1))
	case f.dir == "":
		return usageErrorf("state prune: --state-dir DIR is required")
	}
	files, err := kinformer.PruneStateDir(f.dir, f.dryRun)
	var total int64
	verb := "removed"
	if f.dryRun {
		verb = "would remove"
	}
	for _, u := range files {
		total += u.Size
		fmt.Fprintf(e.stdout, "%s %s (%d bytes): %s\n", verb, u.Path, u.Size, u.Why)
	}
	fmt.Fprintf(e.stdout, "%s %d files, %d bytes\n", verb, len(files), total)
	return err
}
