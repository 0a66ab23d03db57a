package protowatch

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
)

// ErrNotProtobuf means not even the first frame of a stream could be read:
// the server (or a proxy) ignored the Accept header.
var ErrNotProtobuf = errors.New("the server answered a protobuf watch with something else")

// Reader reads the events of one protobuf watch stream on its caller's
// goroutine. Close may be called from any goroutine, also while Next is
// blocked reading: that is how a deadline or a cancellation ends a read.
type Reader struct {
	body   io.ReadCloser
	dec    decoder
	once   sync.Once
	closed atomic.Bool // by Close: a read error is then ours
	frames int
	broken bool // an unreadable stream was reported: it is over
}

// NewReader returns a Reader of body, decoding objects as f says.
func NewReader(body io.ReadCloser, f *Format) *Reader {
	return &Reader{body: body, dec: decoder{f: f, r: bufio.NewReaderSize(body, 64<<10)}}
}

// RawOf returns the bytes of obj if it is the last object Next returned
// and the Format keeps them (KeepRaw): they decode to obj as it was
// decoded. nil otherwise. The bytes are the caller's.
func (r *Reader) RawOf(obj any) []byte {
	if r.dec.raw == nil || obj != any(r.dec.rawObj) {
		return nil
	}
	return r.dec.raw
}

// Close closes the body; safe to call from any goroutine, more than once.
func (r *Reader) Close() {
	r.once.Do(func() {
		r.closed.Store(true)
		r.body.Close()
	})
}

// Next returns the next event. Its errors:
//   - io.EOF: the stream ended — closed by the server, the network or
//     Close — and the watch can resume from the last resourceVersion;
//   - an *EventError: one event was not understood; the stream goes on;
//   - ErrNotProtobuf (wrapped): not a protobuf stream at all;
//   - anything else, such as ErrTruncated or ErrFrameTooLarge (wrapped):
//     the stream is unreadable from here; the next call returns io.EOF.
//
// A stream that ends between frames ends; one that ends inside a frame was
// cut, and that is an error (ErrTruncated): the events before it count, but
// the server did not end the watch as it should.
func (r *Reader) Next() (watch.Event, error) {
	if r.broken {
		return watch.Event{}, io.EOF
	}
	ev, err := r.dec.next()
	var ee *EventError
	if err == nil || errors.As(err, &ee) {
		r.frames++
		return ev, err
	}
	var netErr net.Error
	if r.closed.Load() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()) {
		return watch.Event{}, io.EOF
	}
	r.broken = true
	// A truncated frame says nothing about the format (the connection was
	// cut); a first frame too large to be one says the body is something
	// else: JSON's `{"ty` reads as a length of 2 GiB.
	if r.frames == 0 && !errors.Is(err, ErrTruncated) {
		return watch.Event{}, fmt.Errorf("%w: %v", ErrNotProtobuf, err)
	}
	return watch.Event{}, fmt.Errorf("unreadable watch stream: %w", err)
}
