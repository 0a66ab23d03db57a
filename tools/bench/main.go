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
//
// It is its own Go module so that `go test ./...` at the repository root
// never builds it.
package main

import (
	"fmt"
	"os"
	"path/filepath"
	"time"
)

func logf(format string, args ...any) {
	fmt.Fprintf(os.Stderr, time.Now().Format("15:04:05 ")+format+"\n", args...)
}

func main() {
	if len(os.Args) > 1 {
		switch os.Args[1] {
		case "contender":
			if err := contenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "contender:", err)
				os.Exit(1)
			}
			return
		case "factory":
			if err := factoryMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "factory:", err)
				os.Exit(1)
			}
			return
		case "factory-contender":
			if err := factoryContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "factory-contender:", err)
				os.Exit(1)
			}
			return
		case "restart":
			if err := restartMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "restart:", err)
				os.Exit(1)
			}
			return
		case "restart-contender":
			if err := restartContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "restart-contender:", err)
				os.Exit(1)
			}
			return
		case "crd":
			if err := crdMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "crd:", err)
				os.Exit(1)
			}
			return
		case "crd-contender":
			if err := crdContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "crd-contender:", err)
				os.Exit(1)
			}
			return
		case "shard":
			if err := shardMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "shard:", err)
				os.Exit(1)
			}
			return
		case "shard-replica":
			if err := shardReplicaMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "shard-replica:", err)
				os.Exit(1)
			}
			return
		case "cr":
			if err := crMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "cr:", err)
				os.Exit(1)
			}
			return
		case "cr-contender":
			if err := crContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "cr-contender:", err)
				os.Exit(1)
			}
			return
		case "compact":
			if err := compactMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "compact:", err)
				os.Exit(1)
			}
			return
		case "compact-contender":
			if err := compactContenderMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "compact-contender:", err)
				os.Exit(1)
			}
			return
		case "micro":
			if err := microMain(os.Args[2:]); err != nil {
				fmt.Fprintln(os.Stderr, "micro:", err)
				os.Exit(1)
			}
			return
		}
	}
	if err := benchMain(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "bench:", err)
		os.Exit(1)
	}
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
