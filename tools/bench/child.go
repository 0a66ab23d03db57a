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

func rotate(xs []string, n int) []string {
	n %= len(xs)
	return append(append([]string(nil), xs[n:]...), xs[:n]...)
}

type burstStat struct {
	Contender string
	Writes    int
	Seconds   float64
}

// driveContender runs cmd, a contender process that prints "synced" once
// synced, then reads the update writes' response times (a JSON array) on
// its stdin and prints its result (JSON). After the sync it runs the update
// burst (if updates > 0) and sends the writes.
func driveContender[R any](ctx context.Context, cs kubernetes.Interface, cmd *exec.Cmd, kind, burstID string, updates, nObjects, writers int) (R, *burstStat, error) {
	return driveContenderWith[R](cmd, kind, updates, func() ([]write, time.Duration, error) {
		return updateBurst(ctx, cs, burstID, updates, nObjects, writers)
	})
}

// driveContenderWith is driveContender with the update burst given as a
// function (the crd benchmark patches custom resources).
func driveContenderWith[R any](cmd *exec.Cmd, kind string, updates int, burst func() ([]write, time.Duration, error)) (R, *burstStat, error) {
	var res R
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
	if updates > 0 {
		var d time.Duration
		writes, d, err = burst()
		if err != nil {
			cmd.Process.Kill()
			return res, nil, err
		}
		b = &burstStat{Contender: kind, Writes: updates, Seconds: d.Seconds()}
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

// readWrites reads the parent's update writes (a JSON array) from stdin.
func readWrites() ([]write, error) {
	var writes []write
	if err := json.NewDecoder(bufio.NewReader(os.Stdin)).Decode(&writes); err != nil && !errors.Is(err, os.ErrClosed) && !errors.Is(err, io.EOF) {
		return nil, fmt.Errorf("reading writes: %w", err)
	}
	return writes, nil
}
