package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/cli-runtime/pkg/genericclioptions"
	"k8s.io/client-go/kubernetes/scheme"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kinformer/kinformer"
)

// clusterFlags are kubectl's connection flags (cli-runtime's ConfigFlags,
// as every kubectl plugin has them) and its scope flags.
type clusterFlags struct {
	*genericclioptions.ConfigFlags
	allNamespaces bool
	selector      string
	fieldSelector string
	fields        []string // --fields: the projection (Options.Fields)
}

// bind adds the flags to fs (after the command's own, for --help); scope
// adds -A, -l and --field-selector.
func (f *clusterFlags) bind(fs *pflag.FlagSet, scope bool) {
	if scope {
		fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "watch the resource in all namespaces")
		fs.StringVarP(&f.selector, "selector", "l", "", "label selector, e.g. app=web,tier!=db")
		fs.StringVar(&f.fieldSelector, "field-selector", "", "field selector, e.g. metadata.name=web")
		fs.StringSliceVar(&f.fields, "fields", nil, "keep only these fields of each object, comma-separated paths in JSON names, e.g. metadata.labels,spec.nodeName,status.phase (name, namespace, uid and resourceVersion are always kept); the rest is never decoded")
	}
	f.ConfigFlags = genericclioptions.NewConfigFlags(true)
	// Discovery is cached in memory, once per process (see newResolver),
	// not on disk: there is no --cache-dir to offer.
	f.CacheDir = nil
	f.AddFlags(fs)
	fs.Lookup("namespace").Usage += ` (default: the context's namespace, else "default")`
}

// load returns the REST config and the namespace to use: the kubeconfig
// ($KUBECONFIG, ~/.kube/config) with the flags applied, else the in-cluster
// configuration.
func (f *clusterFlags) load(userAgent string) (*rest.Config, string, error) {
	loader := f.ToRawKubeConfigLoader()
	cfg, err := f.ToRESTConfig()
	if err == nil && *f.APIServer == "" {
		// Without a kubeconfig, --server or a cluster to run in, client-go
		// falls back to kubectl's legacy http://localhost:8080. Say there
		// is no configuration rather than fail to connect there.
		if l, ok := loader.ConfigAccess().(clientcmd.ClientConfigLoader); ok && l.IsDefaultConfig(cfg) {
			err = clientcmd.ErrEmptyConfig
		}
	}
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", clientcmd.ErrEmptyConfig
		}
		msg := fmt.Sprintf("loading kubeconfig: %v", err)
		if *f.KubeConfig != "" {
			msg = fmt.Sprintf("loading kubeconfig %s: %v", *f.KubeConfig, err)
		}
		return nil, "", &codedError{code: exitUnreachable, msg: msg, err: err}
	}
	ns, _, err := loader.Namespace()
	if err != nil {
		return nil, "", &codedError{code: exitUnreachable, msg: "namespace: " + err.Error(), err: err}
	}
	if ns == "" {
		ns = "default"
	}
	cfg = rest.CopyConfig(cfg)
	cfg.UserAgent = userAgent
	// Discovery and the demo traffic issue bursts of requests; the informer
	// itself makes one list and one watch at a time.
	cfg.QPS, cfg.Burst = 50, 100
	return cfg, ns, nil
}

// parseFlags parses args with fs; -h/--help prints the command's usage to
// stdout and returns errHelp.
func parseFlags(e *env, fs *pflag.FlagSet, args []string, usageLine, long string) error {
	fs.SetOutput(e.stderr)
	fs.SortFlags = false
	fs.Usage = func() {}
	help := fs.BoolP("help", "h", false, "show this help")
	if err := fs.Parse(args); err != nil {
		if errors.Is(err, pflag.ErrHelp) {
			*help = true
		} else {
			return usageErrorf("%v", err)
		}
	}
	if *help {
		w := e.stdout
		fmt.Fprintf(w, "Usage:\n  %s %s\n\n%s\nFlags:\n", e.prog, usageLine, strings.TrimLeft(long, "\n"))
		fs.SetOutput(w)
		fs.PrintDefaults()
		fmt.Fprint(w, "\nExit codes:\n"+exitCodesHelp("  "))
		return errHelp
	}
	return nil
}

// checkFields checks --fields against the resource's Go type where
// client-go knows it (built-in resources); a custom resource's paths are
// checked as paths only. A bad path is a usage error.
func checkFields(res resource, fields []string) error {
	if len(fields) == 0 {
		return nil
	}
	var example any
	if obj, err := scheme.Scheme.New(res.gvr.GroupVersion().WithKind(res.kind)); err == nil {
		example = obj
	}
	if err := kinformer.CheckFields(example, fields); err != nil {
		return usageErrorf("--fields: %v", err)
	}
	return nil
}
