// Command localapi runs a real kube-apiserver backed by an embedded etcd on
// loopback, for tests, benchmarks and demos of the kinformer library.
//
// It prints exactly one JSON line to stdout once the server is ready:
//
//	{"ready":true,"kubeconfig":"...","server":"https://127.0.0.1:PORT","admin":"http://127.0.0.1:PORT2","pid":N}
//
// Everything else goes to stderr. Run it with -h for the flags.
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"net"
	"net/http"
	"os"
	"os/signal"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	clientv3 "go.etcd.io/etcd/client/v3"
	"go.uber.org/zap/zapcore"
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

const (
	serviceCIDR = "10.0.0.0/24"
	serviceIP   = "10.0.0.1"
)

type readyLine struct {
	Ready      bool   `json:"ready"`
	Kubeconfig string `json:"kubeconfig"`
	Server     string `json:"server"`
	Admin      string `json:"admin"`
	PID        int    `json:"pid"`
}

func main() {
	os.Exit(run())
}

func run() int {
	// Only the ready line may reach stdout; anything a library prints goes
	// to stderr instead. kube-apiserver's info messages go to os.Stdout as
	// it is when its logging is set up (see --log-text-split-stream below),
	// so they are discarded unless --verbose.
	stdout := os.Stdout
	os.Stdout = os.Stderr

	fs := flag.NewFlagSet("localapi", flag.ContinueOnError)
	dataDir := fs.String("data-dir", "", "directory for etcd data, certificates, kubeconfig and state (required; reuse it to restart with all objects intact)")
	port := fs.Int("port", 0, "apiserver secure port on 127.0.0.1; 0 reuses the previous port of this data dir if free, else picks a free one")
	adminPort := fs.Int("admin-port", 0, "port of the loopback admin HTTP endpoint; 0 behaves like --port")
	watchCache := fs.Bool("watch-cache", true, "enable the apiserver watch cache")
	kubeconfigOut := fs.String("kubeconfig-out", "", "where to write the kubeconfig (default <data-dir>/kubeconfig)")
	verbose := fs.Bool("verbose", false, "log apiserver (-v=2) and etcd info messages to stderr")
	fsync := fs.Bool("fsync", false, "fsync etcd writes (not needed to survive SIGKILL, only a machine crash)")
	readyTimeout := fs.Duration("ready-timeout", 2*time.Minute, "give up if the server is not ready within this time")
	fs.Usage = func() {
		fmt.Fprintf(os.Stderr, "usage: localapi --data-dir DIR [flags] [-- extra kube-apiserver flags]\n")
		fs.PrintDefaults()
	}
	if err := fs.Parse(os.Args[1:]); err != nil {
		return 2
	}
	extraArgs := fs.Args()
	if *dataDir == "" {
		fmt.Fprintln(os.Stderr, "localapi: --data-dir is required")
		fs.Usage()
		return 2
	}
	logf := func(format string, args ...any) {
		fmt.Fprintf(os.Stderr, "localapi: "+format+"\n", args...)
	}
	vlogf := func(format string, args ...any) {
		if *verbose {
			logf(format, args...)
		}
	}
	fail := func(err error) int {
		logf("error: %v", err)
		return 1
	}

	if !*verbose {
		if devNull, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0); err == nil {
			os.Stdout = devNull
		}
	}

	dir, err := filepath.Abs(*dataDir)
	if err != nil {
		return fail(err)
	}
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return fail(err)
	}
	kubeconfig := *kubeconfigOut
	if kubeconfig == "" {
		kubeconfig = filepath.Join(dir, "kubeconfig")
	}
	if kubeconfig, err = filepath.Abs(kubeconfig); err != nil {
		return fail(err)
	}
	// A stale ready file from a previous run must not be mistaken for this one.
	_ = os.Remove(filepath.Join(dir, "ready.json"))

	keys := pki{dir: filepath.Join(dir, "pki")}
	if err := keys.ensure(); err != nil {
		return fail(fmt.Errorf("generating certificates: %w", err))
	}

	prev, err := loadState(dir)
	if err != nil {
		return fail(err)
	}
	var st state
	if st.Port, err = choosePort(*port, prev.Port); err != nil {
		return fail(err)
	}
	if st.EtcdClientPort, err = choosePort(0, prev.EtcdClientPort, st.Port); err != nil {
		return fail(err)
	}
	if st.EtcdPeerPort, err = choosePort(0, prev.EtcdPeerPort, st.Port, st.EtcdClientPort); err != nil {
		return fail(err)
	}
	wantAdmin := *adminPort
	if wantAdmin == 0 && prev.AdminPort != 0 {
		wantAdmin = prev.AdminPort
	}
	adminLn, err := listenAdmin(wantAdmin, *adminPort != 0, st.Port, st.EtcdClientPort, st.EtcdPeerPort)
	if err != nil {
		return fail(err)
	}
	st.AdminPort = adminLn.Addr().(*net.TCPAddr).Port
	if err := saveState(dir, st); err != nil {
		return fail(err)
	}

	// Build the command first: it installs the SIGTERM/SIGINT handler that
	// shuts the apiserver down gracefully.
	cmd := app.NewAPIServerCommand()
	cmd.SetOut(os.Stderr)
	cmd.SetErr(os.Stderr)
	sigs := make(chan os.Signal, 2)
	signal.Notify(sigs, syscall.SIGTERM, syscall.SIGINT)

	start := time.Now()
	etcdLevel := etcdLogLevel(*verbose)
	etcd, err := startEtcd(dir, st.EtcdClientPort, st.EtcdPeerPort, *fsync, etcdLevel)
	if err != nil {
		return fail(err)
	}
	var closeEtcd sync.Once
	stopEtcd := func() {
		closeEtcd.Do(func() {
			etcdLevel.SetLevel(zapcore.FatalLevel)
			etcd.Close()
		})
	}
	defer stopEtcd()
	etcdURL := fmt.Sprintf("http://127.0.0.1:%d", st.EtcdClientPort)
	vlogf("etcd ready at %s after %v", etcdURL, time.Since(start).Round(time.Millisecond))

	cli, err := etcdClient(etcdURL)
	if err != nil {
		return fail(err)
	}
	defer cli.Close()
	adminSrv := &http.Server{Handler: adminHandler(cli), ReadHeaderTimeout: 10 * time.Second}
	go func() { _ = adminSrv.Serve(adminLn) }()
	defer adminSrv.Close()

	server := fmt.Sprintf("https://127.0.0.1:%d", st.Port)
	args := []string{
		"--etcd-servers=" + etcdURL,
		"--bind-address=127.0.0.1",
		"--advertise-address=127.0.0.1",
		"--secure-port=" + strconv.Itoa(st.Port),
		"--cert-dir=" + filepath.Join(dir, "pki", "generated"),
		"--tls-cert-file=" + keys.ServingCert(),
		"--tls-private-key-file=" + keys.ServingKey(),
		"--client-ca-file=" + keys.CACert(),
		"--service-account-key-file=" + keys.SAPub(),
		"--service-account-signing-key-file=" + keys.SAKey(),
		"--service-account-issuer=https://kubernetes.default.svc.cluster.local",
		"--service-cluster-ip-range=" + serviceCIDR,
		"--authorization-mode=RBAC",
		// No controller-manager runs: the ServiceAccount admission plugin
		// would reject every pod because no "default" ServiceAccount is
		// ever created.
		"--disable-admission-plugins=ServiceAccount",
		// No periodic writes to the "kubernetes" Endpoints/EndpointSlice.
		"--endpoint-reconciler-type=none",
		"--allow-privileged=true",
		"--profiling=false",
		"--watch-cache=" + strconv.FormatBool(*watchCache),
		"--v=" + map[bool]string{false: "0", true: "2"}[*verbose],
		// Info lines to os.Stdout (discarded unless --verbose), warnings
		// and errors to os.Stderr.
		"--feature-gates=LoggingAlphaOptions=true",
		"--log-text-split-stream=true",
	}
	args = append(args, extraArgs...)
	cmd.SetArgs(args)
	vlogf("kube-apiserver %s", strings.Join(args, " "))

	apiDone := make(chan error, 1)
	go func() { apiDone <- cmd.Execute() }()

	adminCfg, restrictedCfg := restConfigs(server, keys)
	readyCtx, cancelReady := context.WithTimeout(context.Background(), *readyTimeout)
	defer cancelReady()
	readyErr := make(chan error, 1)
	go func() { readyErr <- waitReady(readyCtx, adminCfg, restrictedCfg, vlogf) }()

	shutdown := func(reason string) int {
		logf("shutting down (%s)", reason)
		cancelReady()
		// The apiserver got the same signal; give it time to drain.
		select {
		case err := <-apiDone:
			if err != nil {
				logf("kube-apiserver: %v", err)
			}
		case <-time.After(30 * time.Second):
			logf("kube-apiserver did not stop within 30s")
		case <-sigs:
			logf("second signal, exiting")
			return 1
		}
		_ = adminSrv.Close()
		cli.Close()
		stopEtcd()
		return 0
	}

	select {
	case err := <-readyErr:
		if err != nil {
			return fail(fmt.Errorf("apiserver not ready after %v: %w", time.Since(start).Round(time.Millisecond), err))
		}
	case err := <-apiDone:
		cancelReady()
		if err == nil {
			err = errors.New("exited before becoming ready")
		}
		return fail(fmt.Errorf("kube-apiserver: %w", err))
	case err := <-etcd.Err():
		return fail(fmt.Errorf("etcd: %w", err))
	case s := <-sigs:
		return shutdown(s.String())
	}
	cancelReady()

	if err := writeKubeconfig(kubeconfig, server, keys); err != nil {
		return fail(fmt.Errorf("writing kubeconfig: %w", err))
	}
	line, _ := json.Marshal(readyLine{
		Ready:      true,
		Kubeconfig: kubeconfig,
		Server:     server,
		Admin:      fmt.Sprintf("http://127.0.0.1:%d", st.AdminPort),
		PID:        os.Getpid(),
	})
	line = append(line, '\n')
	_ = writeFileAtomic(filepath.Join(dir, "ready.json"), line, 0o644)
	vlogf("ready after %v", time.Since(start).Round(time.Millisecond))
	if _, err := stdout.Write(line); err != nil {
		return fail(err)
	}

	select {
	case s := <-sigs:
		return shutdown(s.String())
	case err := <-apiDone:
		if err == nil {
			err = errors.New("exited unexpectedly")
		}
		return fail(fmt.Errorf("kube-apiserver: %w", err))
	case err := <-etcd.Err():
		return fail(fmt.Errorf("etcd: %w", err))
	}
}

// listenAdmin binds the admin endpoint on loopback: on want if non-zero
// (failing if strict and it is taken, else falling back to a free port).
func listenAdmin(want int, strict bool, exclude ...int) (net.Listener, error) {
	if want != 0 && !contains(exclude, want) {
		l, err := net.Listen("tcp", net.JoinHostPort("127.0.0.1", strconv.Itoa(want)))
		if err == nil || strict {
			return l, err
		}
	}
	for range 100 {
		l, err := net.Listen("tcp", "127.0.0.1:0")
		if err != nil {
			return nil, err
		}
		if !contains(exclude, l.Addr().(*net.TCPAddr).Port) {
			return l, nil
		}
		l.Close()
	}
	return nil, errors.New("no free port for the admin endpoint")
}

// adminHandler serves the loopback-only admin API:
//
//	POST /compact   compact etcd to its current revision, wait until it is
//	                applied; responds {"revision":N}
//	GET  /revision  {"revision":N}, the current etcd revision
//	GET  /healthz   ok
func adminHandler(cli *clientv3.Client) http.Handler {
	mux := http.NewServeMux()
	writeJSON := func(w http.ResponseWriter, code int, v any) {
		w.Header().Set("Content-Type", "application/json")
		w.WriteHeader(code)
		_ = json.NewEncoder(w).Encode(v)
	}
	mux.HandleFunc("POST /compact", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 30*time.Second)
		defer cancel()
		rev, err := compactToCurrent(ctx, cli)
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"revision": rev})
	})
	mux.HandleFunc("GET /revision", func(w http.ResponseWriter, r *http.Request) {
		ctx, cancel := context.WithTimeout(r.Context(), 10*time.Second)
		defer cancel()
		resp, err := cli.Get(ctx, "/kinformer-localapi/compact-probe", clientv3.WithCountOnly())
		if err != nil {
			writeJSON(w, http.StatusInternalServerError, map[string]string{"error": err.Error()})
			return
		}
		writeJSON(w, http.StatusOK, map[string]int64{"revision": resp.Header.Revision})
	})
	mux.HandleFunc("GET /healthz", func(w http.ResponseWriter, r *http.Request) {
		_, _ = w.Write([]byte("ok\n"))
	})
	return mux
}
