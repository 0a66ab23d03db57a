package main

import (
	"context"
	"log/slog"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer"
)

// watchSource is what watch watches: one informer, or a view over one
// informer per namespace a selector chooses (--namespace-selector).
type watchSource interface {
	// addHandler registers fn, and returns how many events it has queued.
	addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) (pending func() int)
	// run runs until ctx ends, and has stopped everything when it returns.
	run(ctx context.Context)
	waitForSync(ctx context.Context) error
	hasSynced() bool
	len() int
}

type informerSource struct {
	inf *kinformer.Informer[*unstructured.Unstructured]
}

func (s informerSource) addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) func() int {
	reg := s.inf.AddHandler(fn)
	return reg.Pending
}

func (s informerSource) run(ctx context.Context)               { _ = s.inf.Run(ctx) }
func (s informerSource) waitForSync(ctx context.Context) error { return s.inf.WaitForSync(ctx) }
func (s informerSource) hasSynced() bool                       { return s.inf.HasSynced() }
func (s informerSource) len() int                              { return s.inf.Cache().Len() }

// viewSource is a factory's view of res over the namespaces selector
// chooses.
type viewSource struct {
	f *kinformer.Factory
	v *kinformer.View[*unstructured.Unstructured]
}

func newViewSource(cfg *rest.Config, res resource, selector, stateDir string, logger *slog.Logger, opts *kinformer.Options[*unstructured.Unstructured]) (*viewSource, error) {
	f := kinformer.NewFactory(cfg, &kinformer.FactoryOptions{Logger: logger, StateDir: stateDir})
	v, err := kinformer.DynamicView(f, res.gvr, kinformer.Namespaces{Selector: selector}, opts)
	if err != nil {
		f.Stop()
		return nil, err
	}
	return &viewSource{f: f, v: v}, nil
}

func (s *viewSource) addHandler(fn func(kinformer.Event[*unstructured.Unstructured])) func() int {
	h := func(e kinformer.Event[*unstructured.Unstructured]) { fn(e) }
	vr := s.v.AddHandlerFuncs(kinformer.HandlerFuncs[*unstructured.Unstructured]{Added: h, Modified: h, Deleted: h, Bookmark: h, Error: h})
	return func() int {
		n := 0
		for _, reg := range vr.Registrations() {
			n += reg.Pending()
		}
		return n
	}
}

func (s *viewSource) run(ctx context.Context) {
	s.f.Start()
	<-ctx.Done()
	s.v.Close()
	s.f.Stop()
}

func (s *viewSource) waitForSync(ctx context.Context) error { return s.v.WaitForSync(ctx) }
func (s *viewSource) hasSynced() bool                       { return s.v.HasSynced() }

func (s *viewSource) len() int {
	n := 0
	for _, inf := range s.v.Informers() {
		n += inf.Cache().Len()
	}
	return n
}
