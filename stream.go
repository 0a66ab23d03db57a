package kinformer

import (
	"context"
	"sync/atomic"
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
	idle    time.Duration // no event for this long: the connection is dead
	started time.Time
	last    time.Time // the last event, or started

	timer *time.Timer // channel streams: the next deadline
	alarm *time.Timer // direct streams: closes the body at the next deadline
	// alarmWhy is the waitResult the armed alarm stands for; fired is the
	// one it ended, set by the alarm's goroutine and read by the loop after
	// the read it interrupted.
	alarmWhy, fired atomic.Uint32
}

func (s *stream) stop() {
	if s.w != nil {
		s.w.Stop()
	}
	if s.r != nil {
		if s.alarm != nil {
			s.alarm.Stop()
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
// deadline closes the body under the blocked read; so does ctx, through the
// request's context.
func (s *stream) nextDirect(ctx context.Context, wait time.Duration, why waitResult) (watch.Event, waitResult) {
	if f := waitResult(s.fired.Load()); f != gotEvent {
		return watch.Event{}, f // the alarm went off as the last read returned an event
	}
	s.alarmWhy.Store(uint32(why))
	if s.alarm == nil {
		s.alarm = time.AfterFunc(wait, func() {
			s.fired.Store(s.alarmWhy.Load())
			s.r.close()
		})
	} else {
		s.alarm.Reset(wait)
	}
	ev, ok := s.r.next()
	s.alarm.Stop()
	if ctx.Err() != nil {
		return watch.Event{}, ctxDone
	}
	if ok {
		s.last = time.Now()
		return ev, gotEvent
	}
	if f := waitResult(s.fired.Load()); f != gotEvent {
		return watch.Event{}, f
	}
	return watch.Event{}, streamClosed
}
