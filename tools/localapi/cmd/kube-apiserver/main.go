// Command kube-apiserver is the stock kube-apiserver of k8s.io/kubernetes
// v1.37.2, built from this module so that it shares localapi's dependencies
// and build cache. It is the same program as k8s.io/kubernetes's
// cmd/kube-apiserver/apiserver.go (the same imports and main); tests that
// start their own API server from separate binaries (envtest, through
// KUBEBUILDER_ASSETS) use it. hack/envtest-assets.sh builds it.
package main

import (
	"os"
	_ "time/tzdata" // for timeZone support in CronJob

	"k8s.io/component-base/cli"
	_ "k8s.io/component-base/logs/json/register"          // for JSON log format registration
	_ "k8s.io/component-base/metrics/prometheus/clientgo" // load all the prometheus client-go plugins
	_ "k8s.io/component-base/metrics/prometheus/version"  // for version metric registration
	"k8s.io/kubernetes/cmd/kube-apiserver/app"
)

func main() {
	command := app.NewAPIServerCommand()
	code := cli.Run(command)
	os.Exit(code)
}
