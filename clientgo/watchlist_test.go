package clientgo_test

import (
	"context"
	"errors"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/fields"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/clientgo"
)

// noWatchList is a ListerWatcher in front of a real one that answers every
// watch-list (sendInitialEvents) with an error, as a proxy or a partial
// server may; lists and plain watches go through.
type noWatchList struct {
	cache.ListerWatcher
	mu         sync.Mutex
	watchLists int
}

func (n *noWatchList) Watch(opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents != nil && *opts.SendInitialEvents {
		n.mu.Lock()
		n.watchLists++
		n.mu.Unlock()
		return nil, errors.New("proxy: streaming lists are not supported here")
	}
	return n.ListerWatcher.Watch(opts)
}

// A ListerWatcher whose watch-lists fail syncs by a plain LIST at once, as
// client-go's reflector does, then watches; a later re-list tries a
// watch-list again.
func TestWatchListFailureFallsBackToList(t *testing.T) {
	_, cs, ns := clients(t)
	create(t, cs, pod(ns, "a", "n1", nil))
	lw := &noWatchList{ListerWatcher: cache.NewListWatchFromClient(cs.CoreV1().RESTClient(), "pods", ns, fields.Everything())}
	sii := clientgo.NewSharedIndexInformer(lw, &corev1.Pod{}, 0, nil)
	h := &handler{}
	if _, err := sii.AddEventHandler(h); err != nil {
		t.Fatal(err)
	}
	run(t, sii)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if !cache.WaitForCacheSync(ctx.Done(), sii.HasSynced) {
		t.Fatal("not synced in 20s over a ListerWatcher whose watch-lists fail")
	}
	lw.mu.Lock()
	tried := lw.watchLists
	lw.mu.Unlock()
	if tried == 0 {
		t.Fatal("no watch-list was tried: the test shows nothing")
	}
	if c := h.find("add", ns+"/a"); len(c) != 1 || !c[0].initial {
		t.Fatalf("OnAdd(a): %+v, want one in the initial list", c)
	}
	create(t, cs, pod(ns, "b", "n1", nil))
	eventually(t, "the watched add", func() bool { return len(h.find("add", ns+"/b")) == 1 })
}
