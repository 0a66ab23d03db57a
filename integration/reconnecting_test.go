package integration

import (
	"strings"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"

	"github.com/kinformer/kinformer"
	"github.com/kinformer/kinformer/internal/testenv"
)

// Informer.Reconnecting: false while the watch works; true, since about
// when the connection was cut, while the informer cannot get a watch
// back (the way to the server holds every connection); false again once
// the way is back and a watch works, with the changes made meanwhile.
func TestReconnectingIsReported(t *testing.T) {
	srv := testenv.Shared(t)
	admin := clientset(t, srv.Config())
	ns := testenv.NewNamespace(t, srv.Config())
	mustCreate(t, admin, configMap(ns, "marker", nil, "0"))
	p := newFaultProxy(t, strings.TrimPrefix(srv.Host(), "https://"))
	defer p.close()
	inf := kinformer.New[*corev1.ConfigMap](clientset(t, p.config(t, srv.Config())).CoreV1().ConfigMaps(ns), nil)
	inf.Start()
	defer inf.Stop()
	if err := inf.WaitForSync(bounded(t, callTimeout)); err != nil {
		t.Fatal(err)
	}
	if r, since := inf.Reconnecting(); r {
		t.Fatalf("reconnecting since %s right after the sync", since)
	}
	cutAt := time.Now()
	p.hold()
	p.cut()
	eventually(t, callTimeout, "Reconnecting after the cut", func() bool {
		r, _ := inf.Reconnecting()
		return r
	})
	if _, since := inf.Reconnecting(); since.Before(cutAt) || since.After(time.Now()) {
		t.Errorf("reconnecting since %s; the cut was at %s", since, cutAt)
	}
	// While the way holds every connection, the informer stays so.
	time.Sleep(2 * time.Second)
	if r, _ := inf.Reconnecting(); !r {
		t.Fatal("not reconnecting while no connection gets through")
	}
	mustUpdate(t, admin, ns, "marker", "1")
	p.release(true)
	eventually(t, callTimeout, "the update made while the way was held, and Reconnecting false", func() bool {
		cm, ok := inf.Cache().GetByKey(ns + "/marker")
		r, _ := inf.Reconnecting()
		return ok && cm.Data["v"] == "1" && !r
	})
}
