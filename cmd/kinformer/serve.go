package main

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"regexp"
	"strconv"
	"time"

	"github.com/spf13/pflag"
	"golang.org/x/sync/errgroup"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/client-go/dynamic"

	"github.com/kinformer/kinformer"
)

type serveFlags struct {
	cluster     clusterFlags
	listen      string
	acceptHosts string
	resync      time.Duration
	sseBuffer   int
	sseClients  int
	maxConns    int
	recent      int
	stateDir    string
	stateKeys   stateKeys
	tokenFile   string
	tls         tlsFlags
	openSecrets bool
	compact     bool
	nsSelector  string
	skipDenied  bool
	shard       shardFlags
	kubeAPI     bool
	kubeHistory int // MiB
	verbose     bool
	watchTime   time.Duration // hidden: for tests
}

func (f *serveFlags) flagSet() *pflag.FlagSet {
	fs := pflag.NewFlagSet("serve", pflag.ContinueOnError)
	fs.StringVar(&f.listen, "listen", "127.0.0.1:8080", "the address to serve on, HOST:PORT (port 0: any free port)")
	fs.DurationVar(&f.resync, "resync", 0, "re-list from the server this often, as a consistency check (0: never)")
	fs.StringVar(&f.acceptHosts, "accept-hosts", "", "a regular expression of other host names to answer (the Host header, without port), matched against the whole name; loopback names always are")
	fs.IntVar(&f.sseBuffer, "sse-buffer", 1024, fmt.Sprintf("events buffered for each /events client, at most %d (and 16 MiB); one that falls further behind is disconnected", maxSSEBuffer))
	fs.IntVar(&f.sseClients, "max-sse-clients", defaultSSEClients, "event-stream clients served at once, of /events and of /events/feed each (counted apart: /events clients cannot lock the page's feed out); more get 503")
	fs.IntVar(&f.maxConns, "max-connections", defaultMaxConnections, "connections open at once, event streams and idle keep-alive ones included; more wait until one closes")
	fs.IntVar(&f.recent, "recent-events", 500, fmt.Sprintf("events kept (summarised, without objects) for /events/recent and the page, at most %d", maxRecentEvents))
	bindStateDir(fs, &f.stateDir)
	bindStateKeyFile(fs, &f.stateKeys)
	fs.StringVar(&f.tokenFile, "token-file", "", "require the token in this file (its first line, 16 characters at least) on every request but /healthz: \"Authorization: Bearer TOKEN\", or open /?token=TOKEN once in a browser")
	f.tls.bind(fs)
	fs.BoolVar(&f.openSecrets, "serve-secrets-without-token", false, "serve Secrets without --token-file or --client-ca-file, to anyone who can reach --listen (on loopback: every process and user of this machine)")
	fs.BoolVar(&f.compact, "compact", false, "keep each cached object as bytes, decoded on every read: a fraction of the memory, a decode per object served")
	fs.StringVar(&f.nsSelector, "namespace-selector", "", "serve the namespaced RESOURCEs in the namespaces whose labels match this selector, following them as they change (e.g. tenant=acme)")
	bindSkipForbidden(fs, &f.skipDenied)
	f.shard.bind(fs)
	fs.BoolVar(&f.kubeAPI, "kube-api", false, "also serve the caches under the Kubernetes API's paths (/api, /apis): get, list and watch, so that client-go, kubectl and the other clients read them as they would the API server (read only)")
	fs.IntVar(&f.kubeHistory, "kube-api-history", defaultKubeHistoryBytes>>20, "MiB of recent events kept for each resource with --kube-api, for watches from a resourceVersion (an older one gets 410 Gone and its client lists again)")
	fs.BoolVarP(&f.verbose, "verbose", "v", false, "log the informers' retries and re-lists on stderr")
	fs.DurationVar(&f.watchTime, "watch-timeout", 0, "the shortest server-side timeout of a watch (0: the library's default)")
	_ = fs.MarkHidden("watch-timeout")
	f.cluster.bind(fs, true)
	return fs
}

func runServe(ctx context.Context, e *env, args []string) error {
	var f serveFlags
	fs := f.flagSet()
	if err := parseFlags(e, fs, args, "serve RESOURCE... [flags]", serveLong+shardLong); err != nil {
		return err
	}
	switch {
	case fs.NArg() == 0:
		return usageErrorf("serve: missing RESOURCE (for example: %s serve pods deployments.apps)", e.prog)
	case f.resync < 0:
		return usageErrorf("serve: --resync must not be negative")
	case f.sseBuffer < 1 || f.sseBuffer > maxSSEBuffer:
		return usageErrorf("serve: --sse-buffer must be between 1 and %d", maxSSEBuffer)
	case f.sseClients < 1:
		return usageErrorf("serve: --max-sse-clients must be at least 1")
	case f.maxConns < 1:
		return usageErrorf("serve: --max-connections must be at least 1")
	case f.recent < 1 || f.recent > maxRecentEvents:
		return usageErrorf("serve: --recent-events must be between 1 and %d", maxRecentEvents)
	case f.kubeHistory < 1 || f.kubeHistory > 4096:
		return usageErrorf("serve: --kube-api-history must be between 1 and 4096 (MiB)")
	case f.watchTime < 0:
		return usageErrorf("serve: --watch-timeout must not be negative")
	case f.cluster.allNamespaces && fs.Changed("namespace"):
		return usageErrorf("serve: --namespace and --all-namespaces are mutually exclusive")
	case f.nsSelector != "" && (f.cluster.allNamespaces || fs.Changed("namespace")):
		return usageErrorf("serve: --namespace-selector chooses the namespaces: not with --namespace or --all-namespaces")
	case f.nsSelector != "" && f.shard.group != "":
		return usageErrorf("serve: --namespace-selector does not go with --shard-group")
	}
	if f.nsSelector != "" {
		if _, err := labels.Parse(f.nsSelector); err != nil {
			return usageErrorf("serve: --namespace-selector %q: %v", f.nsSelector, err)
		}
	}
	if f.skipDenied && f.nsSelector == "" {
		return usageErrorf("serve: --skip-forbidden-namespaces goes with --namespace-selector")
	}
	if err := f.stateKeys.load(e.warn); err != nil {
		return err
	}
	var token *accessToken
	if f.tokenFile != "" {
		var err error
		if token, err = readTokenFile(f.tokenFile, e.warn); err != nil {
			return usageErrorf("serve: %v", err)
		}
	}
	if err := f.tls.check(); err != nil {
		return err
	}
	tlsFiles, err := loadTLS(f.tls, e.warn)
	if err != nil {
		return err
	}
	if f.tls.clientCAFile != "" && !f.tls.clientCertsGuard() {
		e.warn(fmt.Sprintf("--client-ca-file %s without --client-cert-names: every certificate its CAs signed may read what serve serves; if it is the cluster's CA, that is every node and component (kubelets among them): give --client-cert-names, or a CA of serve's clients only", f.tls.clientCAFile))
	}
	if err := f.shard.check(fs); err != nil {
		return err
	}
	if err := checkListen(f.listen); err != nil {
		return usageErrorf("serve: --listen %q: %v", f.listen, err)
	}
	var accept *regexp.Regexp
	if f.acceptHosts != "" {
		var err error
		if accept, err = compileAcceptHosts(f.acceptHosts); err != nil {
			return usageErrorf("serve: --accept-hosts: %v", err)
		}
		if hasLoneDot(f.acceptHosts) {
			e.warn(fmt.Sprintf(`--accept-hosts %s: "." matches any character (kinformer.internal matches kinformerXinternal too, a name anyone may register); write \. for a dot`, f.acceptHosts))
		}
	}

	warnStateDir(e, f.stateDir)
	cfg, ns, err := f.cluster.load(userAgent())
	if err != nil {
		return err
	}
	dyn, err := dynamic.NewForConfig(cfg)
	if err != nil {
		return err
	}
	logger := newNoteLogger(e.warn)
	if f.verbose {
		logger = slog.New(slog.NewTextHandler(e.stderr, &slog.HandlerOptions{Level: slog.LevelDebug}))
	}

	resolver, err := newResolver(ctx, cfg, e.warn)
	if err != nil {
		return stoppedOr(ctx, err)
	}
	s, err := newServer(f.sseBuffer, f.recent)
	if err != nil {
		return err
	}
	s.sseClients.max = int64(f.sseClients)
	s.feedClients.max = int64(f.sseClients)
	s.kubeWatches.max = int64(f.sseClients)
	if f.kubeAPI {
		s.kubeHistory = f.kubeHistory << 20
	}
	sh, shard, err := f.shard.newSharding(cfg, e.stderr, f.verbose, s.registry)
	if err != nil {
		return err
	}
	var sharder kinformer.Sharder // none without --shard-group
	if sh != nil {
		sharder = sh
	}
	if shard != nil {
		if err := shard.checkLeaseAccess(ctx, cfg); err != nil {
			return stoppedOr(ctx, err)
		}
	}
	s.shard = shard
	s.token = token
	s.clientCerts, s.clientCertNames = f.tls.clientCAFile != "", f.tls.clientNames
	var viewFactory *kinformer.Factory // --namespace-selector's; nil without
	defer func() {
		if viewFactory != nil {
			viewFactory.Stop()
		}
	}()
	for _, arg := range fs.Args() {
		res, err := resolver.resolve(ctx, arg)
		if err != nil {
			return stoppedOr(ctx, err)
		}
		if err := checkFields(res, f.cluster.fields); err != nil {
			return err
		}
		if r := s.byName[res.String()]; r != nil {
			s.byName[arg] = r // the same resource twice: one informer
			continue
		}
		f.stateKeys.warnSecrets(e, res, f.stateDir)
		if token == nil && !f.tls.clientCertsGuard() && !f.openSecrets && res.gvr.Group == "" && res.gvr.Resource == "secrets" {
			return usageErrorf("serve: serving secrets without --token-file lets anyone who can reach %s read them (on loopback: every process and user of this machine); "+
				"give --token-file FILE (head -c 32 /dev/urandom | base64 > FILE; chmod 600 FILE) or --client-ca-file with --client-cert-names, or --serve-secrets-without-token to serve them anyway", f.listen)
		}
		if f.nsSelector != "" && res.namespaced {
			// One informer per namespace the selector chooses, from one
			// factory whose informers count in the served metrics,
			// sharing the watch of the Namespace objects.
			if viewFactory == nil {
				viewFactory = kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Logger: logger, StateDir: f.stateDir, StateKeys: f.stateKeys.keys, Compact: f.compact, Metrics: s.metrics})
			}
			v, err := kinformer.DynamicView(viewFactory, res.gvr, kinformer.Namespaces{Selector: f.nsSelector, IfAllowed: f.skipDenied},
				&kinformer.Options[*unstructured.Unstructured]{LabelSelector: f.cluster.selector, FieldSelector: f.cluster.fieldSelector,
					ResyncPeriod: f.resync, WatchTimeout: f.watchTime, Fields: f.cluster.fields})
			if err != nil {
				return stoppedOr(ctx, err)
			}
			r := s.addSource(arg, res, "", &viewSource{f: viewFactory, v: v, shared: true, packed: f.compact})
			sayGone(e, res, r.src)
			if f.stateDir != "" {
				v.AddHandlerFuncs(kinformer.HandlerFuncs[*unstructured.Unstructured]{Error: stateWarning(e)})
			}
			continue
		}
		var lw lister = dyn.Resource(res.gvr)
		scope := ""
		if res.namespaced && !f.cluster.allNamespaces {
			lw, scope = dyn.Resource(res.gvr).Namespace(ns), ns
		}
		inf := kinformer.New[*unstructured.Unstructured](lw, &kinformer.Options[*unstructured.Unstructured]{
			LabelSelector: f.cluster.selector,
			FieldSelector: f.cluster.fieldSelector,
			ResyncPeriod:  f.resync,
			WatchTimeout:  f.watchTime,
			Logger:        logger,
			Name:          res.String(), // the label of its metrics, as served; names the state file
			Metrics:       s.metrics,
			StateDir:      f.stateDir,
			StateKey:      stateKey(cfg, res, scope),
			StateKeys:     f.stateKeys.keys,
			Sharding:      sharder,
			Compact:       f.compact,
			Fields:        f.cluster.fields,
		})
		sayGone(e, res, s.add(arg, res, scope, inf).src)
		if f.stateDir != "" {
			inf.AddHandlerFuncs(kinformer.HandlerFuncs[*unstructured.Unstructured]{Error: stateWarning(e)})
		}
	}

	tln, err := net.Listen("tcp", f.listen)
	if err != nil {
		return &codedError{code: exitError, msg: fmt.Sprintf("serve: %v", err), err: err}
	}
	ln := limitConnections(tln, f.maxConns)
	// Say the address as asked, with the port actually bound.
	tcp := ln.Addr().(*net.TCPAddr)
	host, _, _ := net.SplitHostPort(f.listen)
	if host == "" {
		host = tcp.IP.String()
	}
	addr := net.JoinHostPort(host, strconv.Itoa(tcp.Port))
	switch {
	case tcp.IP.IsLoopback():
	case token == nil && !s.clientCerts:
		fmt.Fprintf(e.stderr, "%s: WARNING: listening on %s, which other hosts may reach: anyone who can connect can read the served objects\n", e.prog, addr)
	case tlsFiles == nil:
		fmt.Fprintf(e.stderr, "%s: WARNING: listening on %s, which other hosts may reach, without TLS: the token and the objects cross the network in clear (--tls-cert-file)\n", e.prog, addr)
	}
	if shard != nil {
		fmt.Fprintf(e.stderr, "%s: %s\n", e.prog, escapeTerminal(shard.String()))
	}
	scheme := "http"
	if tlsFiles != nil {
		scheme = "https"
	}
	fmt.Fprintf(e.stderr, "%s: serving %s on %s://%s/\n", e.prog, escapeTerminal(s.names()), scheme, addr)

	s.setHostCheck(tcp.IP.IsLoopback(), accept)
	hs := newHTTPServer(s.handler(), slog.NewLogLogger(slog.NewTextHandler(e.stderr, nil), slog.LevelWarn), ln)
	var serveLn net.Listener = ln
	if tlsFiles != nil {
		hs.TLSConfig = tlsFiles.config()
		hs.TLSNextProto = map[string]func(*http.Server, *tls.Conn, http.Handler){} // HTTP/1.1 only
		serveLn = tls.NewListener(ln, hs.TLSConfig)
	}
	// The first error (or SIGINT, SIGTERM) ends everything: g's context is
	// the lifetime of the informers and of the HTTP server.
	g, gctx := errgroup.WithContext(ctx)
	// Sharded, the informers outlive gctx until the Sharding has given its
	// share up: their handlers (the feed, the event streams) get Deleted
	// for every object it drops, before its Lease is deleted and the
	// others take the objects over. The HTTP server, too, waits for that.
	infCtx, stopInformers := context.WithCancel(context.WithoutCancel(gctx))
	defer stopInformers()
	left := make(chan struct{}) // closed once the Sharding has returned
	if sh != nil {
		g.Go(func() error {
			defer close(left)
			return sh.Run(gctx)
		})
	} else {
		close(left)
	}
	g.Go(func() error {
		<-gctx.Done()
		<-left
		stopInformers()
		return nil
	})
	if viewFactory != nil {
		viewFactory.Start()
	}
	for _, r := range s.resources {
		g.Go(func() error {
			r.src.run(infCtx)
			return nil
		})
		g.Go(func() error {
			// The informer retries forever; an error WaitForSync returns
			// (403, 404, bad selector) will not go away by itself.
			err := r.src.waitForSync(gctx)
			switch {
			case err == nil:
				if line := restoreLine(e.prog, r.name, r.src.restores(), r.src.startup().ListTook); line != "" {
					fmt.Fprintln(e.stderr, line)
				}
			case gctx.Err() == nil:
				if _, view := r.src.(*viewSource); view && !f.skipDenied {
					return forbiddenNamespace(err)
				}
				return err
			}
			return nil
		})
	}
	g.Go(func() error {
		if err := hs.Serve(serveLn); !errors.Is(err, http.ErrServerClosed) {
			return &codedError{code: exitError, msg: fmt.Sprintf("serve: %v", err), err: err}
		}
		return nil
	})
	g.Go(func() error {
		<-gctx.Done()
		<-left
		// Graceful shutdown: end the event streams and let requests in
		// flight finish, for a few seconds at most. They read caches that
		// outlive their stopped informers.
		s.close()
		shCtx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
		defer cancel()
		if err := hs.Shutdown(shCtx); err != nil {
			_ = hs.Close()
		}
		return nil
	})
	if err := g.Wait(); err != nil {
		return err
	}
	fmt.Fprintf(e.stderr, "%s: stopped\n", e.prog)
	return nil
}

// checkListen checks a --listen address before anything else is done: a
// HOST:PORT with a numeric port (0: any free one).
func checkListen(addr string) error {
	_, port, err := net.SplitHostPort(addr)
	if err != nil {
		return err
	}
	if _, err := strconv.ParseUint(port, 10, 16); err != nil {
		return fmt.Errorf("port %q: want a number from 0 to 65535", port)
	}
	return nil
}

// stateWarning is a handler of ERROR events that says on stderr those
// about the state file: not a failure, the informer lists instead.
func stateWarning(e *env) func(kinformer.Event[*unstructured.Unstructured]) {
	return func(ev kinformer.Event[*unstructured.Unstructured]) {
		if isStateError(ev.Err) {
			e.warn(ev.Err.Error())
		}
	}
}
