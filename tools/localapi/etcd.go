package main

import (
	"context"
	"fmt"
	"net/url"
	"path/filepath"
	"time"

	"go.etcd.io/etcd/client/pkg/v3/logutil"
	clientv3 "go.etcd.io/etcd/client/v3"
	"go.etcd.io/etcd/server/v3/embed"
	"go.uber.org/zap"
	"go.uber.org/zap/zapcore"
)

// startEtcd starts a single-member embedded etcd on loopback, with its data in
// <data-dir>/etcd. On a restart the existing WAL and snapshot are recovered
// (including after the previous process was SIGKILLed).
//
// logLevel controls etcd's logger; raising it to fatal before Close silences
// the "server closed" errors etcd logs while shutting down.
func startEtcd(dataDir string, clientPort, peerPort int, fsync bool, logLevel zap.AtomicLevel) (*embed.Etcd, error) {
	cfg := embed.NewConfig()
	cfg.Name = "localapi"
	cfg.Dir = filepath.Join(dataDir, "etcd")
	clientURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", clientPort)}
	peerURL := url.URL{Scheme: "http", Host: fmt.Sprintf("127.0.0.1:%d", peerPort)}
	cfg.ListenClientUrls = []url.URL{clientURL}
	cfg.AdvertiseClientUrls = []url.URL{clientURL}
	cfg.ListenPeerUrls = []url.URL{peerURL}
	cfg.AdvertisePeerUrls = []url.URL{peerURL}
	cfg.InitialCluster = cfg.InitialClusterFromName(cfg.Name)
	// Matches what kube-up/kubeadm clusters use, and lets the apiserver's
	// watch cache get progress notifications.
	cfg.WatchProgressNotifyInterval = 5 * time.Second
	// Losing un-synced writes only matters on a machine crash; the page cache
	// survives SIGKILL of this process, so WAL recovery still sees everything.
	cfg.UnsafeNoFsync = !fsync
	zcfg := logutil.DefaultZapLoggerConfig
	zcfg.OutputPaths = []string{"stderr"}
	zcfg.ErrorOutputPaths = []string{"stderr"}
	zcfg.Level = logLevel
	lg, err := zcfg.Build()
	if err != nil {
		return nil, err
	}
	cfg.ZapLoggerBuilder = embed.NewZapLoggerBuilder(lg)
	cfg.LogOutputs = []string{"stderr"}
	e, err := embed.StartEtcd(cfg)
	if err != nil {
		return nil, fmt.Errorf("starting etcd: %w", err)
	}
	select {
	case <-e.Server.ReadyNotify():
		return e, nil
	case err := <-e.Err():
		e.Close()
		return nil, fmt.Errorf("etcd failed: %w", err)
	case <-time.After(90 * time.Second):
		e.Server.Stop()
		e.Close()
		return nil, fmt.Errorf("etcd did not become ready within 90s")
	}
}

func etcdClient(endpoint string) (*clientv3.Client, error) {
	return clientv3.New(clientv3.Config{
		Endpoints:   []string{endpoint},
		DialTimeout: 10 * time.Second,
		Logger:      zap.NewNop(),
	})
}

// etcdLogLevel returns the level for etcd's logger: errors only, or info
// with --verbose.
func etcdLogLevel(verbose bool) zap.AtomicLevel {
	if verbose {
		return zap.NewAtomicLevelAt(zapcore.InfoLevel)
	}
	return zap.NewAtomicLevelAt(zapcore.ErrorLevel)
}

// compactToCurrent compacts etcd to its current revision and waits until the
// compaction has been physically applied. It returns that revision. After
// this, any etcd watch or range from an older revision fails with
// "required revision has been compacted".
func compactToCurrent(ctx context.Context, cli *clientv3.Client) (int64, error) {
	// Any read returns the store's current revision in its header.
	resp, err := cli.Get(ctx, "/kinformer-localapi/compact-probe", clientv3.WithCountOnly())
	if err != nil {
		return 0, fmt.Errorf("reading current revision: %w", err)
	}
	rev := resp.Header.Revision
	if _, err := cli.Compact(ctx, rev, clientv3.WithCompactPhysical()); err != nil {
		return 0, fmt.Errorf("compacting to revision %d: %w", rev, err)
	}
	return rev, nil
}
