package main

import (
	"errors"
	"fmt"
	"strings"

	"github.com/spf13/pflag"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
	clientcmdapi "k8s.io/client-go/tools/clientcmd/api"
)

// clusterFlags are kubectl's connection and scope flags, shared by the
// commands.
type clusterFlags struct {
	kubeconfig    string
	context       string
	cluster       string
	user          string
	namespace     string
	allNamespaces bool
	selector      string
	fieldSelector string
}

func (f *clusterFlags) bind(fs *pflag.FlagSet, scope bool) {
	fs.StringVar(&f.kubeconfig, "kubeconfig", "", "path to the kubeconfig file (default: $KUBECONFIG, else ~/.kube/config, else the in-cluster configuration)")
	fs.StringVar(&f.context, "context", "", "the kubeconfig context to use")
	fs.StringVar(&f.cluster, "cluster", "", "the kubeconfig cluster to use")
	fs.StringVar(&f.user, "user", "", "the kubeconfig user to use")
	fs.StringVarP(&f.namespace, "namespace", "n", "", "the namespace (default: the context's namespace, else \"default\")")
	if scope {
		fs.BoolVarP(&f.allNamespaces, "all-namespaces", "A", false, "watch the resource in all namespaces")
		fs.StringVarP(&f.selector, "selector", "l", "", "label selector, e.g. app=web,tier!=db")
		fs.StringVar(&f.fieldSelector, "field-selector", "", "field selector, e.g. metadata.name=web")
	}
}

// load returns the REST config and the namespace to use.
func (f *clusterFlags) load(userAgent string) (*rest.Config, string, error) {
	rules := clientcmd.NewDefaultClientConfigLoadingRules()
	rules.ExplicitPath = f.kubeconfig
	overrides := &clientcmd.ConfigOverrides{
		CurrentContext: f.context,
		Context: clientcmdapi.Context{
			Cluster:   f.cluster,
			AuthInfo:  f.user,
			Namespace: f.namespace,
		},
	}
	cc := clientcmd.NewNonInteractiveDeferredLoadingClientConfig(rules, overrides)
	cfg, err := cc.ClientConfig()
	if err != nil {
		if clientcmd.IsEmptyConfig(err) {
			return nil, "", err
		}
		var msg string
		if f.kubeconfig != "" {
			msg = fmt.Sprintf("loading kubeconfig %s: %v", f.kubeconfig, err)
		} else {
			msg = fmt.Sprintf("loading kubeconfig: %v", err)
		}
		return nil, "", &codedError{code: exitUnreachable, msg: msg, err: err}
	}
	ns, _, err := cc.Namespace()
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
		fmt.Fprint(w, exitCodesHelp)
		return errHelp
	}
	return nil
}
