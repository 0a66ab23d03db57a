package kinformer

import (
	"context"
	"time"

	"k8s.io/apimachinery/pkg/watch"
)

// stream is an open watch and what the loop needs to police it. Its
// events come either from a client's watch.Interface, whose own goroutine
// decodes them, or from a directReader, which the loop's goroutine reads
// and decodes itself: one goroutine hand-off less for every event.
type stream struct {
	w       watch.Interface // nil for a direct stream
	r       *directReader
	cancel  context.CancelFunc
	unhook  func() bool   // direct streams: undoes the close on the request's context
	idle    time.Duration // no event for this long: the connection is dead
	started time.Time     // when the watch was open
	last    time.Time     // the last event, or started

	timer *time.Timer // channel streams: the next deadline
	alarm *time.Timer // direct streams: closes the body at the next deadline
	// expired is a deadline that closed a direct stream's body as its read
	// returned an event; the next call reports it. Loop goroutine only:
	// the alarm itself only closes the body.
	expired waitResult
}

func (s *stream) stop() {
	if s.w != nil {
		s.w.Stop()
	}
	if s.r != nil {
		if s.alarm != nil {
			s.alarm.Stop()
		}
		if s.unhook != nil {
			s.unhook()
		}
		s.r.close()
	}
	if s.timer != nil {
		s.timer.Stop()
	}
	s.cancel()
}

// waitResult says why stream.next returned.
type waitResult uint32

const (
	gotEvent     waitResult = iota
	ctxDone                 // the informer is stopping
	streamClosed            // the server or the network ended the stream
	resyncFired             // the resync time has come
	idleFired               // nothing for s.idle: the connection is taken for dead
	firstFired              // nothing at all before the first-event deadline
)

// deadlines are the absolute times at which stream.next stops waiting;
// zero means none.
type deadlines struct {
	resync time.Time
	first  time.Time
}

// earliest returns the first deadline due (idle included) and its result.
func (s *stream) earliest(d deadlines) (time.Time, waitResult) {
	at, why := s.last.Add(s.idle), idleFired
	if !d.resync.IsZero() && d.resync.Before(at) {
		at, why = d.resync, resyncFired
	}
	if !d.first.IsZero() && d.first.Before(at) {
		at, why = d.first, firstFired
	}
	return at, why
}

// next waits for the next event, or until ctx ends, the stream ends or a
// deadline passes.
func (s *stream) next(ctx context.Context, d deadlines) (watch.Event, waitResult) {
	at, why := s.earliest(d)
	wait := time.Until(at)
	if wait <= 0 {
		return watch.Event{}, why
	}
	if s.r != nil {
		return s.nextDirect(ctx, wait, why)
	}
	if s.timer == nil {
		s.timer = time.NewTimer(wait)
	} else {
		s.timer.Reset(wait)
	}
	select {
	case <-ctx.Done():
		return watch.Event{}, ctxDone
	case <-s.timer.C:
		return watch.Event{}, why
	case ev, ok := <-s.w.ResultChan():
		if !ok {
			return watch.Event{}, streamClosed
		}
		s.last = time.Now()
		return ev, gotEvent
	}
}

// nextDirect reads and decodes the next frame on the calling goroutine. A
// deadline closes the body under the blocked read; so does the end of the
// request's context (openWatch hooks it), whether or not the transport
// watches that context itself.
func (s *stream) nextDirect(ctx context.Context, wait time.Duration, why waitResult) (watch.Event, waitResult) {
	if s.expired != gotEvent {
		return watch.Event{}, s.expired
	}
	if s.alarm == nil {
		s.alarm = time.AfterFunc(wait, s.r.close)
	} else {
		s.alarm.Reset(wait)
	}
	ev, ok := s.r.next()
	fired := !s.alarm.Stop() // the alarm ran, or is running: the body is (being) closed
	if ctx.Err() != nil {
		return watch.Event{}, ctxDone
	}
	if ok {
		s.last = time.Now()
		if fired {
			// The deadline passed as the event arrived. An idle or
			// first-event deadline lost its premise (something came), so
			// the stream just counts as ended; a resync is still due.
			s.expired = streamClosed
			if why == resyncFired {
				s.expired = resyncFired
			}
		}
		return ev, gotEvent
	}
	if fired {
		return watch.Event{}, why
	}
	return watch.Event{}, streamClosed
}
