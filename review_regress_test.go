package kinformer

import (
	"fmt"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
)

// Registrations added while the first list completes all become synced:
// each is either marked by the list or finds the informer synced.
func TestHasSyncedAroundTheFirstList(t *testing.T) {
	for iter := range 20 {
		s := newFakeServer()
		for i := range 50 {
			s.put(cm("ns", fmt.Sprintf("o%d", i)))
		}
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		var regs []*Registration
		for !inf.HasSynced() {
			regs = append(regs, inf.AddHandler(func(cmEvent) {}))
		}
		regs = append(regs, inf.AddHandler(func(cmEvent) {}))
		eventually(t, fmt.Sprintf("iteration %d: %d registrations synced", iter, len(regs)), func() bool {
			for _, r := range regs {
				if !r.HasSynced() {
					return false
				}
			}
			return true
		})
		inf.Stop()
	}
}

// A handler that stops its informer and starts it again does not
// deadlock: the Start is ignored (the stop waits for that very handler).
func TestStopAndStartFromAHandler(t *testing.T) {
	s := newFakeServer()
	inf, _ := startInformer(t, s, nil)
	returned := make(chan struct{})
	inf.AddEventHandler(Added, func(e cmEvent) {
		if e.Object.Name == "restart" {
			inf.Stop()
			inf.Start()
			close(returned)
		}
	})
	s.put(cm("ns", "restart"))
	select {
	case <-returned:
	case <-time.After(30 * time.Second):
		t.Fatal("Stop and Start from a handler deadlocked")
	}
	<-inf.RequestStop()
}

// OldestPending counts the event being handled (a stuck handler shows its
// lag) and is 0 once the registration is removed; a removed registration
// counts as synced (no one waits for it forever).
func TestOldestPendingAndRemoval(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		release := make(chan struct{})
		reg := inf.AddHandler(func(e cmEvent) {
			if e.Type == Added {
				<-release
			}
		})
		s.put(cm("ns", "a"))
		synctest.Wait()
		time.Sleep(5 * time.Second)
		if p, d := reg.Pending(), reg.OldestPending(); p != 1 || d < 5*time.Second {
			t.Fatalf("a handler stuck on its only event: pending %d, oldest %v", p, d)
		}
		s.put(cm("ns", "b"))
		synctest.Wait()
		removed := make(chan struct{})
		go func() { inf.RemoveEventHandler(reg); close(removed) }()
		synctest.Wait()
		close(release)
		<-removed
		synctest.Wait()
		time.Sleep(time.Second)
		if d := reg.OldestPending(); d != 0 {
			t.Fatalf("OldestPending %v after removal", d)
		}
		if !reg.HasSynced() {
			t.Fatal("a removed registration never syncs")
		}
	})
}
