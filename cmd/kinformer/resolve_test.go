package main

import (
	"errors"
	"fmt"
	"net/url"
	"strings"
	"syscall"
	"testing"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/client-go/tools/clientcmd"
)

// discovered is a slice of what a server's discovery says, in its order:
// the core group first.
var discovered = []*metav1.APIResourceList{
	{GroupVersion: "v1", APIResources: []metav1.APIResource{
		{Name: "configmaps", SingularName: "configmap", Namespaced: true, Kind: "ConfigMap", ShortNames: []string{"cm"}, Verbs: []string{"get", "list", "watch"}},
		{Name: "events", SingularName: "event", Namespaced: true, Kind: "Event", ShortNames: []string{"ev"}, Verbs: []string{"list", "watch"}},
		{Name: "pods", SingularName: "pod", Namespaced: true, Kind: "Pod", ShortNames: []string{"po"}, Verbs: []string{"list", "watch"}},
		{Name: "pods/log", SingularName: "", Namespaced: true, Kind: "Pod", Verbs: []string{"get"}},
		{Name: "namespaces", SingularName: "namespace", Kind: "Namespace", ShortNames: []string{"ns"}, Verbs: []string{"list", "watch"}},
		{Name: "bindings", SingularName: "binding", Namespaced: true, Kind: "Binding", Verbs: []string{"create"}},
	}},
	{GroupVersion: "apps/v1", APIResources: []metav1.APIResource{
		{Name: "deployments", SingularName: "deployment", Namespaced: true, Kind: "Deployment", ShortNames: []string{"deploy"}, Verbs: []string{"list", "watch"}},
	}},
	{GroupVersion: "events.k8s.io/v1", APIResources: []metav1.APIResource{
		{Name: "events", SingularName: "event", Namespaced: true, Kind: "Event", ShortNames: []string{"ev"}, Verbs: []string{"list", "watch"}},
	}},
	{GroupVersion: "kinformer.example.com/v1alpha1", APIResources: []metav1.APIResource{
		{Name: "widgets", SingularName: "widget", Namespaced: true, Kind: "Widget", ShortNames: []string{"wg", "cm2"}, Verbs: []string{"list", "watch"}},
		// A short name that collides with a plural elsewhere loses to it.
		{Name: "gadgets", SingularName: "gadget", Kind: "Gadget", ShortNames: []string{"pods"}, Verbs: []string{"list", "watch"}},
	}},
}

func TestResolve(t *testing.T) {
	core := func(r string) schema.GroupVersionResource {
		return schema.GroupVersionResource{Version: "v1", Resource: r}
	}
	tests := []struct {
		arg        string
		want       schema.GroupVersionResource
		namespaced bool
	}{
		{"configmaps", core("configmaps"), true},
		{"configmap", core("configmaps"), true},
		{"cm", core("configmaps"), true},
		{"ConfigMap", core("configmaps"), true},
		{"CONFIGMAPS", core("configmaps"), true},
		{"configmaps.", core("configmaps"), true},
		{"configmaps.v1", core("configmaps"), true},
		{"cm.", core("configmaps"), true},
		{"ns", core("namespaces"), false},
		{"pods", core("pods"), true},
		{"po", core("pods"), true},
		{"events", core("events"), true}, // core first, like kubectl
		{"events.events.k8s.io", schema.GroupVersionResource{Group: "events.k8s.io", Version: "v1", Resource: "events"}, true},
		{"deployments.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{"deployments.v1.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{"Deployment.apps", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{"deploy", schema.GroupVersionResource{Group: "apps", Version: "v1", Resource: "deployments"}, true},
		{"widgets.kinformer.example.com", schema.GroupVersionResource{Group: "kinformer.example.com", Version: "v1alpha1", Resource: "widgets"}, true},
		{"wg", schema.GroupVersionResource{Group: "kinformer.example.com", Version: "v1alpha1", Resource: "widgets"}, true},
		{"Widget", schema.GroupVersionResource{Group: "kinformer.example.com", Version: "v1alpha1", Resource: "widgets"}, true},
		{"gadget", schema.GroupVersionResource{Group: "kinformer.example.com", Version: "v1alpha1", Resource: "gadgets"}, false},
	}
	for _, tt := range tests {
		r, err := resolve(tt.arg, discovered)
		if err != nil {
			t.Errorf("resolve(%q): %v", tt.arg, err)
			continue
		}
		if r.gvr != tt.want || r.namespaced != tt.namespaced {
			t.Errorf("resolve(%q) = %v namespaced=%v, want %v namespaced=%v", tt.arg, r.gvr, r.namespaced, tt.want, tt.namespaced)
		}
	}
}

func TestResolveFails(t *testing.T) {
	for _, arg := range []string{"nosuch", "", "configmaps.apps", "deployments.", "pods/log", "log", "apps/v1/deployments", "bindings"} {
		_, err := resolve(arg, discovered)
		code, msg := classify(err)
		if err == nil || code != exitUnknown {
			t.Errorf("resolve(%q): got code %d, err %v; want exit code %d", arg, code, err, exitUnknown)
			continue
		}
		if !strings.Contains(msg, fmt.Sprintf("%q", arg)) {
			t.Errorf("resolve(%q): message %q does not name the argument", arg, msg)
		}
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
