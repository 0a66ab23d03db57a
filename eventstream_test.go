package kinformer

import (
	"fmt"
	"math/rand/v2"
	"os"
	"strconv"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"
)

// TestRandomEventStream drives the informer with a long random stream of
// creates, updates, deletes, dropped watches, 410s, bookmarks and
// stop/compact/start cycles. At the end the cache must equal the server's
// state, and each handler's events, folded in order, must give the same
// state — which also checks that every handler saw each object's events in
// order and that no event was lost or duplicated.
//
// KINFORMER_SEED=n replays a failing run.
func TestRandomEventStream(t *testing.T) {
	t.Run("paged", func(t *testing.T) { randomEventStream(t, false) })
	t.Run("streaming", func(t *testing.T) { randomEventStream(t, true) })
}

func randomEventStream(t *testing.T, streaming bool) {
	seed := uint64(time.Now().UnixNano())
	if s, err := strconv.ParseUint(os.Getenv("KINFORMER_SEED"), 10, 64); err == nil {
		seed = s
	}
	t.Logf("seed %d (KINFORMER_SEED to replay)", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	ops := 3000
	if testing.Short() {
		ops = 500
	}

	s := newFakeServer()
	s.streaming = streaming
	// Objects labelled drop=yes are outside the selector: updates that set
	// or clear the label move objects out of and into the informer's view.
	inf := New[*corev1.ConfigMap](s, &Options[*corev1.ConfigMap]{LabelSelector: "drop!=yes", Backoff: fastBackoff})
	first, late := &recorder{}, &recorder{}
	inf.AddHandler(first.handle)
	inf.Start()
	t.Cleanup(inf.Stop)

	visible := func() map[string]string {
		s.mu.Lock()
		defer s.mu.Unlock()
		out := map[string]string{}
		for k, o := range s.objs {
			if o.Labels["drop"] != "yes" {
				out[k] = o.ResourceVersion
			}
		}
		return out
	}
	randomPut := func() {
		o := cm(fmt.Sprintf("ns%d", rng.IntN(3)), fmt.Sprintf("o%d", rng.IntN(40)), "v", strconv.Itoa(rng.IntN(1000)))
		if rng.IntN(6) == 0 {
			o.Labels["drop"] = "yes"
		}
		s.put(o)
	}
	randomDelete := func() {
		s.mu.Lock()
		var keys []*corev1.ConfigMap
		for _, o := range s.objs {
			keys = append(keys, o)
		}
		s.mu.Unlock()
		if len(keys) > 0 {
			o := keys[rng.IntN(len(keys))]
			s.del(o.Namespace, o.Name)
		}
	}

	for i := range ops {
		if i == ops/3 {
			inf.AddHandler(late.handle)
		}
		switch r := rng.IntN(100); {
		case r < 55:
			randomPut()
		case r < 75:
			randomDelete()
		case r < 80:
			s.closeWatches()
		case r < 83:
			s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old resource version").ErrStatus})
		case r < 86:
			s.bookmark()
		case r < 88:
			inf.Stop()
			for range rng.IntN(10) {
				randomPut()
				randomDelete()
			}
			if rng.IntN(2) == 0 {
				s.compact()
			}
			inf.Start()
		default:
			time.Sleep(time.Duration(rng.IntN(200)) * time.Microsecond)
		}
	}

	eventually(t, "cache equal to server", func() bool { return equalMaps(cacheState(inf.Cache()), visible()) })
	want := visible()
	for name, rec := range map[string]*recorder{"first": first, "late": late} {
		deadline := time.Now().Add(10 * time.Second)
		for time.Now().Before(deadline) {
			if got, err := fold(rec.all()); err != nil || equalMaps(got, want) {
				break
			}
			time.Sleep(5 * time.Millisecond)
		}
		if got, err := fold(rec.all()); err != nil {
			t.Fatalf("%s handler: %v", name, err)
		} else if !equalMaps(got, want) {
			t.Fatalf("%s handler's folded events differ from server: %s", name, diffMaps(got, want))
		}
	}
	lists, watches := s.counts()
	t.Logf("%d ops: %d lists, %d watches, %d events, %d objects", ops, lists, watches, len(first.all()), len(want))
}
