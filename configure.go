package kinformer

import (
	"context"
	"fmt"
	"log/slog"
	"reflect"
	"slices"
	"strings"
	"time"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer/internal/backoff"
	"github.com/kinformer/kinformer/internal/direct"
	"github.com/kinformer/kinformer/internal/mutation"
	"github.com/kinformer/kinformer/internal/persist"
	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/store"
)

// An informer's configuration: its Options compiled once into a config,
// which is never changed in place. A change (SetTransform before the
// start; a Factory's consumer widening the projection or shortening the
// resync, before or after it) makes a new one in its place
// (Informer.reconfigure), which the loop takes: before the first run at
// once (loop.configure), after it between two of its attempts (loop.offer,
// loop.adopt), a wider projection by a re-list.

// config is an informer's configuration: its Options with the defaults
// filled in, and what New compiles from them. It is made once (compile)
// and never changed: a change an informer takes (a Factory's consumer
// widening the projection or shortening the resync, SetTransform before
// the start) makes a new one in its place (Informer.reconfigure), and the
// loop derives its parts anew from it: before the start at once, after
// it between two of its attempts (loop.adopt).
type config[T Object] struct {
	Options[T]
	defaultKey bool // KeyFunc was not given: MetaNamespaceKey
	// objType is the concrete type of the objects when T is an interface
	// (Factory.Typed): what the direct decoder and the state file make.
	// nil: T itself.
	objType reflect.Type
	// fields is Fields compiled (nil: whole objects), and fieldsErr why
	// they do not compile, or why the KeyFunc or an index reads fields
	// they leave out.
	fields    *projection.Fields
	fieldsErr error
	// maxJSONEvent bounds a JSON event's bytes; 0 is jsonwatch.MaxEvent.
	// Tests lower it to test the bound quickly.
	maxJSONEvent int64
	// gen counts the configurations the informer was given while it had
	// started (Informer.reconfigure, live): 0 for the one New made and
	// those given before the start. WaitForSync waits until the informer
	// has taken the last one (status.Status.Take).
	gen uint64
}

// compile makes the configuration of an informer of objType's objects
// (nil: T's) with opts (nil: the defaults).
func compile[T Object](opts *Options[T], objType reflect.Type) *config[T] {
	c := &config[T]{Options: opts.withDefaults(), objType: objType}
	if opts == nil || opts.KeyFunc == nil {
		c.defaultKey = true
	}
	c.fields, c.fieldsErr = compileFields(c.Fields, c.objectType())
	if c.fieldsErr == nil {
		key := c.KeyFunc
		if c.defaultKey {
			key = nil // reads what is always kept
		}
		c.fieldsErr = checkReads(c.fields, key, c.Indexers)
	}
	if c.Name == "" {
		t := c.objectType().String()
		c.Name = strings.ToLower(t[strings.LastIndex(t, ".")+1:])
	}
	return c
}

// objectType is the type of the objects the informer makes: T, or
// objType for an interface T.
func (c *config[T]) objectType() reflect.Type {
	if c.objType != nil {
		return c.objType
	}
	return reflect.TypeFor[T]()
}

// compileFields compiles fields (as Options.Fields) against t, the
// objects' type (unstructured objects: as they are); nil for none.
func compileFields(fields []string, t reflect.Type) (*projection.Fields, error) {
	if len(fields) == 0 {
		return nil, nil
	}
	switch {
	case t == reflect.TypeFor[*unstructured.Unstructured]():
		t = nil
	case t.Kind() == reflect.Interface:
		return nil, fmt.Errorf("%w: the objects' type is the interface %s, with no fields to keep", ErrFields, t)
	}
	f, err := projection.Compile(t, fields)
	if err != nil {
		return nil, fmt.Errorf("%w: %w", ErrFields, err)
	}
	return f, nil
}

// reconfigure gives the informer a new configuration: change edits a
// copy of the current one, which takes its place; a configuration is
// never changed in place. Before the informer first starts, the loop
// derives its parts anew at once (loop.configure), and the mutation
// detector is turned on if the new one asks for it. After the start it
// returns ErrStarted, naming what could not change, unless live: then the
// loop takes the new one between two of its attempts (loop.offer,
// loop.adopt; a wider projection by a re-list, which WaitForSync waits
// for: config.gen), also if the informer is stopped, at its next run. Live changes
// are a Factory's (merge), of the projection and the resync period only.
func (inf *Informer[T]) reconfigure(what string, live bool, change func(*config[T])) error {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	c := *inf.cfg
	change(&c)
	if inf.started {
		if !live {
			return fmt.Errorf("%w: %s can only change before the informer starts", ErrStarted, what)
		}
		if !projection.Equal(c.fields, inf.cfg.fields) {
			// WaitForSync waits for the list that gives the cache them.
			c.gen++
			inf.status.Asked.Store(c.gen) // before the loop can take it
		}
		inf.cfg = &c
		inf.loop.offer(&c)
		return nil
	}
	inf.cfg = &c
	inf.loop.configure(&c)
	if c.DetectMutations && inf.detector == nil && !inf.cache.Compact() {
		inf.detectMutations()
	}
	return nil
}

// configuration returns the informer's configuration, which is never
// changed (reconfigure replaces it). After the start, the loop may not
// have taken it yet.
func (inf *Informer[T]) configuration() *config[T] {
	inf.runMu.Lock()
	defer inf.runMu.Unlock()
	return inf.cfg
}

// configure makes c the loop's configuration, before the loop first
// runs or between two attempts (adopt), and derives its parts anew: the
// writer's preparation (Transform, projection), the decoder (which shares
// objects only without a Transform, which may modify maps in place:
// sharing must come after it), and the state file, named for the
// projection.
func (l *loop[T]) configure(c *config[T]) {
	old := l.opts
	l.opts = c
	var state *persist.Persister[T] // the state file named for the projection, if it changed
	if l.newState != nil && (old == nil || !projection.Equal(old.fields, c.fields)) {
		state = l.newState()
	}
	l.w.configure(c.Transform, c.fields, state)
	l.makeDirect()
}

// makeDirect makes the direct decoder for the loop's options.
func (l *loop[T]) makeDirect() {
	fn := l.opts.Transform
	l.direct = nil
	if l.newDirect != nil {
		dc := direct.Decoding{KeepManagedFields: l.opts.KeepManagedFields, MaxJSONEvent: l.opts.maxJSONEvent, Fields: l.opts.fields}
		if fn == nil {
			// Without a Transform, what the decoder makes is what the
			// cache holds: the holding says in what form to hand it over.
			w := l.w.cache.s.DecoderWants()
			if w.Share {
				dc.Share = l.w.share
			}
			dc.KeepRaw, dc.Lazy = w.KeepRaw, w.Lazy
		}
		l.direct = l.newDirect(dc)
	}
	l.st.direct = l.direct != nil
}

// offer gives the loop of a started informer a new configuration
// (Informer.reconfigure): the loop takes it before its next attempt
// (adopt), and a watch under way ends for it.
func (l *loop[T]) offer(c *config[T]) {
	l.offerMu.Lock()
	defer l.offerMu.Unlock()
	l.offered.Store(c)
	close(l.offers)
	l.offers = make(chan struct{})
}

// offerPending returns a channel closed at the next offer, and whether a
// configuration offered is waiting already (in that order: none is
// missed between the two).
func (l *loop[T]) offerPending() (next <-chan struct{}, pending bool) {
	l.offerMu.Lock()
	next = l.offers
	l.offerMu.Unlock()
	return next, l.offered.Load() != nil
}

// adopt takes the configuration offered, if any, between two attempts. A
// wider projection is taken by a list: the decoder and the writer's
// preparation keep the new fields from then on, the state file is the one
// named for them, and the list takes every object as it comes, with
// Modified for each one cached before (writer.widened); until it ends,
// cached objects lack the new fields, and WaitForSync waits (not with an
// empty cache). A new resync period is taken at once, and counts from now
// (resyncAt; nil when the loop waits for a share: then from the next
// whole list).
func (l *loop[T]) adopt(resyncAt *time.Time) {
	c := l.offered.Swap(nil)
	if c == nil {
		return
	}
	widened := !projection.Equal(l.opts.fields, c.fields)
	if widened && l.stateOn {
		l.w.state.Stop() // the narrower projection's file, as it stands
		l.stateOn = false
	}
	if path := l.statePath(); widened && path != "" && !slices.Contains(l.left, path) {
		l.left = append(l.left, path)
	}
	resync := c.ResyncPeriod != l.opts.ResyncPeriod
	direct := l.st.direct
	l.configure(c)
	l.st.direct = direct && l.direct != nil // what the server refused stays refused
	if resync && resyncAt != nil {
		*resyncAt = time.Time{}
		if c.ResyncPeriod > 0 {
			*resyncAt = time.Now().Add(backoff.Jittered(c.ResyncPeriod))
		}
	}
	if !widened {
		if !l.w.takeAfterList(c.gen) { // unless a list for a wider projection is under way
			l.w.status.Take(c.gen)
		}
		return
	}
	keeps := "whole objects"
	if c.fields != nil {
		keeps = c.fields.String()
	}
	l.log.Info("kinformer: re-listing to keep the fields a new consumer asked for", "fields", keeps)
	if l.st.phase == phaseWatch || l.st.phase == phaseListJoined {
		l.obs.relist("reconfigure")
	}
	l.w.widen(c.gen)
	// Whatever the run was restoring or catching up came from the
	// narrower projection: the list replaces it.
	l.held, l.target = nil, ""
	l.st.phase = phaseList
	if l.stateOpened && l.newState != nil && l.openState() {
		// Emptied until the list writes it whole: whatever an earlier
		// process left in the file named for these fields must not be
		// trusted at a later resourceVersion (a commit before the list
		// ends: a 404's deletions, say).
		l.w.state.Discard()
		l.w.state.Start()
		l.stateOn = true
	}
	if l.w.cache.s.Size() == 0 {
		l.w.takeConfig() // nothing cached lacks the new fields
	}
}

// statePath is the path of the state file the loop has opened; "" if
// none (no StateDir, or not opened yet, or its directory was refused).
func (l *loop[T]) statePath() string {
	if !l.stateOpened || l.w.state == nil {
		return ""
	}
	return l.w.state.Path()
}

// cancelOnOffer returns ctx, cancelled once the loop is offered a new
// configuration (at once if it has one), and a release to call when done
// with it.
func (l *loop[T]) cancelOnOffer(ctx context.Context) (context.Context, func()) {
	next, pending := l.offerPending()
	return cancelWhen(ctx, pending, next)
}

// The cache mutation detector (Options.DetectMutations, internal/mutation)
// is chosen once: the writer tells a mutationHook of the objects it caches
// (put), replaces and removes (retire), or swaps in and out with a
// re-list; the detector's, or noMutationHook.
type mutationHook[T Object] interface {
	put(emit func(Event[T]), key string, old T, existed bool, obj T)
	retire(emit func(Event[T]), key string, old T)
	swap(emit func(Event[T]), old, items *store.Items[T])
}

// noMutationHook is the hook of an informer without the detector: nothing
// is copied or compared.
type noMutationHook[T Object] struct{}

func (noMutationHook[T]) put(func(Event[T]), string, T, bool, T)                {}
func (noMutationHook[T]) retire(func(Event[T]), string, T)                      {}
func (noMutationHook[T]) swap(func(Event[T]), *store.Items[T], *store.Items[T]) {}

// detectorHook is the hook of an informer with the detector: its reports
// are Error events at the informer's resourceVersion.
type detectorHook[T Object] struct {
	d  *mutation.Detector[T]
	rv func() string
}

// newDetector returns the detector of an informer (its handler logger, its
// metrics, "panic" mode or not) and its hook; rv is the informer's
// resourceVersion, emit and fence its dispatcher's, for the periodic check.
func newDetector[T Object](log *slog.Logger, obs *observer, panics bool, rv func() string, emit func(Event[T]), fence func()) (*mutation.Detector[T], detectorHook[T]) {
	d := mutation.New[T](mutation.Config{Log: log, Panics: panics, Mutated: ErrMutated, Counted: obs.mutation})
	obs.detecting()
	h := detectorHook[T]{d: d, rv: rv}
	d.Emit, d.Fence = h.reporter(emit), fence
	return d, h
}

// reporter turns a report into an Error event given to emit.
func (h detectorHook[T]) reporter(emit func(Event[T])) func(error) {
	return func(err error) { emit(Event[T]{Type: Error, Err: err, ResourceVersion: h.rv()}) }
}

func (h detectorHook[T]) put(emit func(Event[T]), key string, old T, existed bool, obj T) {
	h.d.Put(h.reporter(emit), key, old, existed, obj)
}

func (h detectorHook[T]) retire(emit func(Event[T]), key string, old T) {
	h.d.Retire(h.reporter(emit), key, old)
}

func (h detectorHook[T]) swap(emit func(Event[T]), old, items *store.Items[T]) {
	mutation.Swap(h.d, h.reporter(emit), old, items, store.Ref[T].Object)
}
