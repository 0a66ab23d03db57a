package kinformer

// Contract tests that involve time or "never": run in a synctest bubble,
// where the clock is fake and synctest.Wait says when every goroutine has
// done all it will do.

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"sync/atomic"
	"testing"
	"testing/synctest"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"
)

// contractTimedLister records when each List and plain Watch call is made.
type contractTimedLister struct {
	*fakeServer
	mu      sync.Mutex // guards at and watchAt
	at      []time.Time
	watchAt []time.Time
}

func (l *contractTimedLister) List(ctx context.Context, opts metav1.ListOptions) (*corev1.ConfigMapList, error) {
	l.mu.Lock()
	l.at = append(l.at, time.Now())
	l.mu.Unlock()
	return l.fakeServer.List(ctx, opts)
}

func (l *contractTimedLister) Watch(ctx context.Context, opts metav1.ListOptions) (watch.Interface, error) {
	if opts.SendInitialEvents == nil { // a plain watch, not a streaming list
		l.mu.Lock()
		l.watchAt = append(l.watchAt, time.Now())
		l.mu.Unlock()
	}
	return l.fakeServer.Watch(ctx, opts)
}

// Backoff.Jitter shortens each wait by a random fraction of up to Jitter:
// with Jitter 0.5 every wait is in [d/2, d] of the un-jittered schedule d,
// and informers failing together do not all retry on that schedule.
func TestContractBackoffJitterSpreadsRetries(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		policy := Backoff{Initial: time.Second, Max: 8 * time.Second, Factor: 2, Jitter: 0.5, ResetAfter: time.Hour}
		schedule := []time.Duration{time.Second, 2 * time.Second, 4 * time.Second, 8 * time.Second, 8 * time.Second}
		listers := make([]*contractTimedLister, 8)
		for i := range listers {
			s := newFakeServer()
			s.put(cm("ns", "a"))
			for range schedule {
				s.listErrs = append(s.listErrs, apierrors.NewServiceUnavailable("down"))
			}
			listers[i] = &contractTimedLister{fakeServer: s}
			inf := New[*corev1.ConfigMap](listers[i], &Options[*corev1.ConfigMap]{Backoff: policy, DisableStreamingList: true})
			inf.Start()
			defer inf.Stop()
		}
		time.Sleep(time.Minute) // far more than the 23 s of the whole schedule
		synctest.Wait()
		var waits, unjittered, deep int
		for i, l := range listers {
			l.mu.Lock()
			at := l.at
			l.mu.Unlock()
			if len(at) != len(schedule)+1 {
				t.Fatalf("informer %d listed %d times, want %d failures and a success", i, len(at), len(schedule))
			}
			for j, d := range schedule {
				got := at[j+1].Sub(at[j])
				if got < d/2 || got > d {
					t.Errorf("informer %d, wait %d: %v, want in [%v, %v]", i, j, got, d/2, d)
				}
				waits++
				if got == d {
					unjittered++
				}
				if got < d*3/4 {
					deep++
				}
			}
		}
		if unjittered == waits {
			t.Fatalf("all %d waits are the un-jittered schedule: Jitter ignored", waits)
		}
		// Uniform in [d/2, d]: about half are shortened by more than a
		// quarter (none of 40 by chance: 1 in 10^12).
		if deep == 0 {
			t.Fatalf("none of %d waits is shortened by more than 25%%: Jitter 0.5 not applied", waits)
		}
	})
}

// After RemoveEventHandler returns, the handler is never called again:
// its queued events, a backlog behind a slow call, are dropped, not
// delivered; the call in progress completes.
func TestContractRemovedHandlerIsNeverCalledAgain(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		for i := range 20 {
			s.put(cm("ns", fmt.Sprintf("old-%02d", i)))
		}
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		release := make(chan struct{})
		var once sync.Once
		defer func() {
			once.Do(func() { close(release) })
			inf.Stop()
		}()
		inf.Start()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		var calls atomic.Int32
		reg := inf.AddHandler(func(cmEvent) {
			if calls.Add(1) == 1 {
				<-release
			}
		})
		synctest.Wait() // busy with the first of the 20 replayed objects
		for i := range 30 {
			s.put(cm("ns", fmt.Sprintf("new-%02d", i)))
		}
		synctest.Wait()
		if n, p := calls.Load(), reg.Pending(); n != 1 || p != 50 {
			t.Fatalf("before removal: %d calls, %d pending; want 1 and 50", n, p)
		}
		removed := make(chan struct{})
		go func() {
			inf.RemoveEventHandler(reg)
			close(removed)
		}()
		synctest.Wait()
		if p := reg.Pending(); p != 0 {
			t.Errorf("%d events still pending after removal", p)
		}
		select {
		case <-removed:
			t.Fatal("RemoveEventHandler returned while the handler was still running")
		default:
		}
		once.Do(func() { close(release) })
		synctest.Wait()
		select {
		case <-removed:
		default:
			t.Fatal("RemoveEventHandler did not return once the handler's call ended")
		}
		s.put(cm("ns", "later"))
		synctest.Wait()
		if n := calls.Load(); n != 1 {
			t.Fatalf("the removed handler was called %d more times", n-1)
		}
	})
}

// With the default Options, every watch asks the server for a timeout in
// [5 min, 10 min), and a watch on which nothing arrives (a connection that
// died silently) is dropped 30 s after that timeout, and resumed.
func TestContractDefaultWatchTimeoutAndIdleMargin(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		l := &contractTimedLister{fakeServer: s}
		inf := New[*corev1.ConfigMap](l, nil)
		rec := &recorder{}
		inf.AddEventHandler(Error, rec.handle)
		inf.Start()
		defer inf.Stop()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		synctest.Wait()
		for i := range 4 {
			_, watches := s.calls()
			if len(watches) != i+1 || s.openWatches() != 1 {
				t.Fatalf("round %d: %d watches (%d open), want %d (1 open)", i, len(watches), s.openWatches(), i+1)
			}
			secs := watches[i].TimeoutSeconds
			if secs == nil || *secs < 300 || *secs >= 600 {
				t.Fatalf("watch %d asked for timeoutSeconds %s, want in [300, 600)", i, contractSeconds(secs))
			}
			// The fake server never ends a watch by itself.
			l.mu.Lock()
			opened := l.watchAt[i]
			l.mu.Unlock()
			time.Sleep(time.Until(opened.Add(time.Duration(*secs)*time.Second + 29*time.Second)))
			synctest.Wait()
			if _, w := s.counts(); w != i+1 || len(rec.all()) != i {
				t.Fatalf("round %d: dropped before timeout + 30 s (%d watches, %d errors)", i, w, len(rec.all()))
			}
			time.Sleep(2 * time.Second)
			synctest.Wait()
			if errs := rec.all(); len(errs) != i+1 || !errors.Is(errs[i].Err, ErrIdle) {
				t.Fatalf("round %d: errors %v, want an ErrIdle by timeout + 31 s", i, errs)
			}
			time.Sleep(time.Second) // the first backoff wait (≤ 0.8 s: the last failure is minutes old)
			synctest.Wait()
		}
		if l, _ := s.counts(); l != 1 {
			t.Fatalf("idle watches caused %d re-lists", l-1)
		}
	})
}

// Stop waits for handler calls in progress: it does not return while a
// handler is blocked, and returns once the handler has.
func TestContractStopWaitsForHandlerInProgress(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		release := make(chan struct{})
		var handlerReturned atomic.Bool
		inf.AddEventHandler(Added, func(cmEvent) {
			<-release
			handlerReturned.Store(true)
		})
		inf.Start()
		if err := inf.WaitForSync(t.Context()); err != nil {
			t.Fatal(err)
		}
		s.put(cm("ns", "a"))
		synctest.Wait() // the handler is blocked on release
		stopped := make(chan bool, 1)
		go func() {
			inf.Stop()
			stopped <- handlerReturned.Load()
		}()
		synctest.Wait()
		select {
		case <-stopped:
			close(release)
			t.Fatal("Stop returned while a handler call was in progress")
		default:
		}
		close(release)
		if returned := <-stopped; !returned {
			t.Error("Stop returned before the handler did")
		}
	})
}

// ResendEvery: the informer's own run resends its cache to a handler every
// period from the first sync; a handler scheduled while it runs starts at
// once; a removed one, a stopped informer and a period of 0 resend
// nothing more; the schedules come back with the next run.
func TestContractResendEvery(t *testing.T) {
	synctest.Test(t, func(t *testing.T) {
		s := newFakeServer()
		s.put(cm("ns", "a"))
		s.put(cm("ns", "b"))
		inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		var mu sync.Mutex
		resent := map[string]int{}
		handler := func(name string) func(Event[*corev1.ConfigMap]) {
			return func(e Event[*corev1.ConfigMap]) {
				if e.Cause == CauseResend {
					mu.Lock()
					resent[name]++
					mu.Unlock()
				}
			}
		}
		count := func(name string) int {
			synctest.Wait()
			mu.Lock()
			defer mu.Unlock()
			return resent[name]
		}
		early := inf.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Modified: handler("early")})
		inf.ResendEvery(early, 10*time.Second)
		inf.Start()
		time.Sleep(25 * time.Second)
		if n := count("early"); n != 4 { // 2 objects at 10 s and 20 s
			t.Fatalf("early handler: %d resent after 25 s every 10 s, want 4", n)
		}
		late := inf.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Modified: handler("late")})
		inf.ResendEvery(late, 20*time.Second)
		time.Sleep(21 * time.Second)
		if n := count("late"); n != 2 {
			t.Fatalf("handler scheduled while running: %d resent after 21 s every 20 s, want 2", n)
		}
		inf.RemoveEventHandler(late)
		inf.ResendEvery(early, 0)
		before := count("early")
		time.Sleep(time.Minute)
		if n := count("early"); n != before || count("late") != 2 {
			t.Fatalf("after a period of 0 and a removal: early %d (was %d), late %d (was 2)", n, before, count("late"))
		}
		inf.ResendEvery(early, 10*time.Second)
		inf.Stop()
		before = count("early")
		time.Sleep(time.Minute)
		if n := count("early"); n != before {
			t.Fatalf("stopped informer resent %d", n-before)
		}
		inf.Start()
		defer inf.Stop()
		time.Sleep(15 * time.Second)
		if n := count("early"); n != before+2 {
			t.Fatalf("next run: %d resent in 15 s every 10 s, want 2", n-before)
		}
		// Another informer's registration, or a removed one: nothing.
		other := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{Backoff: fastBackoff})
		foreign := other.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{Modified: handler("other")})
		inf.ResendEvery(foreign, time.Second)
		inf.ResendEvery(late, time.Second)
		time.Sleep(5 * time.Second)
		inf.resends.mu.Lock()
		_, kept := inf.resends.periods[foreign]
		_, keptLate := inf.resends.periods[late]
		inf.resends.mu.Unlock()
		if kept || keptLate || count("other") != 0 || count("late") != 2 {
			t.Fatalf("another informer's registration scheduled %v, resent %d; a removed one scheduled %v, resent %d (was 2)",
				kept, count("other"), keptLate, count("late"))
		}
	})
}
