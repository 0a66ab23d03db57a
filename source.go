package kinformer

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http/httptrace"
	"sync"
	"sync/atomic"
	"time"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/direct"
	"github.com/kinformer/kinformer/internal/jsonwatch"
	"github.com/kinformer/kinformer/internal/liveness"
	"github.com/kinformer/kinformer/internal/protowatch"
	"github.com/kinformer/kinformer/internal/store"
)

// source is one open watch: where the loop reads events from. There are two:
// clientSource reads a client's watch.Interface, whose own goroutine
// decodes; directSource reads and decodes a protobuf or JSON stream on the loop's
// goroutine (internal/direct), one goroutine hand-off less for every event.
type source interface {
	// next returns the next event, waiting at most until deadline (zero:
	// no deadline). Its errors:
	//   - errEnded: the stream is over (the server, the network or stop
	//     ended it); resume from the last resourceVersion;
	//   - errDeadline: the deadline passed;
	//   - ctx.Err(): the informer is stopping;
	//   - direct.ErrNoDirect (wrapped): not a protobuf or JSON stream after all;
	//   - an error wrapping ErrUnexpectedObject: one event could not be
	//     used and was skipped; the stream goes on;
	//   - any other error: the stream is unreadable and over.
	next(ctx context.Context, deadline time.Time) (event, error)
	// stop ends the stream; safe to call more than once.
	stop()
}

// event is a watch event as a source gives it. raw, from a protobuf
// stream that keeps them (direct.Decoding.KeepRaw), is the bytes its object was
// decoded from, which a compact cache keeps rather than encode the object
// again; nil for none.
type event struct {
	watch.Event
	raw []byte
}

var (
	errEnded    = errors.New("watch ended")
	errDeadline = errors.New("deadline passed")
)

// clientSource reads a client's watch.
type clientSource struct {
	w     watch.Interface
	timer *time.Timer
}

func (s *clientSource) next(ctx context.Context, deadline time.Time) (event, error) {
	var fire <-chan time.Time
	if !deadline.IsZero() {
		if s.timer == nil {
			s.timer = time.NewTimer(time.Until(deadline))
		} else {
			s.timer.Reset(time.Until(deadline))
		}
		fire = s.timer.C
	}
	select {
	case <-ctx.Done():
		return event{}, ctx.Err()
	case <-fire:
		return event{}, errDeadline
	case ev, ok := <-s.w.ResultChan():
		if !ok {
			return event{}, errEnded
		}
		return event{Event: ev}, nil
	}
}

func (s *clientSource) stop() {
	s.w.Stop()
	if s.timer != nil {
		s.timer.Stop()
	}
}

// directSource reads a protobuf or JSON stream on the caller's goroutine. A
// deadline closes the body under the blocked read, and so does the end of
// the request's context, whether or not the transport watches that context
// itself.
type directSource struct {
	r      direct.EventReader
	raw    rawReader   // r, if it keeps its objects' bytes (direct.Decoding.KeepRaw)
	unhook func() bool // undoes the close on the request's context
	alarm  *time.Timer // closes the body at the deadline (alarmed.close)
	// alarmed is what the alarm closes: r until stop, then nothing. A
	// stopped timer can stay in the runtime's timer heap until its
	// deadline (a watch's: minutes away) or until the heap is cleaned, and
	// holds its function meanwhile; through r, that would hold the decoder
	// and, through what it decodes for, the informer and its whole cache
	// after the informer has stopped and been let go.
	alarmed *alarmTarget
}

// alarmTarget is the reader a deadline closes, until it is cleared.
type alarmTarget struct {
	mu sync.Mutex
	r  interface{ Close() }
}

func (a *alarmTarget) close() {
	a.mu.Lock()
	r := a.r
	a.mu.Unlock()
	if r != nil {
		r.Close()
	}
}

func (a *alarmTarget) clear() {
	a.mu.Lock()
	a.r = nil
	a.mu.Unlock()
}

// rawReader is a protobuf stream that can give the bytes of the object
// it last decoded (protowatch.Reader.RawOf).
type rawReader interface{ RawOf(obj any) []byte }

// newDirectSource reads r until ctx ends; with keepRaw, each event comes
// with the bytes its object was decoded from, where r has them.
func newDirectSource(ctx context.Context, r direct.EventReader, keepRaw bool) *directSource {
	s := &directSource{r: r, unhook: context.AfterFunc(ctx, r.Close), alarmed: &alarmTarget{r: r}}
	if rr, ok := r.(rawReader); ok && keepRaw {
		s.raw = rr
	}
	return s
}

func (s *directSource) next(ctx context.Context, deadline time.Time) (event, error) {
	if !deadline.IsZero() {
		if s.alarm == nil {
			s.alarm = time.AfterFunc(time.Until(deadline), s.alarmed.close)
		} else {
			s.alarm.Reset(time.Until(deadline))
		}
	}
	ev, err := s.r.Next()
	// The alarm ran, or is running: the body is (being) closed. If an
	// event came all the same, it counts, and the next read finds the
	// stream ended; the loop then sees which deadline has passed.
	fired := s.alarm != nil && !s.alarm.Stop()
	switch {
	case ctx.Err() != nil:
		return event{}, ctx.Err()
	case err == nil:
		e := event{Event: ev}
		if s.raw != nil {
			e.raw = s.raw.RawOf(ev.Object)
		}
		return e, nil
	case errors.Is(err, io.EOF):
		if fired {
			return event{}, errDeadline
		}
		return event{}, errEnded
	case errors.Is(err, protowatch.ErrNotProtobuf), errors.Is(err, jsonwatch.ErrNotJSON):
		return event{}, fmt.Errorf("%w: %w", direct.ErrNoDirect, err)
	}
	var pe *protowatch.EventError
	var je *jsonwatch.EventError
	if errors.As(err, &pe) || errors.As(err, &je) {
		return event{}, fmt.Errorf("%w: %w", ErrUnexpectedObject, err)
	}
	return event{}, err
}

func (s *directSource) stop() {
	if s.alarm != nil {
		s.alarm.Stop()
	}
	s.alarmed.clear()
	s.unhook()
	s.r.Close()
}

// stream is an open watch and the clocks the loop polices it with.
type stream[T Object] struct {
	src     source
	cancel  context.CancelFunc
	prepare prepareFunc[T] // readies its objects for the cache
	idle    time.Duration  // no event for this long: the connection is dead
	timeout time.Duration  // the server-side timeout the watch asked for
	// heartbeat: the server sent this watch a bookmark on its own, and
	// idle is at most heartbeatSilence (loop.heard).
	heartbeat bool
	started   time.Time                // when the watch was open
	last      time.Time                // the last event, or started
	conn      atomic.Pointer[net.Conn] // the connection the request went out on, if known
	live      *liveness.Watch          // the connection's watchdog; nil if none
}

func (s *stream[T]) stop() {
	s.src.stop()
	s.cancel()
	s.live.Done()
}

// watchConn puts the stream's connection under its watchdog (see
// internal/liveness), once the watch is open.
func (s *stream[T]) watchConn(probe liveness.Prober, after, timeout time.Duration) {
	if c := s.conn.Load(); c != nil {
		s.live = liveness.Register(*c, probe, after, timeout)
	}
}

// traced returns ctx with a trace that records the connection a request
// made with it goes out on.
func (s *stream[T]) traced(ctx context.Context) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{
		GotConn: func(i httptrace.GotConnInfo) {
			if i.Conn != nil {
				s.conn.Store(&i.Conn)
			}
		},
	})
}

// dropConn closes the connection the stream's request went out on: after
// the stream went silent past its idle deadline. Over HTTP/2 every request
// shares one connection, and a new watch would ride the same dead one until
// the transport's health check gives up on it (client-go: 45 s); closing it
// makes the transport dial afresh, and fails at once whatever else was on
// it, which was as dead.
func (s *stream[T]) dropConn() bool {
	if c := s.conn.Load(); c != nil {
		(*c).Close()
		return true
	}
	return false
}

// Why stream.next returned without an event: besides ctx.Err() (the
// informer is stopping), errEnded (the server or the network ended the
// stream), ErrIdle (nothing for s.idle: the connection is taken for dead),
// an error wrapping direct.ErrNoDirect (not a direct stream after all) or
// ErrUnexpectedObject (one event could not be used and was skipped; the
// stream goes on), and any other error (the stream is unreadable and
// over), one of the deadlines passed:
var (
	errResync = errors.New("resync due")
	errFirst  = errors.New("nothing received before the first-event deadline")
	errQuiet  = errors.New("quiet deadline passed")
)

// deadlines are the absolute times at which stream.next stops waiting;
// zero means none.
type deadlines struct {
	resync time.Time
	first  time.Time
	quiet  time.Time
}

// earliest returns the first deadline due (idle included) and why.
func (s *stream[T]) earliest(d deadlines) (time.Time, error) {
	at, why := s.last.Add(s.idle), ErrIdle
	if !d.resync.IsZero() && d.resync.Before(at) {
		at, why = d.resync, errResync
	}
	if !d.first.IsZero() && d.first.Before(at) {
		at, why = d.first, errFirst
	}
	if !d.quiet.IsZero() && d.quiet.Before(at) {
		at, why = d.quiet, errQuiet
	}
	return at, why
}

// next waits for the next event, or until ctx ends, the stream ends or a
// deadline passes, and says which (see errResync).
func (s *stream[T]) next(ctx context.Context, d deadlines) (event, error) {
	at, why := s.earliest(d)
	if !time.Now().Before(at) {
		return event{}, why
	}
	ev, err := s.src.next(ctx, at)
	switch {
	case ctx.Err() != nil:
		return event{}, ctx.Err()
	case s.live.Dead():
		// The watchdog closed the connection: whatever came last (an
		// event read before the close, or the client's error about it),
		// the watch resumes from its resourceVersion on a new one.
		return event{}, ErrIdle
	case err == nil:
		s.last = time.Now()
		s.live.Touch(s.last)
		return ev, nil
	case errors.Is(err, errDeadline):
		return event{}, why
	case errors.Is(err, errEnded):
		if !d.resync.IsZero() && !time.Now().Before(d.resync) {
			return event{}, errResync // closed by the resync alarm as an event came
		}
		return event{}, errEnded
	case errors.Is(err, ErrUnexpectedObject):
		s.last = time.Now() // something came: the connection lives
		s.live.Touch(s.last)
	}
	return event{}, err
}

// read returns the next event of s the loop can use. An event that cannot
// be used is reported (what says of which request) and skipped; received
// is set once anything but an ERROR event came, and from then on the
// first-event deadline is off. Else it returns why s gives no more
// (stream.next's reasons), an ERROR event's server error (c.typ Error),
// or a watch-list's end marker that cannot be used (c.endOfList). This is
// the one place where the loop waits on a stream and checks its events.
func (l *loop[T]) read(ctx context.Context, s *stream[T], d deadlines, what string, received *bool) (c checked[T], err error) {
	for {
		if *received {
			d.first = time.Time{} // only before anything came
		}
		ev, err := s.next(ctx, d)
		if errors.Is(err, ErrUnexpectedObject) {
			*received = true
			l.w.report(fmt.Errorf("%s: %w", what, err))
			continue
		}
		if err != nil {
			return checked[T]{}, err
		}
		c, err := check[T](ev.Event)
		c.raw = ev.raw
		switch {
		case c.typ == Error:
			// Not received: a watch whose first answer is an error (410)
			// backs off before it re-lists (step).
			return c, err
		case err != nil && c.endOfList:
			*received = true
			return c, err
		case err != nil:
			*received = true
			l.w.report(fmt.Errorf("%s: %w", what, err))
			continue
		}
		*received = true
		return c, nil
	}
}

// checked is a watch event the loop can use.
type checked[T Object] struct {
	typ EventType
	obj T      // Added, Modified, Deleted; a Bookmark's object if it is a T
	raw []byte // the bytes obj was decoded from, if the stream keeps them (event.raw)
	// undecoded, instead of obj: Added, Modified, Deleted left undecoded
	// (protowatch.Format.Lazy).
	undecoded *protowatch.Raw
	rv        string // Bookmark: its resourceVersion
	// endOfList: a Bookmark that ends a watch-list's initial events (also
	// set, with an error, when such a bookmark has no resourceVersion).
	endOfList bool
}

// arrival is c's object as the writer takes it (Added, Modified, Deleted).
func (c checked[T]) arrival() store.Arrival[T] {
	return store.Arrival[T]{Obj: c.obj, Raw: c.raw, Undecoded: c.undecoded}
}

// check turns a watch event into something the loop can use, or an error:
// an ERROR event's Status as the server's error (classified; the watch is
// over), anything else wrapping ErrUnexpectedObject (skip it, go on). It is
// the one place where events from either source are checked.
func check[T Object](ev watch.Event) (checked[T], error) {
	if isNil(ev.Object) {
		return checked[T]{}, fmt.Errorf("%w: %s event without an object", ErrUnexpectedObject, ev.Type)
	}
	switch ev.Type {
	case watch.Error:
		return checked[T]{typ: Error}, classify(apierrors.FromObject(ev.Object))
	case watch.Bookmark:
		m, err := meta.Accessor(ev.Object)
		if err != nil {
			return checked[T]{}, fmt.Errorf("%w: bookmark without metadata (%T)", ErrUnexpectedObject, ev.Object)
		}
		end := m.GetAnnotations()[metav1.InitialEventsAnnotationKey] == "true"
		if m.GetResourceVersion() == "" {
			// endOfList stays set: a watch-list cannot end without a version.
			return checked[T]{endOfList: end}, fmt.Errorf("%w: bookmark without resourceVersion (%T)", ErrUnexpectedObject, ev.Object)
		}
		obj, _ := ev.Object.(T)
		return checked[T]{typ: Bookmark, obj: obj, rv: m.GetResourceVersion(), endOfList: end}, nil
	case watch.Added, watch.Modified, watch.Deleted:
	default:
		return checked[T]{}, fmt.Errorf("%w: event type %q", ErrUnexpectedObject, ev.Type)
	}
	if raw, ok := ev.Object.(*protowatch.Raw); ok { // left undecoded for a compact cache
		if raw.Meta.Name == "" {
			return checked[T]{}, fmt.Errorf("%w: %s event with an object without a name (resourceVersion %q)", ErrUnexpectedObject, ev.Type, raw.Meta.ResourceVersion)
		}
		return checked[T]{typ: EventType(ev.Type), undecoded: raw}, nil
	}
	obj, ok := ev.Object.(T)
	if !ok || isNil(obj) {
		return checked[T]{}, fmt.Errorf("%w: %s event with object of type %T, want %T", ErrUnexpectedObject, ev.Type, ev.Object, *new(T))
	}
	if err := checkNamed(obj); err != nil {
		return checked[T]{}, fmt.Errorf("%w: %s event with %w", ErrUnexpectedObject, ev.Type, err)
	}
	return checked[T]{typ: EventType(ev.Type), obj: obj}, nil
}

// checkNamed refuses an object without a name, which a real server never
// sends (an object without metadata decodes to one): cached, it would sit
// under a key made of nothing.
func checkNamed[T Object](obj T) error {
	if obj.GetName() == "" {
		return fmt.Errorf("an object without a name (%T, resourceVersion %q)", obj, obj.GetResourceVersion())
	}
	return nil
}
