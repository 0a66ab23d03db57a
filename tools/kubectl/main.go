// Command kubectl is kubectl, built from its Kubernetes module
// (k8s.io/kubectl) at the version of the local API server: the tests of
// `kinformer serve --kube-api` run `kubectl get` and `kubectl get -w`
// against serve with it. It is its own Go module, outside the workspace,
// so that nothing else depends on kubectl's dependencies.
package main

import (
	"k8s.io/component-base/cli"
	"k8s.io/kubectl/pkg/cmd"
	"k8s.io/kubectl/pkg/cmd/util"
)

func main() {
	command := cmd.NewDefaultKubectlCommand()
	if err := cli.RunNoErrOutput(command); err != nil {
		util.CheckErr(err)
	}
}
