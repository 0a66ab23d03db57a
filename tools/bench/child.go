package main

// Contenders run in child processes: this program re-executed with a
// subcommand, so that heap, RSS and CPU are their own.

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"time"

	"k8s.io/client-go/kubernetes"
)

// rotate is the contenders xs in the order of round n+1: each starts a
// round in turn.
func rotate(xs []string, n int) []string {
	n %= len(xs)
	return append(append([]string(nil), xs[n:]...), xs[:n]...)
}

// burstStat is one update burst the parent made.
type burstStat struct {
	Contender string
	Writes    int
	Seconds   float64
}

// burstFunc is an update burst the parent makes while a contender waits
// for it: the writes, and how long they took.
type burstFunc func() ([]write, time.Duration, error)

// configMapBurst is the update burst of updateBurst (updates ConfigMaps
// patched by writers concurrent writers, bench/round = burstID); nil when
// updates is 0.
func configMapBurst(ctx context.Context, cs kubernetes.Interface, burstID string, updates, nObjects, writers int) burstFunc {
	if updates <= 0 {
		return nil
	}
	return func() ([]write, time.Duration, error) {
		return updateBurst(ctx, cs, burstID, updates, nObjects, writers)
	}
}

// selfCommand is this program run as a child process with args (a
// subcommand first).
func selfCommand(ctx context.Context, args ...string) (*exec.Cmd, error) {
	self, err := os.Executable()
	if err != nil {
		return nil, err
	}
	return exec.CommandContext(ctx, self, args...), nil
}

// runChild runs a contender process, this program with args (a scenario's
// child subcommand first), and returns its result. The protocol, the
// child's side in childSynced and childResult: the child prints "synced"
// once synced; the parent then runs burst (nil: none) and sends its writes'
// response times, a JSON array (empty without a burst), on the child's
// stdin; the child prints its result, JSON, and exits.
func runChild[R any](ctx context.Context, kind string, burst burstFunc, args ...string) (R, *burstStat, error) {
	var res R
	cmd, err := selfCommand(ctx, args...)
	if err != nil {
		return res, nil, err
	}
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		return res, nil, err
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return res, nil, err
	}
	if err := cmd.Start(); err != nil {
		return res, nil, err
	}
	defer cmd.Wait()
	br := bufio.NewReader(stdout)
	line, err := br.ReadString('\n')
	if err != nil || strings.TrimSpace(line) != "synced" {
		cmd.Process.Kill()
		return res, nil, fmt.Errorf("contender did not sync (%q, %v)", line, err)
	}
	var b *burstStat
	writes := []write{}
	if burst != nil {
		var d time.Duration
		writes, d, err = burst()
		if err != nil {
			cmd.Process.Kill()
			return res, nil, err
		}
		b = &burstStat{Contender: kind, Writes: len(writes), Seconds: d.Seconds()}
	}
	if err := json.NewEncoder(stdin).Encode(writes); err != nil {
		return res, nil, err
	}
	stdin.Close()
	rest, err := io.ReadAll(br)
	if err != nil {
		return res, nil, err
	}
	if err := json.Unmarshal(rest, &res); err != nil {
		return res, nil, fmt.Errorf("contender result %q: %w", truncate(string(rest), 200), err)
	}
	return res, b, nil
}

func truncate(s string, n int) string {
	if len(s) > n {
		return s[:n] + "…"
	}
	return s
}

// childSynced is a contender's side of runChild's protocol once synced:
// it tells the parent, and returns the writes of the parent's update
// burst (none without one).
func childSynced() ([]write, error) {
	fmt.Println("synced")
	var writes []write
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&writes); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading writes: %w", err)
	}
	return writes, nil
}

// childResult is a contender's last word: its result, as one JSON line.
func childResult(v any) error {
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	fmt.Println(string(b))
	return nil
}
