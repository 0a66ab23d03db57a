package kinformer

import (
	"context"
	"errors"
	"slices"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

func TestBackoffTimingAgainstFailingList(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		unavailable := apierrors.NewServiceUnavailable("down")
		s.listErrs = []error{unavailable, unavailable, unavailable, unavailable, unavailable}
		inf := New[*corev1.ConfigMap](s, nil) // default backoff
		start := time.Now()
		var at []time.Duration
		inf.AddEventHandler(Error, func(cmEvent) { at = append(at, time.Since(start)) })
		inf.Start()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		synced := time.Since(start)
		inf.Stop()
		// Failures at 0, then waits of ≤0.8, ≤1.6, ≤3.2, ≤6.4 s (minus up to
		// 25% jitter) before the 6th list succeeds.
		lo := 0.75 * (0.8 + 1.6 + 3.2 + 6.4 + 12.8)
		hi := 0.8 + 1.6 + 3.2 + 6.4 + 12.8
		if synced.Seconds() < lo || synced.Seconds() > hi {
			t.Fatalf("synced after %v, want within [%.1fs, %.1fs] of backoff", synced, lo, hi)
		}
		if len(at) != 5 {
			t.Fatalf("%d error events, want 5", len(at))
		}
		for i := 1; i < len(at); i++ {
			gap := at[i] - at[i-1]
			want := time.Duration(800<<(i-1)) * time.Millisecond
			if gap > want || gap < want*3/4 {
				t.Errorf("gap %d = %v, want in [%v, %v]", i, gap, want*3/4, want)
			}
		}
	})
}

func TestWatchFailuresBackOff(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](s, nil)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		s.mu.Lock()
		for range 4 {
			s.watchErrs = append(s.watchErrs, errors.New("connection refused"))
		}
		s.mu.Unlock()
		time.Sleep(2 * time.Second) // a healthy watch, then the server ends it
		s.closeWatches()
		// Reconnect at once (a normal end), then 4 failures spaced by
		// backoff waits of 0.6-0.8, 1.2-1.6, 2.4-3.2 and 4.8-6.4 s: the
		// successful 6th watch comes between 9 and 12 s later.
		time.Sleep(8900 * time.Millisecond)
		synctest.Wait()
		if _, w := s.counts(); w >= 6 {
			t.Fatalf("after 8.9 s: %d watch calls; backoff too short", w)
		}
		time.Sleep(3200 * time.Millisecond)
		synctest.Wait()
		if _, w := s.counts(); w != 6 || s.openWatches() != 1 {
			t.Fatalf("after 12.1 s: %d watch calls (%d open), want 6 with 1 open", w, s.openWatches())
		}
		if l, _ := s.counts(); l != 1 {
			t.Fatalf("watch failures caused a re-list")
		}
	})
}

func TestResyncRelistsOnItsOwnClock(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{ResyncPeriod: time.Minute})
		rec := &recorder{}
		inf.AddHandler(rec.handle)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		// Quiet cluster: nothing arrives, yet a re-list happens every minute
		// (less up to a tenth: jittered).
		time.Sleep(53 * time.Second)
		synctest.Wait()
		if l, _ := s.counts(); l != 1 {
			t.Fatalf("re-listed before the period: %d lists", l)
		}
		time.Sleep(8 * time.Second)
		synctest.Wait()
		if l, _ := s.counts(); l != 2 {
			t.Fatalf("after 61 s of quiet: %d lists, want 2", l)
		}
		// Busy cluster: an event every 10 s does not postpone the resync.
		for range 6 {
			time.Sleep(10 * time.Second)
			s.put(cm("ns", "a", "t", time.Now().String()))
		}
		synctest.Wait()
		if l, _ := s.counts(); l != 3 {
			t.Fatalf("after 2 min with events: %d lists, want 3", l)
		}
		// Unchanged objects fire nothing on re-list: only the 6 updates.
		if n := len(rec.lines(false, Modified)); n != 6 {
			t.Fatalf("%d MODIFIED events, want 6 (resync must not fire for unchanged objects)", n)
		}
		// A change the watch missed is found by the resync.
		s.mu.Lock()
		s.objs["ns/missed"] = cm("ns", "missed")
		s.objs["ns/missed"].ResourceVersion = "999"
		s.mu.Unlock()
		time.Sleep(time.Minute)
		synctest.Wait()
		if _, ok := inf.Cache().GetByKey("ns/missed"); !ok {
			t.Fatal("resync did not find an object the watch missed")
		}
	})
}

func TestIdleWatchIsDropped(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{WatchTimeout: time.Minute, IdleMargin: 10 * time.Second})
		rec := &recorder{}
		inf.AddEventHandler(Error, rec.handle)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		_, watches := s.calls()
		secs := *watches[0].TimeoutSeconds
		if secs < 60 || secs >= 120 {
			t.Fatalf("server timeout %d s, want in [60, 120)", secs)
		}
		// The fake server never closes watches by itself: it behaves like
		// a connection that silently died.
		time.Sleep(time.Duration(secs)*time.Second + 9*time.Second)
		synctest.Wait()
		if _, w := s.counts(); w != 1 {
			t.Fatalf("watch dropped before timeout+margin: %d watches", w)
		}
		time.Sleep(2 * time.Second)
		synctest.Wait()
		time.Sleep(time.Second) // the backoff after the idle drop
		synctest.Wait()
		if _, w := s.counts(); w != 2 {
			t.Fatalf("idle watch not replaced: %d watches", w)
		}
		if errs := rec.all(); len(errs) != 1 || !errors.Is(errs[0].Err, ErrIdle) {
			t.Fatalf("want one ErrIdle event, got %v", errs)
		}
		// Bookmarks keep a watch alive.
		for range 10 {
			time.Sleep(time.Minute)
			s.bookmark()
		}
		synctest.Wait()
		if _, w := s.counts(); w != 2 {
			t.Fatalf("a watch receiving bookmarks was dropped: %d watches", w)
		}
	})
}

// closingServer accepts every watch and closes it at once, like a server
// shutting down: the informer must not spin.
type closingServer struct{ *fakeServer }

func (c closingServer) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	w, err := c.fakeServer.Watch(ctx, opts)
	if err == nil {
		w.Stop()
	}
	return w, err
}

func TestWatchClosedAtOnceIsNotAHotLoop(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](closingServer{s}, nil)
		inf.Start()
		defer inf.Stop()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		// Waits 0.6-0.8, 1.2-1.6, 2.4-3.2, 4.8-6.4 s: at most 5 watches in 10 s.
		if _, w := s.counts(); w < 3 || w > 5 {
			t.Fatalf("%d watches in 10 s against a server closing them at once", w)
		}
	})
}

func TestResyncRunsAfterRestartWithKeptCache(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{ResyncPeriod: time.Minute})
		inf.Start()
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatal(err)
		}
		inf.Stop()
		inf.Start() // resumes the watch: no list now
		defer inf.Stop()
		synctest.Wait()
		if l, _ := s.counts(); l != 1 {
			t.Fatalf("restart re-listed: %d lists", l)
		}
		time.Sleep(61 * time.Second)
		synctest.Wait()
		if l, _ := s.counts(); l != 2 {
			t.Fatalf("no resync a period after the restart: %d lists", l)
		}
	})
}

func TestWaitForSyncForgetsA403AfterOtherErrors(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		forbidden := apierrors.NewForbidden(cmResource, "", errors.New("nope"))
		s.listErrs = []error{forbidden, errors.New("connection refused")}
		inf := New[*corev1.ConfigMap](s, nil)
		inf.Start()
		defer inf.Stop()
		synctest.Wait()
		if err := inf.WaitForSync(bounded(t)); !apierrors.IsForbidden(err) {
			t.Fatalf("WaitForSync = %v, want the 403", err)
		}
		time.Sleep(time.Second) // first backoff: now the connection error
		synctest.Wait()
		// The latest failure is transient: WaitForSync waits, and the next
		// list succeeds.
		if err := inf.WaitForSync(bounded(t)); err != nil {
			t.Fatalf("WaitForSync = %v, want nil after recovery", err)
		}
	})
}

// tooLargeServer answers every watch with 504 "too large resource version",
// like a server whose watch cache lags etcd.
type tooLargeServer struct{ *fakeServer }

func (t tooLargeServer) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	err := apierrors.NewTimeoutError("Too large resource version: 100, current: 5", 1)
	err.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge}}
	t.fakeServer.Watch(ctx, opts) // counted
	return nil, err
}

func TestRepeated504DoesNotStormRelists(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		inf := New[*corev1.ConfigMap](tooLargeServer{s}, &Options[*corev1.ConfigMap]{DisableStreamingList: true})
		inf.Start()
		defer inf.Stop()
		time.Sleep(10 * time.Second)
		synctest.Wait()
		// Re-lists after backoffs of 0.6-0.8, 1.2-1.6, 2.4-3.2, 4.8-6.4 s.
		if l, _ := s.counts(); l < 3 || l > 5 {
			t.Fatalf("%d lists in 10 s against a server answering every watch with 504", l)
		}
	})
}

// A watch that still delivers ten seconds after it opened resets the
// backoff: faults a minute apart each start from the first wait, instead
// of each waiting longer than the last (up to Max) until ResetAfter.
func TestBackoffResetsAfterAHealthyWatch(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := syncedWithDefaults(t)
		growBackoff(t, s)
		// A healthy watch: events 5 and 11 s after it opened.
		time.Sleep(5 * time.Second)
		s.put(cm("ns", "a", "t", "1"))
		time.Sleep(6 * time.Second)
		s.put(cm("ns", "a", "t", "2"))
		synctest.Wait()
		// The next failure waits the first wait again, not 12.8 s.
		s.mu.Lock()
		s.watchErrs = append(s.watchErrs, errors.New("connection refused"))
		s.mu.Unlock()
		s.closeWatches()
		time.Sleep(900 * time.Millisecond)
		synctest.Wait()
		if _, w := s.counts(); w != 8 || s.openWatches() != 1 {
			t.Fatalf("0.9 s after a failure that followed a healthy watch: %d watch calls (%d open), want 8 with 1 open", w, s.openWatches())
		}
	})
}

// syncedWithDefaults starts an informer with the default options on a
// fake server holding ns/a, waits until it has synced and is idle, and
// returns the server; the informer stops when the test ends.
func syncedWithDefaults(t *testing.T) *fakeServer {
	t.Helper()
	s := newFakeServer()
	s.put(cm("ns", "a"))
	inf := New[*corev1.ConfigMap](s, nil) // default backoff
	inf.Start()
	t.Cleanup(inf.Stop)
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	synctest.Wait()
	return s
}

// growBackoff makes four watch calls fail after a short watch, so that the
// next failure would wait 12.8 s (minus jitter); it returns once the sixth
// watch is open.
func growBackoff(t *testing.T, s *fakeServer) {
	t.Helper()
	time.Sleep(2 * time.Second)
	s.mu.Lock()
	for range 4 {
		s.watchErrs = append(s.watchErrs, errors.New("connection refused"))
	}
	s.mu.Unlock()
	s.closeWatches()
	time.Sleep(13 * time.Second)
	synctest.Wait()
	if _, w := s.counts(); w != 6 || s.openWatches() != 1 {
		t.Fatalf("after the failures: %d watch calls (%d open), want 6 with 1 open", w, s.openWatches())
	}
}

// clientDecodingError is the ERROR event client-go's watch makes itself
// when its connection breaks under it (not the server's answer).
func clientDecodingError(msg string) watch.Event {
	return watch.Event{Type: watch.Error, Object: apierrors.NewClientErrorReporter(500, "GET", "ClientWatchDecoding").AsObject(errors.New(msg))}
}

// A connection lost under a live watch (it delivered events after its
// catch-up) resumes without the wait the backoff had grown to; a watch
// broken before it was live, or ended by the server's own ERROR, still
// waits the grown backoff.
func TestConnectionLostUnderALiveWatchDoesNotAddUp(t *testing.T) {
	for _, tc := range []struct {
		name      string
		eventAt   time.Duration // after the watch opened; 0: none
		breakWith watch.Event
		resumed   bool // within the first wait (0.8 s)
	}{
		{"live watch, connection reset", 2 * time.Second, clientDecodingError("read tcp: connection reset by peer"), true},
		{"live watch, connection lost", 3 * time.Second, clientDecodingError("http2: client connection lost"), true},
		{"broken during its catch-up", 0, clientDecodingError("read tcp: connection reset by peer"), false},
		{"live watch, the server's ERROR", 2 * time.Second, watch.Event{Type: watch.Error, Object: &apierrors.NewInternalError(errors.New("etcdserver: leader changed")).ErrStatus}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := syncedWithDefaults(t)
				growBackoff(t, s)
				if tc.eventAt > 0 {
					time.Sleep(tc.eventAt)
					s.put(cm("ns", "a", "t", "1"))
					synctest.Wait()
				} else {
					time.Sleep(500 * time.Millisecond)
				}
				s.sendRaw(tc.breakWith)
				time.Sleep(800 * time.Millisecond)
				synctest.Wait()
				_, w := s.counts()
				if tc.resumed && (w != 7 || s.openWatches() != 1) {
					t.Fatalf("0.8 s after the connection of a live watch broke: %d watch calls (%d open), want 7 with 1 open", w, s.openWatches())
				}
				if !tc.resumed && w != 6 {
					t.Fatalf("0.8 s after the break: %d watch calls, want 6 (the grown backoff)", w)
				}
				if !tc.resumed {
					return
				}
				// The level was not advanced: the next failure waits the
				// first wait, then 1.6 s.
				s.mu.Lock()
				s.watchErrs = append(s.watchErrs, errors.New("connection refused"))
				s.mu.Unlock()
				time.Sleep(time.Second) // not live: the next is a failure
				s.sendRaw(clientDecodingError("read tcp: connection reset by peer"))
				time.Sleep(800 * time.Millisecond)
				synctest.Wait()
				if _, w := s.counts(); w != 8 {
					t.Fatalf("0.8 s after a second break: %d watch calls, want 8", w)
				}
				time.Sleep(1600 * time.Millisecond)
				synctest.Wait()
				if _, w := s.counts(); w != 9 || s.openWatches() != 1 {
					t.Fatalf("1.6 s after the refused reconnect: %d watch calls (%d open), want 9 with 1 open", w, s.openWatches())
				}
			})
		})
	}
}

// The informers of a process whose connections broke together do not come
// back in one instant: each resumes at a random point of the first wait.
func TestConnectionLostResumesSpreadOut(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		const n = 20
		listers := make([]*contractTimedLister, n)
		for i := range listers {
			s := newFakeServer()
			s.put(cm("ns", "a"))
			listers[i] = &contractTimedLister{fakeServer: s}
			inf := New[*corev1.ConfigMap](listers[i], &Options[*corev1.ConfigMap]{DisableStreamingList: true})
			inf.Start()
			defer inf.Stop()
			if err := inf.WaitForSync(bounded(t)); err != nil {
				t.Fatal(err)
			}
		}
		time.Sleep(2 * time.Second)
		for _, l := range listers {
			l.put(cm("ns", "a", "t", "1")) // live
		}
		synctest.Wait()
		broke := time.Now()
		for _, l := range listers {
			l.sendRaw(clientDecodingError("http2: client connection lost"))
		}
		time.Sleep(time.Second)
		synctest.Wait()
		var at []time.Duration
		for i, l := range listers {
			l.mu.Lock()
			last := l.watchAt[len(l.watchAt)-1]
			l.mu.Unlock()
			d := last.Sub(broke)
			if d < 0 || d >= 800*time.Millisecond {
				t.Fatalf("informer %d resumed %v after the break, want within [0, 800ms)", i, d)
			}
			at = append(at, d)
		}
		slices.Sort(at)
		if spread := at[n-1] - at[0]; spread < 400*time.Millisecond {
			t.Fatalf("%d informers resumed within %v of each other (%v): not spread over the first wait", n, spread, at)
		}
	})
}

// Once the server has sent a bookmark on its own, a watch silent for
// heartbeatSilence is taken for dead and resumed (over HTTP/1.1 nothing
// else finds it within the watch's 5-10 minute timeout); a server that
// sends none keeps the watch open until its timeout.
func TestHeartbeatDeadline(t *testing.T) {
	for _, tc := range []struct {
		name     string
		bookmark time.Duration // after the watch opened; 0: none
		dropped  bool
	}{
		{"heartbeat heard", 30 * time.Second, true},
		{"no bookmark", 0, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			synctest.Test(t, func(t *testing.T) {
				s := newFakeServer()
				s.put(cm("ns", "a"))
				inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{WatchTimeout: 5 * time.Minute, ProbeAfter: -1})
				var errs []error
				inf.AddEventHandler(Error, func(e cmEvent) { errs = append(errs, e.Err) })
				inf.Start()
				defer inf.Stop()
				if err := inf.WaitForSync(bounded(t)); err != nil {
					t.Fatal(err)
				}
				synctest.Wait()
				opened := time.Now()
				if tc.bookmark > 0 {
					time.Sleep(tc.bookmark)
					s.bookmark()
					synctest.Wait()
				}
				// Silent from here: 80 s after the bookmark the watch is
				// dead, not before.
				time.Sleep(heartbeatSilence - time.Second)
				synctest.Wait()
				if _, w := s.counts(); w != 1 {
					t.Fatalf("%v after the watch opened: %d watch calls, want 1", time.Since(opened), w)
				}
				time.Sleep(2*time.Second + DefaultBackoff().Initial)
				synctest.Wait()
				_, w := s.counts()
				if tc.dropped && (w != 2 || s.openWatches() != 1 || len(errs) != 1 || !errors.Is(errs[0], ErrIdle)) {
					t.Fatalf("%v after the heartbeat: %d watch calls (%d open), errors %v; want the watch resumed after an ErrIdle", time.Since(opened)-tc.bookmark, w, s.openWatches(), errs)
				}
				if tc.dropped {
					// The new watch has had no bookmark (on a resource that
					// does not move the server sends none): it keeps the
					// idle deadline, however long it is quiet.
					time.Sleep(3 * heartbeatSilence)
					synctest.Wait()
					if _, w := s.counts(); w != 2 || len(errs) != 1 {
						t.Fatalf("a quiet watch that had no bookmark: %d watch calls, errors %v after %v; want it kept", w, errs, 3*heartbeatSilence)
					}
				}
				if !tc.dropped && (w != 1 || len(errs) != 0) {
					t.Fatalf("%v after the watch opened, without any bookmark: %d watch calls, errors %v; want the watch kept", time.Since(opened), w, errs)
				}
			})
		})
	}
}

// A restored informer that re-lists (its state file older than the
// server's history: 410) does it with a watch-list that has the time to
// send every object: the server-side timeout of a plain watch, not the
// catch-up watch's one second (with which 20,000 objects failed again and
// again on a loaded server).
func TestRelistAfterRestoreHasTime(t *testing.T) {
	s := newFakeServer()
	s.streaming = true
	s.put(cm("ns", "a"))
	s.put(cm("ns", "b"))
	opts := func() *Options[*corev1.ConfigMap] {
		return &Options[*corev1.ConfigMap]{StateDir: t.TempDir() + "/state", StateKey: "fake configmaps", StateInterval: time.Millisecond}
	}
	o := opts()
	first := New[*corev1.ConfigMap](s, o)
	first.Start()
	if err := first.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	first.Stop()
	s.put(cm("ns", "c"))
	s.compact()
	o2 := opts()
	o2.StateDir = o.StateDir
	second := New[*corev1.ConfigMap](s, o2)
	second.Start()
	defer second.Stop()
	if err := second.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	s.mu.Lock()
	streams := append([]metav1.ListOptions(nil), s.streams...)
	s.mu.Unlock()
	if len(streams) < 2 {
		t.Fatalf("%d watch-lists, want the first informer's and the re-list's", len(streams))
	}
	last := streams[len(streams)-1]
	if last.TimeoutSeconds == nil || *last.TimeoutSeconds < int64(defaultWatchTimeout/time.Second) {
		t.Fatalf("the re-list's watch-list asked for a timeout of %v s, want a plain watch's (at least %v)", ptrValue(last.TimeoutSeconds), defaultWatchTimeout)
	}
}

func ptrValue(p *int64) any {
	if p == nil {
		return nil
	}
	return *p
}
