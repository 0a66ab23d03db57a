// Command etcd is the stock etcd server of go.etcd.io/etcd/server/v3 v3.7.0
// (the etcd version kubernetes v1.37.2 uses), built from this module so that
// it shares localapi's dependencies and build cache. Like etcd's own main.go
// it only calls etcdmain.Main. Tests that start their own etcd (envtest,
// through KUBEBUILDER_ASSETS) use it. hack/envtest-assets.sh builds it.
package main

import (
	"os"

	"go.etcd.io/etcd/server/v3/etcdmain"
)

func main() {
	etcdmain.Main(os.Args)
}
