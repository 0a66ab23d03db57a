package main

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/url"
	"os"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"

	"github.com/kinformer/kinformer/internal/testenv"
)

// newTestResolver is a resolver for srv's admin, counting the requests it
// makes; warnings go to the test log.
func newTestResolver(t *testing.T, srv *testenv.Server) (*resolver, *atomic.Int64) {
	t.Helper()
	var requests atomic.Int64
	cfg := srv.Config()
	cfg.Wrap(func(rt http.RoundTripper) http.RoundTripper {
		return roundTripFunc(func(req *http.Request) (*http.Response, error) {
			requests.Add(1)
			return rt.RoundTrip(req)
		})
	})
	r, err := newResolver(context.Background(), cfg, func(msg string) { t.Log("warning: " + msg) })
	if err != nil {
		t.Fatal(err)
	}
	return r, &requests
}

type roundTripFunc func(*http.Request) (*http.Response, error)

func (f roundTripFunc) RoundTrip(req *http.Request) (*http.Response, error) { return f(req) }

// Names resolve through the real server's discovery, like kubectl's: plural,
// singular, short name, kind, NAME.GROUP and NAME.VERSION.GROUP, in any
// case, CRDs included; core before other groups; a resource's own name
// before another's short name. Discovery is read once, whatever the names.
func TestResolve(t *testing.T) {
	t.Parallel()
	srv := testenv.Shared(t)
	// A cluster-scoped CRD whose short name "pods" collides with the core
	// plural: the plural wins, as in kubectl.
	gadgets := crd{group: "resolve.kinformer.example.com", version: "v1", plural: "gadgets", singular: "gadget",
		kind: "Gadget", shortNames: []string{"gdg", "pods"}}
	gadgets.create(t, srv)
	r, requests := newTestResolver(t, srv)
	discovered := requests.Load()

	core := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: r}
	}
	deployments := schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}
	tests := []struct {
		arg        string
		want       schema.GroupVersionResource
		kind       string
		namespaced bool
	}{
		{"configmaps", core("configmaps"), "ConfigMap", true},
		{"configmap", core("configmaps"), "ConfigMap", true},
		{"cm", core("configmaps"), "ConfigMap", true},
		{"ConfigMap", core("configmaps"), "ConfigMap", true},
		{"CONFIGMAPS", core("configmaps"), "ConfigMap", true},
		{"CM", core("configmaps"), "ConfigMap", true},
		{"configmaps.", core("configmaps"), "ConfigMap", true},
		{"configmaps.v1", core("configmaps"), "ConfigMap", true},
		{"configmaps.v1.", core("configmaps"), "ConfigMap", true},
		{"cm.", core("configmaps"), "ConfigMap", true},
		{"ns", core("namespaces"), "Namespace", false},
		{"pods", core("pods"), "Pod", true},
		{"po", core("pods"), "Pod", true},
		{"events", core("events"), "Event", true}, // core first, like kubectl
		{"ev", core("events"), "Event", true},
		{"events.events.k8s.io", schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}, "Event", true},
		{"deployments.apps", deployments, "Deployment", true},
		{"deployments.v1.apps", deployments, "Deployment", true},
		{"Deployment.apps", deployments, "Deployment", true},
		{"Deployment", deployments, "Deployment", true},
		{"deploy", deployments, "Deployment", true},
		{"gadgets.resolve.kinformer.example.com", gadgets.gvr(), "Gadget", false},
		{"gadgets.v1.resolve.kinformer.example.com", gadgets.gvr(), "Gadget", false},
		{"gadgets", gadgets.gvr(), "Gadget", false},
		{"gadget", gadgets.gvr(), "Gadget", false},
		{"gdg", gadgets.gvr(), "Gadget", false},
		{"Gadget", gadgets.gvr(), "Gadget", false},
		{"Gadget.resolve.kinformer.example.com", gadgets.gvr(), "Gadget", false},
	}
	for _, tt := range tests {
		res, err := r.resolve(context.Background(), tt.arg)
		if err != nil {
			t.Errorf("resolve(%q): %v", tt.arg, err)
			continue
		}
		if res.gvr != tt.want || res.kind != tt.kind || res.namespaced != tt.namespaced {
			t.Errorf("resolve(%q) = %v %s namespaced=%v, want %v %s namespaced=%v", tt.arg, res.gvr, res.kind, res.namespaced, tt.want, tt.kind, tt.namespaced)
		}
	}

	// Unknown names, subresources and resources that cannot be watched
	// exit 3, naming the argument.
	for _, arg := range []string{"nosuch", "", "configmaps.apps", "gadgets.apps", "pods/log", "log", "apps/v1/deployments", "bindings", "deployments.v2.apps"} {
		_, err := r.resolve(context.Background(), arg)
		code, msg := classify(err)
		if err == nil || code != exitUnknown {
			t.Errorf("resolve(%q): got code %d, err %v; want exit code %d", arg, code, err, exitUnknown)
			continue
		}
		if !strings.Contains(msg, fmt.Sprintf("%q", arg)) {
			t.Errorf("resolve(%q): message %q does not name the argument", arg, msg)
		}
	}
	if n := requests.Load(); n != discovered {
		t.Errorf("%d requests after discovery (%d), want none: discovery is read once per process", n-discovered, discovered)
	}
}

// An unreachable server fails when the resolver is made, as unreachable.
func TestResolverUnreachable(t *testing.T) {
	t.Parallel()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	_, err = newResolver(context.Background(), &rest.Config{Host: "https://" + addr}, nil)
	if code, msg := classify(err); code != exitUnreachable || !strings.Contains(msg, addr) {
		t.Errorf("newResolver: exit %d, %q; want %d naming %s", code, msg, exitUnreachable, addr)
	}
}

func TestClassify(t *testing.T) {
	gr := schema.GroupResource{Resource: "configmaps"}
	tests := []struct {
		err  error
		code int
		msg  string
	}{
		{apierrors.NewForbidden(gr, "", errors.New("nope")), exitForbidden, "forbidden: "},
		{apierrors.NewUnauthorized("who are you"), exitForbidden, "unauthorized: who are you"},
		{apierrors.NewBadRequest("unable to parse requirement"), exitBadSelector, "bad selector: unable to parse requirement"},
		{fmt.Errorf("list: %w", apierrors.NewNotFound(gr, "")), exitUnknown, "not found: "},
		{&url.Error{Op: "Get", URL: "https://127.0.0.1:1/api", Err: syscall.ECONNREFUSED}, exitUnreachable, "cannot reach the cluster: "},
		{clientcmd.ErrEmptyConfig, exitUnreachable, "no configuration"},
		{usageErrorf("watch: missing RESOURCE"), exitUsage, "watch: missing RESOURCE"},
		{errors.New("boom"), exitError, "boom"},
	}
	for _, tt := range tests {
		code, msg := classify(tt.err)
		if code != tt.code || !strings.HasPrefix(msg, tt.msg) {
			t.Errorf("classify(%v) = %d, %q; want %d, %q…", tt.err, code, msg, tt.code, tt.msg)
		}
	}
}

func TestProgName(t *testing.T) {
	for arg0, want := range map[string]string{
		"/usr/local/bin/kinformer":       "kinformer",
		"kinformer":                      "kinformer",
		"/home/me/bin/kubectl-kinformer": "kubectl kinformer",
		"kubectl-kinformer.exe":          "kubectl kinformer",
		"kubectl-kin_former":             "kubectl kin-former",
	} {
		if got := progName(arg0); got != want {
			t.Errorf("progName(%q) = %q, want %q", arg0, got, want)
		}
	}
}

func TestSplitCommand(t *testing.T) {
	tests := []struct {
		args []string
		cmd  string
		rest string
		err  bool
	}{
		{nil, "", "", false},
		{[]string{"watch", "cm", "-A"}, "watch", "cm -A", false},
		{[]string{"-n", "watch", "watch", "cm"}, "watch", "-n watch cm", false},
		{[]string{"--kubeconfig=x", "-A", "watch", "cm"}, "watch", "--kubeconfig=x -A cm", false},
		{[]string{"--context", "admin", "watch", "po"}, "watch", "--context admin po", false},
		{[]string{"--as", "someone", "-s", "https://x", "watch", "po"}, "watch", "--as someone -s https://x po", false},
		{[]string{"--as-group", "g", "--insecure-skip-tls-verify", "serve", "po"}, "serve", "--as-group g --insecure-skip-tls-verify po", false},
		{[]string{"--request-timeout", "5s", "-v", "watch", "po"}, "watch", "--request-timeout 5s -v po", false},
		{[]string{"--listen", ":0", "serve", "po"}, "serve", "--listen :0 po", false},
		{[]string{"-A"}, "", "", true},
		{[]string{"--help"}, "help", "", false},
	}
	for _, tt := range tests {
		cmd, rest, err := splitCommand(tt.args)
		if cmd != tt.cmd || strings.Join(rest, " ") != tt.rest || (err != nil) != tt.err {
			t.Errorf("splitCommand(%q) = %q, %q, %v; want %q, %q, err=%v", tt.args, cmd, rest, err, tt.cmd, tt.rest, tt.err)
		}
	}
}

// The exit codes are documented from one table: --help and the package
// comment.
func TestExitCodes(t *testing.T) {
	for code, c := range exitCodes {
		if c.name == "" || c.help == "" {
			t.Errorf("exit code %d has no name or help", code)
		}
	}
	src, err := os.ReadFile("main.go")
	if err != nil {
		t.Fatal(err)
	}
	if want := "// Exit codes:\n//\n" + exitCodesHelp("//\t"); !strings.Contains(string(src), want) {
		t.Errorf("the package comment in main.go does not list the exit codes as exitCodes does:\n%s", want)
	}
}
