package kinformer

import (
	"reflect"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/meta"
)

// FactoryOptions.Compact, without an API server: keyOf gives it to every
// request as it gives StateDir (a consumer's false is no choice), and the
// sharing rules then see one Compact for every consumer; without it, a
// consumer asking for Compact and one not asking are refused, as two
// StateDirs are. (integration/factory_compact_test.go has the real server.)

var cmMapping = &meta.RESTMapping{Resource: corev1.SchemeGroupVersion.WithResource("configmaps"), Scope: meta.RESTScopeNamespace}

// sharedCM is Shared[*corev1.ConfigMap] of s's factory over s's fake
// server: keyOf, then share.
func (s *cmShare) sharedCM(opts *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
	k, o := keyOf(s.f, reflect.TypeFor[*corev1.ConfigMap](), cmMapping, "ns", opts)
	o.Backoff = fastBackoff
	return share(s.f, k, o, nil, func(o *Options[*corev1.ConfigMap]) (*Informer[*corev1.ConfigMap], error) {
		s.made++
		return New[*corev1.ConfigMap](s.srv, o), nil
	})
}

func TestKeyOfCompact(t *testing.T) {
	for _, tc := range []struct {
		factory bool
		opts    *Options[*corev1.ConfigMap]
		want    bool
	}{
		{false, nil, false},
		{false, &Options[*corev1.ConfigMap]{}, false},
		{false, &Options[*corev1.ConfigMap]{Compact: true}, true},
		{true, nil, true},
		{true, &Options[*corev1.ConfigMap]{}, true},
		{true, &Options[*corev1.ConfigMap]{Compact: true}, true},
	} {
		f := NewFactory(nil, &FactoryOptions{Compact: tc.factory})
		_, o := keyOf(f, reflect.TypeFor[*corev1.ConfigMap](), cmMapping, "ns", tc.opts)
		if o.Compact != tc.want {
			t.Errorf("factory Compact %v, consumer's options %v (Compact %v): informer's Compact %v, want %v",
				tc.factory, tc.opts != nil, tc.opts != nil && tc.opts.Compact, o.Compact, tc.want)
		}
	}
}

// With FactoryOptions.Compact, every consumer shares the one compact
// informer, whatever its own Compact.
func TestShareCompactFromTheFactory(t *testing.T) {
	s := &cmShare{f: NewFactory(nil, &FactoryOptions{Compact: true}), srv: newFakeServer()}
	s.srv.put(cm("ns", "a", "k", "v"))
	first, err := s.sharedCM(nil)
	if err != nil {
		t.Fatal(err)
	}
	for i, o := range []*Options[*corev1.ConfigMap]{{}, {Compact: true}, nil} {
		if inf, err := s.sharedCM(o); err != nil || inf != first {
			t.Fatalf("consumer %d: %p, %v; want the first informer %p", i+2, inf, err, first)
		}
	}
	if s.made != 1 {
		t.Fatalf("%d informers made, want 1", s.made)
	}
	if !first.Cache().Compact() {
		t.Fatal("the factory's Compact did not reach the informer's cache")
	}
	s.f.Start()
	defer s.f.Stop()
	if err := s.f.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	got, ok := first.Cache().GetNamespaced("ns", "a")
	if !ok || got.Labels["k"] != "v" {
		t.Fatalf("Get(ns/a) = %v, %v", got, ok)
	}
	got.Labels["k"] = "changed"
	if again, _ := first.Cache().GetNamespaced("ns", "a"); again.Labels["k"] != "v" {
		t.Fatalf("changing an object read from a compact cache changed the cache: %v", again.Labels)
	}
}

// Without FactoryOptions.Compact, the first consumer's Compact is the
// informer's, and a later consumer asking otherwise is refused.
func TestShareCompactFromTheFirstConsumer(t *testing.T) {
	plainOnly(t) // with KINFORMER_TEST_COMPACT, no consumer can ask for a plain cache
	for _, first := range []bool{true, false} {
		s := newCMShare()
		inf, err := s.sharedCM(&Options[*corev1.ConfigMap]{Compact: first})
		if err != nil {
			t.Fatal(err)
		}
		if inf.Cache().Compact() != first {
			t.Fatalf("first consumer's Compact %v: the cache's is %v", first, inf.Cache().Compact())
		}
		if same, err := s.sharedCM(&Options[*corev1.ConfigMap]{Compact: first}); err != nil || same != inf {
			t.Fatalf("the same Compact again: %p, %v; want the first informer %p", same, err, inf)
		}
		if other, err := s.sharedCM(&Options[*corev1.ConfigMap]{Compact: !first}); err == nil || !strings.Contains(err.Error(), "different Compact") {
			t.Fatalf("first Compact %v, then %v: %p, %v; want an error naming Compact", first, !first, other, err)
		}
		s.f.Stop()
	}
}

// A consumer asking for the mutation detector shares a compact informer,
// before the start and after: a compact cache has nothing for it to check.
func TestShareCompactIgnoresDetectMutations(t *testing.T) {
	t.Setenv(EnvMutationDetector, "")
	for _, start := range []bool{false, true} {
		s := &cmShare{f: NewFactory(nil, &FactoryOptions{Compact: true}), srv: newFakeServer()}
		inf, err := s.sharedCM(nil)
		if err != nil {
			t.Fatal(err)
		}
		if start {
			s.f.Start()
			if err := s.f.WaitForSync(bounded(t)); err != nil {
				t.Fatal(err)
			}
		}
		if same, err := s.sharedCM(&Options[*corev1.ConfigMap]{DetectMutations: true}); err != nil || same != inf {
			t.Errorf("DetectMutations, started %v: %p, %v; want the informer %p", start, same, err, inf)
		}
		s.f.Stop()
	}
}
