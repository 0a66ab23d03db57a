// Package testenv runs a real kube-apiserver (with embedded etcd) for tests.
//
// The server is the tools/localapi binary, built from its own Go module by
// Build and started as a child process by Start or New. Each server has a
// fresh temporary data dir, a free loopback port, RBAC on, and two users:
// an admin (Config) and a restricted user (RestrictedConfig) that may only
// get/list/watch configmaps and pods in namespace "allowed".
//
// Typical use, one server per test package:
//
//	func TestMain(m *testing.M) { testenv.Main(m) }
//
//	func TestX(t *testing.T) {
//		srv := testenv.Shared(t)
//		ns := testenv.NewNamespace(t, srv.Config())
//		...
//	}
//
// Tests that kill, restart or compact the server should use their own:
// srv := testenv.New(t, testenv.WithWatchCache(false)).
//
// Set KINFORMER_SKIP_APISERVER=1 to skip such tests instead of building and
// running the server.
package testenv

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

// EnvSkip names the environment variable that, set to "1" (or "true"), makes
// the helpers skip tests instead of building and running the server.
const EnvSkip = "KINFORMER_SKIP_APISERVER"

// ErrSkipped is returned by Start when EnvSkip is set.
var ErrSkipped = errors.New("testenv: " + EnvSkip + " is set")

// AllowedNamespace is the only namespace where the restricted user may
// get/list/watch configmaps and pods.
const AllowedNamespace = "allowed"

// RestrictedUser is the user name of RestrictedConfig.
const RestrictedUser = "restricted-user"

// DefaultStartTimeout bounds how long Start and Restart wait for the ready
// line (not counting the build).
const DefaultStartTimeout = 2 * time.Minute

// Skipping reports whether EnvSkip asks to skip tests that need the server.
func Skipping() bool {
	v := strings.ToLower(strings.TrimSpace(os.Getenv(EnvSkip)))
	return v == "1" || v == "true" || v == "yes"
}

// Option configures Start and New.
type Option func(*options)

type options struct {
	watchCache   bool
	verbose      bool
	startTimeout time.Duration
	extraArgs    []string
	pkiOf        *Server
}

func defaultOptions() options {
	return options{watchCache: true, startTimeout: DefaultStartTimeout}
}

// WithWatchCache turns the apiserver watch cache on (the default, like a
// production cluster) or off (every watch and list is served from etcd, so a
// watch from a compacted resourceVersion reliably gets 410 Gone).
func WithWatchCache(enabled bool) Option { return func(o *options) { o.watchCache = enabled } }

// WithVerbose makes the server log apiserver and etcd info messages.
func WithVerbose() Option { return func(o *options) { o.verbose = true } }

// WithStartTimeout overrides DefaultStartTimeout.
func WithStartTimeout(d time.Duration) Option { return func(o *options) { o.startTimeout = d } }

// WithAPIServerArgs passes extra flags to kube-apiserver, e.g.
// "--feature-gates=...". They are appended after localapi's own.
func WithAPIServerArgs(args ...string) Option {
	return func(o *options) { o.extraArgs = append(o.extraArgs, args...) }
}

// WithPKIOf makes the server use the certificates and keys of another:
// the same certificate authority, serving certificate and client
// credentials (Config and RestrictedConfig reach either), as two clusters
// under one root. Its own etcd, and so its own history and objects.
func WithPKIOf(s *Server) Option { return func(o *options) { o.pkiOf = s } }

// Server is a running (or killed) local API server.
type Server struct {
	bin  string
	opts options
	root string // temp dir owned by this Server: data/, localapi.log, owner.pid
	data string

	mu         sync.Mutex
	proc       *process
	port       int
	adminPort  int
	host       string
	adminURL   string
	kubeconfig string
	admin      *rest.Config
	restricted *rest.Config
	stopped    bool
}

type process struct {
	cmd  *exec.Cmd
	done chan struct{} // closed when the process has exited
	err  error         // exit status, valid after done
}

type readyLine struct {
	Ready      bool   `json:"ready"`
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Admin      string `json:"admin"`
	PID        int    `json:"pid"`
}

const tempPrefix = "kinformer-localapi-"

// Start builds (if needed) and starts a server with a fresh data dir and a
// free port, and waits until it is ready. The caller must call Stop. It
// returns ErrSkipped if EnvSkip is set.
func Start(ctx context.Context, opts ...Option) (*Server, error) {
	if Skipping() {
		return nil, ErrSkipped
	}
	o := defaultOptions()
	for _, opt := range opts {
		opt(&o)
	}
	bin, err := Build(ctx)
	if err != nil {
		return nil, err
	}
	sweepStale()
	root, err := os.MkdirTemp("", tempPrefix)
	if err != nil {
		return nil, fmt.Errorf("testenv: %w", err)
	}
	if err := os.WriteFile(filepath.Join(root, "owner.pid"), []byte(strconv.Itoa(os.Getpid())), 0o644); err != nil {
		os.RemoveAll(root)
		return nil, fmt.Errorf("testenv: %w", err)
	}
	s := &Server{bin: bin, opts: o, root: root, data: filepath.Join(root, "data")}
	if o.pkiOf != nil {
		if err := copyPKI(filepath.Join(o.pkiOf.data, "pki"), filepath.Join(s.data, "pki")); err != nil {
			os.RemoveAll(root)
			return nil, err
		}
	}
	if err := s.start(ctx); err != nil {
		os.RemoveAll(root)
		return nil, err
	}
	return s, nil
}

// New is Start for tests: it skips the test if EnvSkip is set, fails it if
// the server does not start, and stops the server in t.Cleanup (logging the
// server's log tail if the test failed).
func New(t testing.TB, opts ...Option) *Server {
	t.Helper()
	if Skipping() {
		t.Skip("testenv: " + EnvSkip + " is set; skipping test that needs a real API server")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Minute)
	defer cancel()
	s, err := Start(ctx, opts...)
	if err != nil {
		t.Fatalf("starting local API server: %v", err)
	}
	t.Cleanup(func() {
		if t.Failed() {
			t.Logf("local API server log (tail):\n%s", s.LogTail(60))
		}
		if err := s.Stop(); err != nil {
			t.Logf("stopping local API server: %v", err)
		}
	})
	return s
}

// copyPKI copies the files of a server's pki directory (not what the API
// server generates under it) into a new one.
func copyPKI(from, to string) error {
	entries, err := os.ReadDir(from)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	if err := os.MkdirAll(to, 0o700); err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	for _, e := range entries {
		if !e.Type().IsRegular() {
			continue
		}
		data, err := os.ReadFile(filepath.Join(from, e.Name()))
		if err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
		if err := os.WriteFile(filepath.Join(to, e.Name()), data, 0o600); err != nil {
			return fmt.Errorf("testenv: %w", err)
		}
	}
	return nil
}

func (s *Server) start(ctx context.Context) error {
	args := []string{
		"--data-dir", s.data,
		"--port", strconv.Itoa(s.port),
		"--admin-port", strconv.Itoa(s.adminPort),
		"--watch-cache=" + strconv.FormatBool(s.opts.watchCache),
		"--ready-timeout", s.opts.startTimeout.String(),
	}
	if s.opts.verbose {
		args = append(args, "--verbose")
	}
	if len(s.opts.extraArgs) > 0 {
		args = append(args, "--")
		args = append(args, s.opts.extraArgs...)
	}
	logFile, err := os.OpenFile(s.LogPath(), os.O_CREATE|os.O_WRONLY|os.O_APPEND, 0o644)
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	defer logFile.Close() // the child has its own copy
	fmt.Fprintf(logFile, "==== testenv: starting %s %s at %s\n", s.bin, strings.Join(args, " "), time.Now().Format(time.RFC3339Nano))

	outR, outW, err := os.Pipe()
	if err != nil {
		return fmt.Errorf("testenv: %w", err)
	}
	cmd := exec.Command(s.bin, args...)
	cmd.Stdout = outW
	cmd.Stderr = logFile
	cmd.SysProcAttr = sysProcAttr()
	if err := startProcess(cmd); err != nil {
		outR.Close()
		outW.Close()
		return fmt.Errorf("testenv: starting %s: %w", s.bin, err)
	}
	outW.Close()
	p := &process{cmd: cmd, done: make(chan struct{})}
	go func() {
		p.err = cmd.Wait()
		close(p.done)
	}()

	lines := make(chan readyLine, 1)
	go func() {
		defer outR.Close()
		sc := bufio.NewScanner(outR)
		sent := false
		for sc.Scan() {
			var rl readyLine
			if !sent && json.Unmarshal(sc.Bytes(), &rl) == nil && rl.Ready {
				lines <- rl
				sent = true
			}
		}
	}()

	timer := time.NewTimer(s.opts.startTimeout + 10*time.Second)
	defer timer.Stop()
	var rl readyLine
	select {
	case rl = <-lines:
	case <-p.done:
		return fmt.Errorf("testenv: local API server exited before becoming ready (%v); log tail:\n%s", p.err, s.LogTail(40))
	case <-timer.C:
		p.kill()
		return fmt.Errorf("testenv: local API server not ready after %v; log tail:\n%s", s.opts.startTimeout, s.LogTail(40))
	case <-ctx.Done():
		p.kill()
		return ctx.Err()
	}

	admin, restricted, err := loadConfigs(rl.Kubeconfig)
	if err != nil {
		p.kill()
		return err
	}
	port, adminPort, err := ports(rl)
	if err != nil {
		p.kill()
		return err
	}
	s.mu.Lock()
	s.proc = p
	s.port, s.adminPort = port, adminPort
	s.host, s.adminURL, s.kubeconfig = rl.Server, rl.Admin, rl.Kubeconfig
	s.admin, s.restricted = admin, restricted
	s.stopped = false
	s.mu.Unlock()
	return nil
}

func ports(rl readyLine) (int, int, error) {
	port := func(u string) (int, error) {
		i := strings.LastIndex(u, ":")
		if i < 0 {
			return 0, fmt.Errorf("testenv: no port in %q", u)
		}
		return strconv.Atoi(strings.TrimSuffix(u[i+1:], "/"))
	}
	p, err := port(rl.Server)
	if err != nil {
		return 0, 0, err
	}
	a, err := port(rl.Admin)
	return p, a, err
}

func loadConfigs(kubeconfig string) (admin, restricted *rest.Config, err error) {
	raw, err := clientcmd.LoadFromFile(kubeconfig)
	if err != nil {
		return nil, nil, fmt.Errorf("testenv: reading kubeconfig: %w", err)
	}
	get := func(context string) (*rest.Config, error) {
		cfg, err := clientcmd.NewNonInteractiveClientConfig(*raw, context, &clientcmd.ConfigOverrides{}, nil).ClientConfig()
		if err != nil {
			return nil, fmt.Errorf("testenv: kubeconfig context %q: %w", context, err)
		}
		cfg.QPS, cfg.Burst = 100, 200
		return cfg, nil
	}
	if admin, err = get("admin"); err != nil {
		return nil, nil, err
	}
	if restricted, err = get("restricted"); err != nil {
		return nil, nil, err
	}
	return admin, restricted, nil
}

// kill SIGKILLs the process group and waits for the process to exit.
func (p *process) kill() {
	_ = killGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	<-p.done
}

// PID returns the server's process id, or 0 if it is not running.
func (s *Server) PID() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.proc == nil || s.proc.exited() {
		return 0
	}
	return s.proc.cmd.Process.Pid
}

func (p *process) exited() bool {
	select {
	case <-p.done:
		return true
	default:
		return false
	}
}

// Kill SIGKILLs the server (and its process group) and waits for it to
// exit, like a crash. The data dir is kept; Restart brings it back.
func (s *Server) Kill() {
	s.mu.Lock()
	p := s.proc
	s.mu.Unlock()
	if p != nil {
		p.kill()
	}
}

// Restart starts the server again on the same data dir and port and waits
// until it is ready. All objects (and the etcd revision history, unless
// compacted) survive. If the server is still running it is first stopped
// gracefully (SIGTERM).
func (s *Server) Restart() error {
	s.mu.Lock()
	p, stopped := s.proc, s.stopped
	s.mu.Unlock()
	if stopped {
		return errors.New("testenv: Restart after Stop")
	}
	if p != nil && !p.exited() {
		p.terminate()
	}
	ctx, cancel := context.WithTimeout(context.Background(), s.opts.startTimeout+30*time.Second)
	defer cancel()
	return s.start(ctx)
}

// terminate sends SIGTERM and waits up to 30s for a clean exit, then
// SIGKILLs the process group.
func (p *process) terminate() {
	_ = signalProcess(p.cmd.Process.Pid, syscall.SIGTERM)
	select {
	case <-p.done:
		// Reap anything left in the group (there should be nothing).
		_ = killGroup(p.cmd.Process.Pid, syscall.SIGKILL)
	case <-time.After(30 * time.Second):
		p.kill()
	}
}

// Stop shuts the server down (SIGTERM, then SIGKILL after 30s) and removes
// its data dir. It is idempotent.
func (s *Server) Stop() error {
	s.mu.Lock()
	p, stopped := s.proc, s.stopped
	s.stopped = true
	s.mu.Unlock()
	if stopped {
		return nil
	}
	if p != nil {
		p.terminate()
	}
	return os.RemoveAll(s.root)
}

// sweepStale removes temp dirs left behind by test processes that died
// without running their cleanup (their servers died with them through the
// parent-death signal).
func sweepStale() {
	dirs, _ := filepath.Glob(filepath.Join(os.TempDir(), tempPrefix+"*"))
	for _, dir := range dirs {
		fi, err := os.Stat(dir)
		if err != nil || !fi.IsDir() || time.Since(fi.ModTime()) < time.Minute {
			continue
		}
		data, err := os.ReadFile(filepath.Join(dir, "owner.pid"))
		if err != nil {
			continue
		}
		pid, err := strconv.Atoi(strings.TrimSpace(string(data)))
		if err != nil || pid <= 0 || processAlive(pid) {
			continue
		}
		if rl, err := os.ReadFile(filepath.Join(dir, "data", "ready.json")); err == nil {
			var r readyLine
			if json.Unmarshal(rl, &r) == nil && r.PID > 0 && processAlive(r.PID) {
				continue
			}
		}
		_ = os.RemoveAll(dir)
	}
}
