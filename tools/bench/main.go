// Command bench measures kinformer against client-go's shared informer on a
// real local kube-apiserver (tools/localapi), each contender in its own
// process, alternating, over several rounds, and writes docs/benchmarks.md
// and heap charts.
//
//	cd tools/bench && go run .              # the full benchmark (15-25 minutes)
//	cd tools/bench && go run . micro        # the cache micro-benchmarks into docs/benchmarks.md
//	cd tools/bench && go run . factory      # a Factory's shared informers against independent ones (a few minutes)
//	cd tools/bench && go run . restart      # warm restart from Options.StateDir against cold starts, and its cost per update
//	cd tools/bench && go run . crd          # custom resources (JSON): dynamic and typed informers of both libraries
//	cd tools/bench && go run . shard        # 1, 2, 4 sharded replicas, server- and client-side filtering; join and death
//	cd tools/bench && go run . cr           # controller-runtime managers over either cache; client-go SharedIndexInformers of both libraries
//	cd tools/bench && go run . compact      # Options.Compact (issue 22): 20,000 and 50,000 Pods, reads, custom resources, warm restarts
//	cd tools/bench && go run . handlers     # a busy handler on the initial list: does it overlap the list's transfer?
//	cd tools/bench && go run . kubeapi      # 20 client-go informers direct against through kinformer serve --kube-api: the API server's cost
//	cd tools/bench && go run . scale        # 100,000 Secrets and 20,000 Services through a controller-runtime manager: its cache against kcr
//	cd tools/bench && go run . -h           # the scenarios; go run . SCENARIO -h for a scenario's flags
//
// It is its own Go module so that `go test ./...` at the repository root
// never builds it.
//
// This file is the driver: the table of scenarios, and what every scenario
// shares (the common flags, the revision, the local API server's binary
// and data dir, the report's section). Each scenario is in files named
// after it (factory.go; restart.go, restart_contender.go,
// restart_report.go; ...); child.go runs contenders in child processes.
package main

import (
	"cmp"
	"flag"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"time"
)

// scenario is one benchmark: a subcommand of this program (the full
// benchmark has no name: it is what runs without one).
type scenario struct {
	name string // subcommand; "" for the full benchmark
	help string // one line, for -h

	// section: the begin and end markers of its section of
	// docs/benchmarks.md, which the full benchmark keeps when it rewrites
	// the page.
	section [2]string

	// localapi: it runs its own local API server and takes -rounds,
	// -data-dir, -localapi, -keep, -v and -rev (every scenario takes -out).
	localapi bool
	// The help of a common flag, when the default does not say it.
	roundsHelp, dataDirHelp, keepHelp string

	// flags defines the scenario's own flags on fs and returns what runs
	// it once they are parsed.
	flags func(fs *flag.FlagSet) func(b *bench) error

	// child is the subcommand of its contender processes (this program
	// re-executed, see child.go), childMain what runs there; "" for none.
	child     string
	childMain func(args []string) error
}

// scenarios is the table of subcommands, in the order of -h and of the
// sections of docs/benchmarks.md.
func scenarios() []scenario {
	return []scenario{
		{name: "", help: "the full benchmark: 20,000 ConfigMaps and 5,000 Pods, client-go, kinformer, kinformer+compact, client-go+strip and the floor (15-25 minutes)",
			localapi: true, flags: fullFlags, child: "contender", childMain: contenderMain},
		{name: "micro", help: "the cache micro-benchmarks (cache_bench_test.go at the repository root) into docs/benchmarks.md",
			section: [2]string{microBegin, microEnd}, flags: microFlags},
		{name: "factory", help: "10 consumers of Pods and ConfigMaps: one Factory against 20 independent informers (about a minute)",
			section: [2]string{factoryBegin, factoryEnd}, localapi: true, roundsHelp: "rounds; each runs both contenders once, the order alternating",
			flags: factoryFlags, child: "factory-contender", childMain: factoryContenderMain},
		{name: "restart", help: "warm restart from Options.StateDir against cold starts, and the state file's cost per update (about 10 minutes); -down 1m,10m: after time down, the cluster living on",
			section: [2]string{restartBegin, restartEnd}, localapi: true, roundsHelp: "rounds; each runs every contender once, the order alternating", keepHelp: "keep the temporary data dir and state files",
			flags: restartFlags, child: "restart-contender", childMain: restartContenderMain},
		{name: "crd", help: "custom resources (JSON): dynamic and typed informers of both libraries, 10,000 and 50,000 CRs (about 30 minutes)",
			section: [2]string{crdBegin, crdEnd}, localapi: true, dataDirHelp: "localapi data dirs go under it, one per size (default: a new temporary one); reuse one to skip creating the objects",
			flags: crdFlags, child: "crd-contender", childMain: crdContenderMain},
		{name: "shard", help: "sharding (issue 12): 1, 2, 4 replicas over 20,000 ConfigMaps, server- and client-side filtering; a join and a death (about 15 minutes)",
			section: [2]string{shardBegin, shardEnd}, localapi: true, roundsHelp: "rounds of the replica sweep (each with one join and one death)",
			dataDirHelp: "localapi data dir, shared by both modes (default: a new temporary one); reuse one to skip creating the ConfigMaps",
			flags:       shardFlags, child: "shard-replica", childMain: shardReplicaMain},
		{name: "cr", help: "controller-runtime managers over either cache; client-go SharedIndexInformers of both libraries (about 25 minutes)",
			section: [2]string{crBegin, crEnd}, localapi: true, flags: crFlags, child: "cr-contender", childMain: crContenderMain},
		{name: "compact", help: "Options.Compact (issue 22): 20,000 and 50,000 Pods, reads, 10,000 CRs, warm restarts (about 40 minutes)",
			section: [2]string{compactBegin, compactEnd}, localapi: true, keepHelp: "keep the temporary data dir and state files",
			dataDirHelp: "localapi data dir (default: a new temporary one)",
			flags:       compactFlags, child: "compact-contender", childMain: compactContenderMain},
		{name: "project", help: "Options.Fields (issue 30): 3,000 and 20,000 Pods projected to five fields, against client-go and client-go with an allowlist Transform (about 10 minutes)",
			section: [2]string{projectBegin, projectEnd}, localapi: true, dataDirHelp: "localapi data dir (default: a new temporary one)",
			flags: projectFlags},
		{name: "scale", help: "at scale: 100,000 Secrets and 20,000 Services synced and handled by a controller-runtime manager, its own cache against kcr (about 35 minutes, 15-20 of them creating the objects)",
			section: [2]string{scaleBegin, scaleEnd}, localapi: true, dataDirHelp: "localapi data dir (default: a new temporary one); reuse one to skip creating the Secrets and Services",
			flags: scaleFlags, child: "scale-contender", childMain: scaleContenderMain},
		{name: "handlers", help: "a busy handler on the initial list (issue 45): 20,000 ConfigMaps, a 50 µs handler; kinformer, client-go and controller-runtime against the list alone and the handler alone (about 5 minutes)",
			section: [2]string{handlersBegin, handlersEnd}, localapi: true, flags: handlersFlags},
		{name: "kubeapi", help: "many clients through serve (issue 48): 20 client-go informers of 5,000 ConfigMaps against the API server directly and through kinformer serve --kube-api; its CPU, watches and memory, serve's, update latency (about 3 minutes)",
			section: [2]string{kubeapiBegin, kubeapiEnd}, localapi: true, dataDirHelp: "localapi data dir (default: a new temporary one); reuse one to skip creating the ConfigMaps",
			flags: kubeapiFlags, child: "kubeapi-clients", childMain: kubeapiClientsMain},
		{name: "spread", help: "many informers started together (issue 45): 100 namespaces of 200 ConfigMaps, one Factory's informers at once against one by one and against client-go (about 5 minutes)",
			section: [2]string{spreadBegin, spreadEnd}, localapi: true, dataDirHelp: "localapi data dir (default: a new temporary one); reuse one to skip creating the ConfigMaps",
			flags: spreadFlags},
	}
}

func main() {
	all := scenarios()
	sc, args := &all[0], os.Args[1:]
	if len(args) > 0 {
		for i := range all {
			s := &all[i]
			if s.child != "" && args[0] == s.child {
				if err := s.childMain(args[1:]); err != nil {
					fmt.Fprintln(os.Stderr, s.child+":", err)
					os.Exit(1)
				}
				return
			}
			if s.name != "" && args[0] == s.name {
				sc, args = s, args[1:]
			}
		}
	}
	if err := sc.main(args); err != nil {
		fmt.Fprintln(os.Stderr, sc.command()+":", err)
		os.Exit(1)
	}
}

// command is the scenario's name in messages: its subcommand, "bench" for
// the full benchmark.
func (sc *scenario) command() string { return cmp.Or(sc.name, "bench") }

// bench is one run of a scenario: the common flags and what they give.
type bench struct {
	sc   *scenario
	args []string // the scenario's command line, for the report's "reproduce with"
	root string   // the repository root

	out                    string // -out: the report, relative to root ("" for none)
	rounds                 int
	dataDir, localapi, rev string
	keep, verbose          bool

	bin      string   // the localapi binary, once prepare has run
	cleanups []func() // run when the scenario returns
}

// main parses the common flags and the scenario's own, finds the
// repository and the revision measured, and runs the scenario.
func (sc *scenario) main(args []string) error {
	b := &bench{sc: sc, args: args}
	fs := flag.NewFlagSet(sc.command(), flag.ExitOnError)
	fs.Usage = func() { sc.usage(fs) }
	outHelp := "the report, relative to the repository root ('' for none)"
	if sc.name != "" {
		outHelp = "report whose " + sc.name + " section to update, relative to the repository root ('' for none)"
	}
	fs.StringVar(&b.out, "out", "docs/benchmarks.md", outHelp)
	if sc.localapi {
		fs.IntVar(&b.rounds, "rounds", 3, cmp.Or(sc.roundsHelp, "rounds; each runs every contender once, the order rotating"))
		fs.StringVar(&b.dataDir, "data-dir", "", cmp.Or(sc.dataDirHelp, "localapi data dir (default: a new temporary one); reuse one to skip creating the workload"))
		fs.StringVar(&b.localapi, "localapi", "", "localapi binary (default: where `make localapi` puts it; built if missing)")
		fs.BoolVar(&b.keep, "keep", false, cmp.Or(sc.keepHelp, "keep the temporary data dir"))
		fs.BoolVar(&b.verbose, "v", false, "show localapi's logs")
		fs.StringVar(&b.rev, "rev", "", "the kinformer revision measured, for the report (default: git describe --always --dirty of the repository)")
	}
	run := sc.flags(fs)
	fs.Parse(args)
	if fs.NArg() > 0 {
		return fmt.Errorf("unknown scenario or argument %q (-h lists them)", fs.Arg(0))
	}
	defer func() {
		for _, f := range b.cleanups {
			f()
		}
	}()
	var err error
	if b.root, err = repoRoot(); err != nil {
		return err
	}
	if sc.localapi && b.rev == "" {
		out, _ := exec.Command("git", "-C", b.root, "describe", "--always", "--dirty").Output()
		b.rev = strings.TrimSpace(string(out))
	}
	return run(b)
}

// usage prints the scenario's flags; the full benchmark's also lists the
// scenarios.
func (sc *scenario) usage(fs *flag.FlagSet) {
	w := fs.Output()
	if sc.name == "" {
		fmt.Fprintf(w, "Usage: cd tools/bench && go run . [SCENARIO] [flags]\n\nScenarios:\n")
		for _, s := range scenarios() {
			fmt.Fprintf(w, "  %-9s %s\n", cmp.Or(s.name, "(none)"), s.help)
		}
		fmt.Fprintf(w, "\n`go run . SCENARIO -h` lists a scenario's flags. The full benchmark's:\n\n")
	} else {
		fmt.Fprintf(w, "Usage: cd tools/bench && go run . %s [flags]\n\n%s\n\nFlags:\n\n", sc.name, sc.help)
	}
	fs.PrintDefaults()
}

// prepare finds the localapi binary (-localapi, or where `make localapi`
// puts it, built if missing) and the data dir (-data-dir, or a new
// temporary one, removed at the end unless -keep).
func (b *bench) prepare() error {
	if b.bin != "" {
		return nil
	}
	bin, err := localapiPath(b.localapi, b.root)
	if err != nil {
		return err
	}
	if b.dataDir == "" {
		if b.dataDir, err = b.tempDir(""); err != nil {
			return err
		}
	} else if err := os.MkdirAll(b.dataDir, 0o755); err != nil {
		return err
	}
	b.bin = bin
	return nil
}

// tempDir makes a temporary directory named after the scenario and what,
// removed at the end unless -keep.
func (b *bench) tempDir(what string) (string, error) {
	pattern := "kinformer-bench-"
	for _, s := range []string{b.sc.name, what} {
		if s != "" {
			pattern += s + "-"
		}
	}
	dir, err := os.MkdirTemp("", pattern)
	if err != nil {
		return "", err
	}
	if !b.keep {
		b.cleanups = append(b.cleanups, func() { os.RemoveAll(dir) })
	}
	return dir, nil
}

// section prints the scenario's section of docs/benchmarks.md (text,
// markers included) and puts it in place of the old one in -out, or at
// its end.
func (b *bench) section(text string) error {
	fmt.Println(text)
	if b.out == "" {
		return nil
	}
	return replaceSection(b.outPath(), b.sc.section[0], b.sc.section[1], text)
}

// outPath is -out, relative to the repository root unless absolute.
func (b *bench) outPath() string {
	if filepath.IsAbs(b.out) {
		return b.out
	}
	return filepath.Join(b.root, b.out)
}

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

// repoRoot finds the kinformer repository root above the working directory.
func repoRoot() (string, error) {
	dir, err := os.Getwd()
	if err != nil {
		return "", err
	}
	for d := dir; ; d = filepath.Dir(d) {
		if _, err := os.Stat(filepath.Join(d, "tools", "localapi", "go.mod")); err == nil {
			return d, nil
		}
		if filepath.Dir(d) == d {
			return "", fmt.Errorf("no kinformer repository (tools/localapi/go.mod) above %s", dir)
		}
	}
}
