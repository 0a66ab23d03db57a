package kinformer_test

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/client-go/kubernetes/fake"

	"github.com/kinformer/kinformer"
)

// ordinal is a Sharder without Leases: replica i of n (the ordinal of a
// StatefulSet's pod) serves every slot s of 4096 with s%n == i, for good.
type ordinal struct{ i, n int }

func (o ordinal) Subscribe() kinformer.ShareSubscription { return o }

func (o ordinal) Share() (kinformer.Share, <-chan struct{}) {
	share := kinformer.Share{Version: 1, Total: 4096}
	for s := o.i; s < share.Total; s += o.n {
		share.Slots = append(share.Slots, s)
	}
	return share, nil // a nil channel: the share never changes
}

func (ordinal) Ack(uint64)  {}
func (ordinal) Valid() bool { return true }
func (ordinal) Close()      {}

// A static sharding: each of 3 replicas caches and handles about a third
// of the ConfigMaps, by the hash of their uids. (Package sharding is the Sharder
// whose replicas come and go, on Leases.)
func ExampleSharder() {
	var cms []runtime.Object
	for i := range 300 {
		h := sha256.Sum256([]byte{byte(i), byte(i >> 8)}) // uids as random as the API server's
		uid := fmt.Sprintf("%x-%x-%x-%x-%x", h[0:4], h[4:6], h[6:8], h[8:10], h[10:16])
		cms = append(cms, &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{Namespace: "default",
			Name: fmt.Sprint("cm-", i), UID: types.UID(uid)}})
	}
	clientset := fake.NewClientset(cms...)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	total := 0
	for i := range 3 {
		inf := kinformer.New[*corev1.ConfigMap](clientset.CoreV1().ConfigMaps("default"),
			&kinformer.Options[*corev1.ConfigMap]{Sharding: ordinal{i, 3}})
		go inf.Run(ctx)
		if err := inf.WaitForSync(ctx); err != nil {
			panic(err)
		}
		total += inf.Cache().Len()
		fmt.Printf("replica %d: %d ConfigMaps\n", i, inf.Cache().Len())
		inf.Stop()
	}
	fmt.Println("in all:", total)
	// Output:
	// replica 0: 96 ConfigMaps
	// replica 1: 96 ConfigMaps
	// replica 2: 108 ConfigMaps
	// in all: 300
}
