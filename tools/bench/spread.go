package main

// The spread benchmark (issue 45, "many informers, not in step"): N
// informers of one kinformer.Factory, one per namespace, started together,
// against the same lists run back to back, and against client-go's
// factories started together. What it shows: a Factory bounds its initial
// lists in flight (FactoryOptions.MaxInitialLists) and still syncs the
// last informer no later than the lists one after the other would.
//
//	cd tools/bench && go run . spread

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/informers"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"
	toolscache "k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer"
)

const (
	spreadBegin = "<!-- spread: begin -->"
	spreadEnd   = "<!-- spread: end -->"

	sTogether  = "kinformer together"   // one Factory, every informer started at once
	sBackToBak = "kinformer one by one" // the same informers, each started once the one before has synced
	sClientGo  = "client-go together"   // a client-go SharedInformerFactory per namespace, all started at once
)

type spreadConfig struct {
	*bench
	namespaces, perNamespace, bound int
}

func spreadFlags(fs *flag.FlagSet) func(*bench) error {
	var c spreadConfig
	fs.IntVar(&c.namespaces, "namespaces", 100, "namespaces, one informer each")
	fs.IntVar(&c.perNamespace, "configmaps", 200, "ConfigMaps in each namespace (about 1 KiB each)")
	fs.IntVar(&c.bound, "max-initial-lists", 0, "FactoryOptions.MaxInitialLists (0: the default)")
	return func(b *bench) error {
		c.bench = b
		return spread(c)
	}
}

// spreadResult is one contender's run.
type spreadResult struct {
	Contender    string
	Round        int
	LastSynced   float64 // seconds from the first Start to the last informer synced
	MostInFlight int32   // initial lists (and watch-lists) in flight at once, at most
	Objects      int
}

func spread(c spreadConfig) error {
	if err := c.prepare(); err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := c.serve()
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	nss := make([]string, c.namespaces)
	for i := range nss {
		nss[i] = fmt.Sprintf("bench-spread-%03d", i)
		if err := ensureNamespace(ctx, cs, nss[i]); err != nil {
			return err
		}
	}
	co := metav1.CreateOptions{FieldManager: fieldManager}
	if err := createObjects("configmaps", c.namespaces*c.perNamespace, func(i int) error {
		cm := configMap(i % c.perNamespace)
		cm.Namespace = nss[i/c.perNamespace]
		_, err := cs.CoreV1().ConfigMaps(cm.Namespace).Create(ctx, cm, co)
		if err != nil && strings.Contains(err.Error(), "already exists") {
			return nil // a reused data dir
		}
		return err
	}); err != nil {
		return err
	}
	cfg, err := restConfig(srv.Kubeconfig, 1000)
	if err != nil {
		return err
	}
	kinds := []string{sTogether, sBackToBak, sClientGo}
	var all []spreadResult
	for r := 1; r <= c.rounds; r++ {
		for _, kind := range rotate(kinds, r-1) {
			runtime.GC()
			time.Sleep(time.Second) // let the server settle
			res, err := spreadRun(cfg, kind, nss, c.bound)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			if want := c.namespaces * c.perNamespace; res.Objects != want {
				return fmt.Errorf("%s round %d: %d objects cached, want %d", kind, r, res.Objects, want)
			}
			res.Round = r
			logf("%-22s round %d: last synced %.3fs, at most %d initial lists at once", kind, r, res.LastSynced, res.MostInFlight)
			all = append(all, res)
		}
	}
	m.LoadEnd = loadavg()
	return c.section(spreadReport(m, c, all))
}

// spreadRun runs one contender over nss and stops it.
func spreadRun(cfg *rest.Config, kind string, nss []string, bound int) (spreadResult, error) {
	var lists listCounter
	cfg = lists.wrap(cfg)
	res := spreadResult{Contender: kind}
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	began := time.Now()
	switch kind {
	case sTogether, sBackToBak:
		f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{MaxInitialLists: bound})
		defer f.Stop()
		var infs []*kinformer.Informer[*corev1.ConfigMap]
		for i, ns := range nss {
			inf, err := kinformer.Shared[*corev1.ConfigMap](f, ns, nil)
			if err != nil {
				return res, err
			}
			infs = append(infs, inf)
			if kind == sBackToBak {
				if i == 0 {
					f.Start()
				}
				if err := inf.WaitForSync(ctx); err != nil {
					return res, err
				}
			}
		}
		if kind == sTogether {
			f.Start()
		}
		if err := f.WaitForSync(ctx); err != nil {
			return res, err
		}
		res.LastSynced = time.Since(began).Seconds()
		for _, inf := range infs {
			res.Objects += inf.Cache().Len()
		}
	case sClientGo:
		cs, err := kubernetes.NewForConfig(cfg)
		if err != nil {
			return res, err
		}
		stop := make(chan struct{})
		var fs []informers.SharedInformerFactory
		defer func() {
			close(stop)
			for _, f := range fs {
				f.Shutdown()
			}
		}()
		var infs []toolscache.SharedIndexInformer
		for _, ns := range nss {
			f := informers.NewSharedInformerFactoryWithOptions(cs, 0, informers.WithNamespace(ns))
			inf := f.Core().V1().ConfigMaps().Informer()
			infs = append(infs, inf)
			fs = append(fs, f)
			f.Start(stop)
		}
		for _, inf := range infs {
			if !toolscache.WaitForCacheSync(ctx.Done(), inf.HasSynced) {
				return res, fmt.Errorf("not synced: %w", ctx.Err())
			}
		}
		res.LastSynced = time.Since(began).Seconds()
		for _, inf := range infs {
			res.Objects += len(inf.GetStore().ListKeys())
		}
	}
	res.MostInFlight = lists.most.Load()
	return res, nil
}

// listCounter counts the initial lists of ConfigMaps (lists, and
// watch-lists held open to their end) in flight, and the most at once.
type listCounter struct {
	now, most atomic.Int32
}

func (l *listCounter) wrap(cfg *rest.Config) *rest.Config {
	cfg = rest.CopyConfig(cfg)
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripperFunc(func(r *http.Request) (*http.Response, error) {
			q := r.URL.Query()
			if r.Method != http.MethodGet || !strings.HasSuffix(r.URL.Path, "/configmaps") ||
				(q.Get("watch") == "true" && q.Get("sendInitialEvents") != "true") || q.Get("limit") == "1" {
				return rt.RoundTrip(r)
			}
			n := l.now.Add(1)
			for m := l.most.Load(); n > m && !l.most.CompareAndSwap(m, n); m = l.most.Load() {
			}
			resp, err := rt.RoundTrip(r)
			if err != nil {
				l.now.Add(-1)
				return resp, err
			}
			// A watch-list is counted to its end, which overstates if it
			// stays open as the watch, never understates.
			resp.Body = &closeOnceBody{ReadCloser: resp.Body, done: func() { l.now.Add(-1) }}
			return resp, nil
		})
	})
	return cfg
}

type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

type closeOnceBody struct {
	io.ReadCloser
	once sync.Once
	done func()
}

func (c *closeOnceBody) Close() error {
	err := c.ReadCloser.Close()
	c.once.Do(c.done)
	return err
}

// spreadReport is the spread section of docs/benchmarks.md.
func spreadReport(m machine, c spreadConfig, rs []spreadResult) string {
	var b strings.Builder
	p := func(format string, a ...any) { fmt.Fprintf(&b, format, a...) }
	bound := c.bound
	if bound == 0 {
		bound = kinformer.DefaultMaxInitialLists
	}
	p("%s\n## Many informers started together: %d namespaces of %d ConfigMaps\n\n", spreadBegin, c.namespaces, c.perNamespace)
	p("%d informers, one per namespace, started together: do they list in step, and does bounding their initial lists cost time? Made on %s, %s, %s, %s, `%s`, %d cores **shared with other work** (load %s at the start, %s at the end), kinformer at revision `%s`, medians of %d round(s), by:\n\n    %s\n\n",
		c.namespaces, m.Date, m.CPU, m.Mem, m.Kernel, m.GoVersion, m.NProc, m.LoadStart, m.LoadEnd, c.rev, c.rounds, benchCommand("spread", c.args))
	p("- `%s`: one `kinformer.Factory` (`MaxInitialLists` %d), `Shared` for each namespace, then `Start`: the factory lets %d initial lists run at once and queues the rest.\n", sTogether, bound, bound)
	p("- `%s`: the same, each informer made and waited for (`WaitForSync`) before the next: the lists back to back.\n", sBackToBak)
	p("- `%s`: a client-go `SharedInformerFactory` per namespace, all started at once (client-go has no bound).\n", sClientGo)
	p("- **Last synced**: from the first start to every informer synced, in this process, protobuf on the wire. **Initial lists at once**: list and watch-list requests of ConfigMaps in flight at once, at most, counted in the transport; a watch-list is counted to its end, so client-go's, which stay open as its watches, count as long as it runs: its figure is every informer's initial list started at once.\n\n")
	med := func(kind string, f func(spreadResult) float64) float64 {
		var xs []float64
		for _, r := range rs {
			if r.Contender == kind {
				xs = append(xs, f(r))
			}
		}
		return median(xs)
	}
	last := func(r spreadResult) float64 { return r.LastSynced }
	most := func(r spreadResult) float64 { return float64(r.MostInFlight) }
	p("| metric | %s | %s | %s | together / one by one | kinformer together / client-go |\n|---|---:|---:|---:|---:|---:|\n", sTogether, sBackToBak, sClientGo)
	for _, row := range []struct {
		name string
		f    func(spreadResult) float64
		fmt  string
	}{{"last informer synced (s)", last, "%.2f"}, {"initial lists at once, at most", most, "%.0f"}} {
		t, o, g := med(sTogether, row.f), med(sBackToBak, row.f), med(sClientGo, row.f)
		p("| %s | "+row.fmt+" | "+row.fmt+" | "+row.fmt+" | %s | %s |\n", row.name, t, o, g, ratioCell(t, o), ratioCell(t, g))
	}
	t, o := med(sTogether, last), med(sBackToBak, last)
	verdict := "met"
	if t > 1.2*o || med(sTogether, most) > float64(bound) {
		verdict = "**not met**"
	}
	p("\nAgainst the issue's target (at most %d lists at once, the last synced within 1.2x the lists back to back): %.2fx, %s.\n\n", bound, t/o, verdict)
	p("<details><summary>Every run</summary>\n\n| round | contender | last synced (s) | initial lists at once |\n|---:|---|---:|---:|\n")
	for _, r := range rs {
		p("| %d | %s | %.3f | %d |\n", r.Round, r.Contender, r.LastSynced, r.MostInFlight)
	}
	p("\n</details>\n\n%s\n", spreadEnd)
	return b.String()
}
