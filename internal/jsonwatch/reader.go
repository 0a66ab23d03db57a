// Package jsonwatch decodes Kubernetes JSON watch streams in one pass,
// straight into the objects: the custom resources and unstructured objects
// that have no protobuf form.
//
// client-go decodes a JSON watch event three times over: the framer finds
// the event's end, the event is decoded into a metav1.WatchEvent whose
// object is copied out as raw bytes, and those bytes are decoded again into
// the object, managedFields and all. Here a tokenizer (jsontext) reads the
// stream once; the event's fields are walked as they come and its object is
// built from the same tokens, managedFields skipped without being decoded,
// object names and short values interned so that objects share them.
//
// Objects are what apimachinery's decoders give for the same bytes (see
// values); the package's differential tests and fuzz target hold it to
// that.
package jsonwatch

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"

	"github.com/go-json-experiment/json/jsontext"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/projection"
)

// MediaType is what a JSON watch is asked for with.
const MediaType = "application/json"

// ErrNotJSON means not even the first event of a stream could be read: the
// server (or a proxy) answered with something else.
var ErrNotJSON = errors.New("the server answered a JSON watch with something else")

// ErrTruncated means the stream ended inside an event.
var ErrTruncated = errors.New("truncated event")

// ErrEventTooLarge means an event went on past its bound (Format.MaxEvent).
var ErrEventTooLarge = errors.New("event too large")

// MaxEvent bounds one event: etcd refuses objects far smaller, so a longer
// event means the stream is not what it claims to be, and reading on would
// only fill memory.
const MaxEvent = 64 << 20

// EventError is an event that was read to its end but not understood: the
// stream can go on.
type EventError struct {
	Type watch.EventType // as the event said, possibly empty
	Err  error
}

func (e *EventError) Error() string { return e.Err.Error() }
func (e *EventError) Unwrap() error { return e.Err }

// Format says how to decode the objects of one watch.
type Format struct {
	// New makes an empty typed object, which the object is decoded into
	// with Go's JSON rules as apimachinery applies them; nil decodes
	// *unstructured.Unstructured.
	New func() runtime.Object
	// Kind is the kind every typed object must have ("": any).
	Kind string
	// StripManagedFields skips metadata.managedFields.
	StripManagedFields bool
	// Share, if set, makes typed objects share strings and maps with
	// earlier ones (unstructured objects always share interned names and
	// values, which are immutable). It must be used by the Reader's
	// goroutine only.
	Share *intern.Sharer
	// MaxEvent bounds one event's bytes; 0 means the package's MaxEvent.
	MaxEvent int64
	// Fields, if set, keeps only some fields of each object: the others
	// are skipped unread in the token stream.
	Fields *projection.Fields
	// Lazy leaves unstructured objects undecoded where it can (see
	// raw.go): for a compact cache, which keeps their JSON as it came. Not
	// with ShareContainers.
	Lazy bool
	// ShareContainers makes small objects and arrays of interned values
	// (in unstructured objects, and in typed objects' interface{} fields)
	// shared between objects. Only for objects nothing modifies after
	// decoding: not before a Transform.
	ShareContainers bool
}

// Reader reads the events of one JSON watch stream on its caller's
// goroutine. Close may be called from any goroutine, also while Next is
// blocked reading: that is how a deadline or a cancellation ends a read.
type Reader struct {
	body   io.ReadCloser
	lim    *limited // the body as the tokenizer reads it
	max    int64    // bytes an event may have
	dec    *jsontext.Decoder
	f      *Format
	vals   *values
	typed  *typed // nil for unstructured
	once   sync.Once
	closed atomic.Bool
	events int
	broken bool
	copy   *rawCopy // Format.Lazy's; nil until used
}

// Decoders keep what they learnt between watches: the interned names and
// values, the typed options. A Decoder belongs to one goroutine, which
// reads one stream at a time.
type Decoder struct {
	f     *Format
	vals  values
	typed *typed
}

// NewDecoder returns a Decoder of objects as f says.
func NewDecoder(f *Format) *Decoder {
	d := &Decoder{f: f}
	d.vals.strip = f.StripManagedFields
	d.vals.shareContainers = f.ShareContainers
	if f.Fields != nil {
		d.vals.project = f.Fields.Root()
	}
	if f.New != nil {
		d.typed = newTyped(&d.vals, f.StripManagedFields)
	}
	return d
}

// NewReader returns a Reader of body. Readers of one Decoder must be used
// one after the other, not at once.
func (d *Decoder) NewReader(body io.ReadCloser) *Reader {
	lim := &limited{r: body, limit: d.maxEvent()}
	dec := jsontext.NewDecoder(lim, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return &Reader{body: body, lim: lim, dec: dec, max: d.maxEvent(), f: d.f, vals: &d.vals, typed: d.typed}
}

func (d *Decoder) maxEvent() int64 {
	if d.f.MaxEvent > 0 {
		return d.f.MaxEvent
	}
	return MaxEvent
}

// limited reads no further than limit bytes into the body.
type limited struct {
	r        io.Reader
	n, limit int64
}

func (l *limited) Read(p []byte) (int, error) {
	if l.n >= l.limit {
		return 0, ErrEventTooLarge
	}
	if room := l.limit - l.n; int64(len(p)) > room {
		p = p[:room]
	}
	n, err := l.r.Read(p)
	l.n += int64(n)
	return n, err
}

// Close closes the body; safe to call from any goroutine, more than once.
func (r *Reader) Close() {
	r.once.Do(func() {
		r.closed.Store(true)
		r.body.Close()
	})
}

// Next returns the next event. Its errors:
//   - io.EOF: the stream ended between events — closed by the server, the
//     network or Close — and the watch can resume from the last
//     resourceVersion;
//   - an *EventError: one event was not understood; the stream goes on;
//   - ErrNotJSON (wrapped): not a JSON stream at all;
//   - anything else, such as ErrTruncated (wrapped): the stream is
//     unreadable from here; the next call returns io.EOF.
func (r *Reader) Next() (watch.Event, error) {
	if r.broken {
		return watch.Event{}, io.EOF
	}
	r.vals.dec = r.dec
	ev, err := r.next()
	var ee *EventError
	if err == nil || errors.As(err, &ee) {
		r.events++
		return ev, err
	}
	// The stream is over either way: let go of the tokenizer's buffer,
	// which may have grown for a large event, before the next watch.
	r.broken = true
	r.dec, r.vals.dec = nil, nil
	var netErr net.Error
	if r.closed.Load() || err == io.EOF || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()) {
		return watch.Event{}, io.EOF
	}
	switch {
	case errors.Is(err, ErrEventTooLarge):
		return watch.Event{}, fmt.Errorf("unreadable watch stream: %w: more than %d bytes", ErrEventTooLarge, r.max)
	case errors.Is(err, io.ErrUnexpectedEOF):
		return watch.Event{}, fmt.Errorf("unreadable watch stream: %w: the stream ended inside an event", ErrTruncated)
	}
	if r.events == 0 {
		return watch.Event{}, fmt.Errorf("%w: %v", ErrNotJSON, err)
	}
	return watch.Event{}, fmt.Errorf("unreadable watch stream: %w", err)
}

func eventError(et watch.EventType, format string, args ...any) error {
	return &EventError{Type: et, Err: fmt.Errorf(format, args...)}
}

// next reads one event: {"type": T, "object": O}, in any order, other
// members ignored, the last of duplicates winning, as metav1.WatchEvent's
// decoding has it. The object is decoded as it is read when the type came
// first, as servers send it; else it is kept as bytes until the end.
func (r *Reader) next() (watch.Event, error) {
	dec := r.vals.dec
	r.lim.limit = dec.InputOffset() + r.max
	switch k := dec.PeekKind(); k {
	case '{':
	case 0:
		_, err := dec.ReadToken() // io.EOF at the end, or what is wrong
		return watch.Event{}, err
	default:
		if err := dec.SkipValue(); err != nil {
			return watch.Event{}, err
		}
		return watch.Event{}, eventError("", "watch event: a JSON %s, not an object", k)
	}
	if _, err := dec.ReadToken(); err != nil {
		return watch.Event{}, err
	}
	var (
		et       watch.EventType
		typeSeen bool
		typeErr  error
		obj      runtime.Object
		objErr   error
		raw      []byte // the object, when it came before the type
		objSeen  bool
	)
	for dec.PeekKind() != '}' {
		name, _, err := r.vals.name()
		if err != nil {
			return watch.Event{}, err
		}
		switch name {
		case "type":
			typeSeen = true
			if k := dec.PeekKind(); k != '"' {
				if err := dec.SkipValue(); err != nil {
					return watch.Event{}, err
				}
				if k != 'n' { // null leaves the type as it was; anything else fails the event, as encoding/json does
					typeErr = errors.New("watch event: its type is not a string")
				}
				continue
			}
			v, err := dec.ReadValue()
			if err != nil {
				return watch.Event{}, err
			}
			et = eventType(v, r.vals)
		case "object":
			objSeen, obj, objErr, raw = true, nil, nil, nil
			if typeSeen && et != watch.Error {
				obj, objErr = r.object(et, r.f.Lazy)
				if objErr != nil && !errors.Is(objErr, errSemantic) {
					return watch.Event{}, objErr
				}
				continue
			}
			v, err := dec.ReadValue()
			if err != nil {
				return watch.Event{}, err
			}
			raw = bytes.Clone(v)
		default:
			if err := dec.SkipValue(); err != nil {
				return watch.Event{}, err
			}
		}
	}
	if _, err := dec.ReadToken(); err != nil {
		return watch.Event{}, err
	}
	switch {
	case typeErr != nil:
		return watch.Event{}, eventError("", "%w", typeErr)
	case !valid(et):
		return watch.Event{}, eventError(et, "watch event: type %q", et)
	case !objSeen || (raw == nil && obj == nil && objErr == nil):
		return watch.Event{}, eventError(et, "%s event without an object", et)
	}
	if et == watch.Error {
		if raw == nil {
			// Decoded before a later "type" made it an ERROR: a server
			// never sends that.
			return watch.Event{}, eventError(et, "ERROR event: the object came before its type")
		}
		st := &metav1.Status{}
		if err := utiljson.Unmarshal(raw, st); err != nil {
			return watch.Event{}, eventError(et, "ERROR event: Status: %w", err)
		}
		return watch.Event{Type: et, Object: st}, nil
	}
	if raw != nil {
		obj, objErr = r.objectFrom(raw, et)
	}
	if objErr != nil {
		return watch.Event{}, eventError(et, "%s event: %w", et, objErr)
	}
	return watch.Event{Type: et, Object: obj}, nil
}

// object decodes the object at the decoder's position. An error wrapping
// errSemantic means it was read to its end but not understood.
// A bookmark's object is not projected: what it says is in its
// annotations.
func (r *Reader) object(et watch.EventType, lazy bool) (runtime.Object, error) {
	sel := r.vals.project
	if et == watch.Bookmark {
		sel = nil
	}
	if r.typed != nil {
		return r.typed.decode(r.f, false, sel != nil)
	}
	if lazy && r.vals.dec.PeekKind() == '{' && (et == watch.Added || et == watch.Modified || et == watch.Deleted) {
		raw, ok, err := r.raw(sel)
		switch {
		case err != nil:
			return nil, err
		case ok:
			return raw, nil
		}
		// Decoded from the copy: it fails, or is what a decode gives.
		return r.objectFrom(bytes.Clone(r.copy.buf.Bytes()), et)
	}
	if r.vals.dec.PeekKind() != '{' {
		if _, err := r.vals.value(levelOther); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: the object is not a JSON object", errSemantic)
	}
	m, _, err := r.vals.object(levelTop, sel)
	if err != nil {
		return nil, err
	}
	u := &unstructured.Unstructured{Object: m}
	if u.GroupVersionKind().Kind == "" { // as apimachinery: a bad apiVersion hides the kind too
		return nil, fmt.Errorf("%w: Object 'Kind' is missing", errSemantic)
	}
	return u, nil
}

// objectFrom decodes an object kept as bytes.
func (r *Reader) objectFrom(raw []byte, et watch.EventType) (runtime.Object, error) {
	dec := r.vals.dec
	defer func() { r.vals.dec = dec }()
	r.vals.dec = jsontext.NewDecoder(bytes.NewReader(raw), jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
	return r.object(et, false)
}

// valid reports the five event types there are.
func valid(et watch.EventType) bool {
	switch et {
	case watch.Added, watch.Modified, watch.Deleted, watch.Bookmark, watch.Error:
		return true
	}
	return false
}

// eventType maps a raw JSON string to the watch constant without
// allocating.
func eventType(v jsontext.Value, vals *values) watch.EventType {
	switch string(v) {
	case `"ADDED"`:
		return watch.Added
	case `"MODIFIED"`:
		return watch.Modified
	case `"DELETED"`:
		return watch.Deleted
	case `"BOOKMARK"`:
		return watch.Bookmark
	case `"ERROR"`:
		return watch.Error
	}
	return watch.EventType(vals.str(v))
}
