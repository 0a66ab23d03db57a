package main

// The scale benchmark: 100,000 small Secrets and 20,000 headless Services
// synced and handled by one controller-runtime manager, with
// controller-runtime's own cache and with kinformer's (kcr), against the
// 2-minute deadline controller-runtime gives a controller's caches to sync
// (v0.23+ waits for the handlers too).
//
//	cd tools/bench && go run . scale

import (
	"context"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/client-go/kubernetes"
)

const (
	scaleBegin = "<!-- scale: begin -->"
	scaleEnd   = "<!-- scale: end -->"

	secretNamespace  = "bench-secrets"
	serviceNamespace = "bench-services"
	scaleLabel       = "bench-scale"
	// scaleCreatedFile, in the data dir, says how long creating the
	// workload took, for the report of a later run on it.
	scaleCreatedFile = "scale-created.txt"

	// crDeadline is controller-runtime's default CacheSyncTimeout: a
	// controller whose sources (the informer, and since v0.23 its
	// handler's initial events) have not synced by then fails to start.
	crDeadline = 2 * time.Minute
	// scaleTimeout is how long a contender may take to reconcile every
	// object once before the run fails.
	scaleTimeout = 5 * time.Minute
)

// scaleConfig is the scale benchmark's flags.
type scaleConfig struct {
	*bench
	secrets, services, writers int
	contenders                 []string
	profileDir                 string
	createSeconds              float64 // creating the workload in this run (0: it was there)
	createdBefore              string  // what the run that created it recorded in the data dir (scaleCreatedFile)
}

func scaleFlags(fs *flag.FlagSet) func(*bench) error {
	var c scaleConfig
	fs.IntVar(&c.secrets, "secrets", 100000, "Secrets in the workload (one data key of 64 bytes, a label), in "+secretNamespace)
	fs.IntVar(&c.services, "services", 20000, "Services in the workload (headless, one port), in "+serviceNamespace)
	fs.IntVar(&c.writers, "writers", 32, "concurrent writers creating the workload")
	contenders := fs.String("contenders", strings.Join([]string{kCR, kCRKCR, kCRKCRDrop}, ","), "controller-runtime contenders, comma-separated; ratios are to the first")
	fs.StringVar(&c.profileDir, "profile", "", "if set, also write a CPU profile (start to handled) and a heap profile (at handled: inuse_space) of one extra run of each contender here")
	return func(b *bench) error {
		c.bench = b
		c.contenders = strings.Split(*contenders, ",")
		return scale(c)
	}
}

func secretName(i int) string  { return fmt.Sprintf("secret-%06d", i) }
func serviceName(i int) string { return fmt.Sprintf("svc-%05d", i) }

// smallSecret is Secret i: one data key of 64 bytes, a label.
func smallSecret(i int) *corev1.Secret {
	token := fmt.Sprintf("%064x", uint64(i)*0x9e3779b97f4a7c15)
	return &corev1.Secret{
		ObjectMeta: metav1.ObjectMeta{Name: secretName(i), Namespace: secretNamespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": scaleLabel}},
		Type: corev1.SecretTypeOpaque,
		Data: map[string][]byte{"token": []byte(token[len(token)-64:])},
	}
}

// headlessService is Service i: headless (the server's service IP range
// is small), one port.
func headlessService(i int) *corev1.Service {
	name := serviceName(i)
	return &corev1.Service{
		ObjectMeta: metav1.ObjectMeta{Name: name, Namespace: serviceNamespace,
			Labels: map[string]string{"app.kubernetes.io/part-of": scaleLabel}},
		Spec: corev1.ServiceSpec{
			ClusterIP: corev1.ClusterIPNone,
			Selector:  map[string]string{"app.kubernetes.io/name": name},
			Ports:     []corev1.ServicePort{{Name: "http", Port: 80, TargetPort: intstr.FromInt32(8080), Protocol: corev1.ProtocolTCP}},
		},
	}
}

// countObjects counts the objects of a list call in pages of 5,000 (the
// server is loaded: retried).
func countObjects(list func(opts metav1.ListOptions) (n int, cont string, err error)) (count int, err error) {
	err = retried(func() error {
		count = 0
		opts := metav1.ListOptions{Limit: 5000}
		for {
			n, cont, err := list(opts)
			if err != nil {
				return err
			}
			count += n
			if opts.Continue = cont; cont == "" {
				return nil
			}
		}
	})
	return count, err
}

// ensureScaleWorkload creates the Secrets and Services unless the data
// dir holds them already (counted with a paged LIST first, which also
// warms the server up); it returns the seconds spent creating.
func ensureScaleWorkload(ctx context.Context, cs kubernetes.Interface, c scaleConfig) (float64, error) {
	for _, ns := range []string{secretNamespace, serviceNamespace} {
		if err := ensureNamespace(ctx, cs, ns); err != nil {
			return 0, err
		}
	}
	countSecrets := func() (int, error) {
		return countObjects(func(o metav1.ListOptions) (int, string, error) {
			l, err := cs.CoreV1().Secrets(secretNamespace).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.Continue, nil
		})
	}
	countServices := func() (int, error) {
		return countObjects(func(o metav1.ListOptions) (int, string, error) {
			l, err := cs.CoreV1().Services(serviceNamespace).List(ctx, o)
			if err != nil {
				return 0, "", err
			}
			return len(l.Items), l.Continue, nil
		})
	}
	start := time.Now()
	created := false
	co := metav1.CreateOptions{FieldManager: fieldManager}
	for _, w := range []struct {
		what   string
		want   int
		count  func() (int, error)
		create func(i int) error
	}{
		{"secrets", c.secrets, countSecrets, func(i int) error {
			_, err := cs.CoreV1().Secrets(secretNamespace).Create(ctx, smallSecret(i), co)
			return err
		}},
		{"services", c.services, countServices, func(i int) error {
			_, err := cs.CoreV1().Services(serviceNamespace).Create(ctx, headlessService(i), co)
			return err
		}},
	} {
		have, err := w.count()
		if err != nil {
			return 0, fmt.Errorf("counting %s: %w", w.what, err)
		}
		if have > w.want {
			return 0, fmt.Errorf("%d %s there, more than the %d asked: use another -data-dir", have, w.what, w.want)
		}
		if have == w.want {
			logf("%s: %d there already", w.what, have)
			continue
		}
		logf("%s: %d there, creating %d with %d writers", w.what, have, w.want, c.writers)
		created = true
		if err := createObjectsWith(w.what, w.want, c.writers, w.create); err != nil {
			return 0, err
		}
		if have, err = w.count(); err != nil {
			return 0, err
		}
		if have != w.want {
			return 0, fmt.Errorf("%d %s after creating them, want %d", have, w.what, w.want)
		}
	}
	if !created {
		return 0, nil
	}
	return time.Since(start).Seconds(), nil
}

func scale(c scaleConfig) error {
	if err := checkCRContenders(c.contenders); err != nil {
		return err
	}
	m := describeMachine()
	srv, cs, err := c.serve()
	if err != nil {
		return err
	}
	defer srv.stop()
	ctx := context.Background()
	if c.createSeconds, err = ensureScaleWorkload(ctx, cs, c); err != nil {
		return fmt.Errorf("workload: %w", err)
	}
	created := filepath.Join(c.dataDir, scaleCreatedFile)
	if c.createSeconds > 0 {
		msg := fmt.Sprintf("%d objects in %.0f s (%.0f objects/s, %d writers, %s)", c.secrets+c.services, c.createSeconds,
			float64(c.secrets+c.services)/c.createSeconds, c.writers, time.Now().UTC().Format("2006-01-02"))
		logf("workload: %s", msg)
		os.WriteFile(created, []byte(msg+"\n"), 0o644)
	} else if b, err := os.ReadFile(created); err == nil {
		c.createdBefore = strings.TrimSpace(string(b))
	}

	var rs []scaleResult
	for r := 1; r <= c.rounds; r++ {
		for _, kind := range rotate(c.contenders, r-1) {
			time.Sleep(2 * time.Second) // let the server settle
			cpu0 := processCPUSeconds(srv.cmd.Process.Pid)
			res, err := runScaleContender(ctx, srv.Kubeconfig, kind, r, c)
			if err != nil {
				return fmt.Errorf("%s round %d: %w", kind, r, err)
			}
			res.ServerCPUSeconds = processCPUSeconds(srv.cmd.Process.Pid) - cpu0
			rs = append(rs, res)
			logf("%-12s round %d: synced %.3fs started %.3fs reconciled %.3fs (main %.3fs) cpu %.3fs/%.3fs/%.3fs server cpu %.3fs peak heap %.1fMB/%.1fMB heap after %.1fMB rss %.1fMB; reconciles %d secrets %d services, %d errors",
				kind, r, res.SyncSeconds, res.StartedSeconds, res.ReconciledSeconds, res.MainSeconds, res.SyncCPUSeconds, res.StartedCPUSeconds, res.ReconciledCPUSeconds,
				res.ServerCPUSeconds, res.PeakHeapStartedMB, res.PeakHeapMB, res.HeapAfterMB, res.PeakRSSMB, res.SecretReconciles, res.ServiceReconciles, res.Errors)
		}
	}
	if c.profileDir != "" {
		if err := os.MkdirAll(c.profileDir, 0o755); err != nil {
			return err
		}
		for _, kind := range c.contenders {
			for _, p := range []string{"cpu", "mem"} {
				file := filepath.Join(c.profileDir, fmt.Sprintf("scale-%s.%s.pprof", strings.ReplaceAll(kind, "+", "-"), p))
				if _, err := runScaleContender(ctx, srv.Kubeconfig, kind, 0, c, "-"+p+"profile", file); err != nil {
					return err
				}
				logf("wrote %s", file)
			}
		}
	}
	if c.rounds == 0 {
		return nil
	}
	m.LoadEnd = loadavg()
	return c.section(scaleReport(m, c, rs))
}

// runScaleContender runs one contender in its own process and checks what
// its cache held.
func runScaleContender(ctx context.Context, kubeconfig, kind string, round int, c scaleConfig, extra ...string) (scaleResult, error) {
	args := []string{"scale-contender", "-kind", kind, "-kubeconfig", kubeconfig, "-round", fmt.Sprint(round),
		"-secrets", fmt.Sprint(c.secrets), "-services", fmt.Sprint(c.services),
		"-exec-ns", fmt.Sprint(time.Now().UnixNano())}
	res, _, err := runChild[scaleResult](ctx, kind, nil, append(args, extra...)...)
	if err != nil {
		return res, err
	}
	if res.CachedSecrets != c.secrets || res.CachedServices != c.services || res.Errors != 0 {
		return res, fmt.Errorf("cache held %d Secrets and %d Services (want %d and %d); %d reconcile errors",
			res.CachedSecrets, res.CachedServices, c.secrets, c.services, res.Errors)
	}
	return res, nil
}
