package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"k8s.io/client-go/kubernetes"
)

// server is a running localapi process (a real kube-apiserver + etcd).
type server struct {
	cmd        *exec.Cmd
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Pid        int    `json:"pid"`
}

// localapiPath returns the localapi binary, building it with `make
// localapi` from the repository root when it is missing.
func localapiPath(flagPath, repoRoot string) (string, error) {
	p := flagPath
	if p == "" {
		out, err := exec.Command("go", "env", "GOCACHE").Output()
		if err != nil {
			return "", fmt.Errorf("go env GOCACHE: %w", err)
		}
		p = filepath.Join(strings.TrimSpace(string(out)), "..", "kinformer-localapi", "localapi")
	}
	if _, err := os.Stat(p); err == nil {
		return p, nil
	}
	logf("localapi binary %s missing: running `make localapi` in %s (a cold build takes 7-12 minutes)", p, repoRoot)
	cmd := exec.Command("make", "localapi")
	cmd.Dir = repoRoot
	cmd.Stdout, cmd.Stderr = os.Stderr, os.Stderr
	if err := cmd.Run(); err != nil {
		return "", fmt.Errorf("make localapi: %w", err)
	}
	if _, err := os.Stat(p); err != nil {
		return "", fmt.Errorf("after make localapi: %w", err)
	}
	return p, nil
}

// serving is the running server, which SIGINT or SIGTERM stop (one at a
// time: the crd and shard benchmarks run several, one after the other).
var (
	serving       atomic.Pointer[server]
	onInterrupted sync.Once
)

// startServer runs localapi on dataDir and waits for its ready line;
// extra are kube-apiserver flags (localapi takes them after "--"). Until
// it is stopped, an interrupt stops it and exits.
func startServer(bin, dataDir string, verbose bool, extra ...string) (*server, error) {
	onInterrupted.Do(func() {
		sigs := make(chan os.Signal, 1)
		signal.Notify(sigs, syscall.SIGINT, syscall.SIGTERM)
		go func() {
			<-sigs
			logf("interrupted")
			serving.Load().stop()
			os.Exit(2)
		}()
	})
	args := []string{"--data-dir", dataDir}
	if len(extra) > 0 {
		args = append(append(args, "--"), extra...)
	}
	cmd := exec.Command(bin, args...)
	cmd.SysProcAttr = &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL, Setpgid: true}
	logFile, err := os.Create(filepath.Join(dataDir, "localapi.log"))
	if err != nil {
		return nil, err
	}
	cmd.Stderr = logFile
	if verbose {
		cmd.Stderr = os.Stderr
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		return nil, err
	}
	if err := cmd.Start(); err != nil {
		return nil, err
	}
	lines := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			select {
			case lines <- sc.Text():
			default:
			}
		}
	}()
	select {
	case line := <-lines:
		s := &server{cmd: cmd}
		if err := json.Unmarshal([]byte(line), s); err != nil {
			cmd.Process.Kill()
			return nil, fmt.Errorf("localapi ready line %q: %w", line, err)
		}
		s.cmd = cmd
		serving.Store(s)
		return s, nil
	case <-time.After(3 * time.Minute):
		cmd.Process.Kill()
		return nil, fmt.Errorf("localapi not ready after 3 minutes; see %s", logFile.Name())
	}
}

// stop stops the server with SIGTERM (clean etcd shutdown), SIGKILL after 15 s.
func (s *server) stop() {
	if s == nil || s.cmd == nil || s.cmd.Process == nil {
		return
	}
	serving.CompareAndSwap(s, nil)
	s.cmd.Process.Signal(syscall.SIGTERM)
	done := make(chan struct{})
	go func() { s.cmd.Wait(); close(done) }()
	select {
	case <-done:
	case <-time.After(15 * time.Second):
		s.cmd.Process.Kill()
		<-done
	}
}

// serveWorkload starts localapi on the data dir (see prepare) and
// creates the workload (configMaps ConfigMaps and pods Pods) unless the
// data dir already holds it. The caller stops the server.
func (b *bench) serveWorkload(configMaps, pods int) (*server, *kubernetes.Clientset, error) {
	srv, cs, err := b.serve()
	if err != nil {
		return nil, nil, err
	}
	wstart := time.Now()
	if err := createWorkload(context.Background(), cs, configMaps, pods); err != nil {
		srv.stop()
		return nil, nil, fmt.Errorf("workload: %w", err)
	}
	logf("workload ready in %.0fs", time.Since(wstart).Seconds())
	return srv, cs, nil
}

// serve starts localapi on the data dir (see prepare), with a clientset
// for the parent's own requests. The caller stops the server.
func (b *bench) serve() (*server, *kubernetes.Clientset, error) {
	if err := b.prepare(); err != nil {
		return nil, nil, err
	}
	logf("starting localapi on %s", b.dataDir)
	srv, err := startServer(b.bin, b.dataDir, b.verbose)
	if err != nil {
		return nil, nil, err
	}
	logf("localapi ready: %s", srv.Server)
	cfg, err := restConfig(srv.Kubeconfig, 5000)
	if err != nil {
		srv.stop()
		return nil, nil, err
	}
	cs, err := kubernetes.NewForConfig(cfg)
	if err != nil {
		srv.stop()
		return nil, nil, err
	}
	return srv, cs, nil
}
