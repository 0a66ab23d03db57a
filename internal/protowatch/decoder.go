package protowatch

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/projection"
)

const (
	// maxFrame bounds one frame; etcd refuses objects far smaller, so a
	// longer frame means the stream is not what it claims to be.
	maxFrame = 64 << 20
	// keepBuffer: a buffer grown past this for one large object is dropped
	// afterwards rather than kept for the life of the watch.
	keepBuffer = 1 << 20
)

// Object is what a Format decodes: every built-in Kubernetes type, with its
// generated Unmarshal.
type Object interface {
	runtime.Object
	Unmarshal([]byte) error
}

// Format says how to decode the objects of one watch: their kind, how to
// make one, and what to do with their metadata's bytes.
type Format struct {
	Kind string        // the kind every object must have
	New  func() Object // a new, empty object of the kind
	// Layout holds the protobuf field numbers of the metadata fields cut
	// out before decoding; a zero Layout leaves the bytes alone.
	Layout Layout
	// StripManagedFields cuts metadata.managedFields out of the bytes.
	StripManagedFields bool
	// Share, if set, makes objects share labels and annotations maps found
	// by their wire bytes (never decoding a map seen before) and interns
	// their strings. It must be used by the Reader's goroutine only.
	Share *intern.Sharer
	// KeepRaw keeps a copy of each object's bytes as decoded (managedFields
	// cut, if StripManagedFields), for Reader.RawOf: a compact cache keeps
	// them instead of encoding the object again. Not with Share, whose
	// cuts make bytes that do not decode to the object.
	KeepRaw bool
	// Lazy leaves the objects of ADDED, MODIFIED and DELETED events
	// undecoded: the event's Object is a *Raw, its bytes (managedFields
	// cut, if StripManagedFields) and the metadata read from them, for a
	// compact cache to keep and decode on read. An object whose bytes
	// cannot be cut or read so, or that Check does not pass, is decoded
	// as usual. Not with Share.
	Lazy bool
	// Check is the objects' type's (CheckOf): which bytes Lazy may leave
	// undecoded, because its Unmarshal would accept them. nil: none.
	Check *Check
	// Project, if set, keeps only some fields of each object: the others
	// are cut from its bytes before anything else is done with them (the
	// bytes kept, left undecoded or decoded are the projected ones).
	// Bytes it cannot walk are decoded whole, and the fields cleared from
	// the object. It must be used by the Reader's goroutine only.
	Project *projection.Projector
}

// Raw is an object a Lazy Format left undecoded: its bytes, which decode
// to the object (managedFields cut), and what its metadata says.
type Raw struct {
	Data []byte
	Meta Meta
}

// GetObjectKind and DeepCopyObject make a Raw a runtime.Object, as a
// watch.Event's Object must be.
func (r *Raw) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }

func (r *Raw) DeepCopyObject() runtime.Object {
	c := *r
	c.Data = bytes.Clone(r.Data)
	return &c
}

// EventError is an event whose frame was intact but whose content was not
// understood: the stream can go on.
type EventError struct {
	Type watch.EventType // as the frame said, possibly empty
	Err  error
}

func (e *EventError) Error() string { return e.Err.Error() }
func (e *EventError) Unwrap() error { return e.Err }

// decoder reads and decodes one frame at a time.
type decoder struct {
	f       *Format
	r       *bufio.Reader
	frame   []byte // reused for every frame
	scratch []byte // reused for objects with metadata fields cut out
	lkey    []byte // reused: the wire bytes of the labels
	akey    []byte // reused: the wire bytes of the annotations
	// rawObj is the last object decoded and raw its bytes (Format.KeepRaw),
	// if they decode to it.
	rawObj Object
	raw    []byte
	// walked: the last rewriteMeta found the metadata and walked it (the
	// bytes it returned have no managedFields, if stripped).
	walked bool
}

var k8sMagic = []byte{0x6b, 0x38, 0x73, 0x00} // "k8s\0": runtime.Unknown follows

// ErrTruncated means the stream ended inside a frame: in its 4-byte length
// or before as many bytes as the length declared.
var ErrTruncated = errors.New("truncated frame")

// ErrFrameTooLarge means a frame declared a length above maxFrame.
var ErrFrameTooLarge = errors.New("frame too large")

// next reads one frame. An *EventError means the frame was read but not
// understood; any other error means the stream cannot go on.
func (d *decoder) next() (watch.Event, error) {
	var hdr [4]byte
	for got := 0; got < len(hdr); {
		m, err := d.r.Read(hdr[got:])
		got += m
		switch {
		case got == len(hdr):
		case err == io.EOF && got == 0:
			return watch.Event{}, io.EOF // between frames: the end of the stream
		case err == io.EOF:
			return watch.Event{}, fmt.Errorf("%w: the stream ended %d bytes into a frame's 4-byte length", ErrTruncated, got)
		case err != nil:
			return watch.Event{}, err
		}
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return watch.Event{}, fmt.Errorf("%w: a frame of %d bytes, more than the %d allowed", ErrFrameTooLarge, n, maxFrame)
	}
	buf, err := d.read(int(n))
	if err != nil {
		return watch.Event{}, err
	}
	ev, err := d.decode(buf)
	if cap(d.frame) > keepBuffer {
		d.frame = nil
	}
	if cap(d.scratch) > keepBuffer {
		d.scratch = nil
	}
	if cap(d.lkey) > keepBuffer || cap(d.akey) > keepBuffer {
		d.lkey, d.akey = nil, nil
	}
	return ev, err
}

// read reads the n bytes of a frame into d.frame. The buffer grows as the
// bytes arrive, not to the declared length up front: a length is only a
// claim, and a stream that claims 64 MiB and sends nothing more must not
// cost 64 MiB. Doubling keeps a large frame to a few copies.
//
// Only a clean end of the body inside a frame is ErrTruncated (the server
// ended the response there); a connection lost mid-frame is the
// transport's error, as it would be between frames.
func (d *decoder) read(n int) ([]byte, error) {
	buf := d.frame[:0]
	for len(buf) < n {
		if len(buf) == cap(buf) {
			grown := make([]byte, len(buf), min(n, max(2*cap(buf), 4096)))
			copy(grown, buf)
			buf = grown
			d.frame = buf
		}
		m, err := d.r.Read(buf[len(buf):min(n, cap(buf))])
		buf = buf[:len(buf)+m]
		switch {
		case len(buf) == n:
		case err == io.EOF:
			return nil, fmt.Errorf("%w: the stream ended %d bytes into a frame of %d", ErrTruncated, len(buf), n)
		case err != nil:
			return nil, err
		}
	}
	return buf, nil
}

func eventError(et watch.EventType, format string, args ...any) error {
	return &EventError{Type: et, Err: fmt.Errorf(format, args...)}
}

// decode decodes a metav1.WatchEvent{1: type, 2: RawExtension{1: raw}}
// whose raw object is "k8s\0" + runtime.Unknown{1: TypeMeta{1: apiVersion,
// 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}.
func (d *decoder) decode(frame []byte) (watch.Event, error) {
	var typ, ext []byte
	if err := eachField(frame, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			typ = v
		case 2:
			ext = v
		}
	}); err != nil {
		return watch.Event{}, eventError("", "watch event: %w", err)
	}
	et := eventType(typ)
	var raw []byte
	if err := eachField(ext, func(num protowire.Number, v []byte) {
		if num == 1 {
			raw = v
		}
	}); err != nil {
		return watch.Event{}, eventError(et, "%s event: object: %w", et, err)
	}
	if !bytes.HasPrefix(raw, k8sMagic) {
		return watch.Event{}, eventError(et, "%s event: object is not a protobuf-encoded Kubernetes object", et)
	}
	var typeMeta, obj, encoding, contentType []byte
	if err := eachField(raw[len(k8sMagic):], func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			typeMeta = v
		case 2:
			obj = v
		case 3:
			encoding = v
		case 4:
			contentType = v
		}
	}); err != nil {
		return watch.Event{}, eventError(et, "%s event: envelope: %w", et, err)
	}
	if len(encoding) != 0 || (len(contentType) != 0 && !bytes.HasPrefix(contentType, []byte("application/vnd.kubernetes.protobuf"))) {
		return watch.Event{}, eventError(et, "%s event: object encoded as %q %q", et, encoding, contentType)
	}
	var kind []byte
	_ = eachField(typeMeta, func(num protowire.Number, v []byte) {
		if num == 2 {
			kind = v
		}
	})
	if et == watch.Error || string(kind) == "Status" {
		st := &metav1.Status{}
		if err := st.Unmarshal(obj); err != nil {
			return watch.Event{}, eventError(et, "%s event: Status: %w", et, err)
		}
		if et != watch.Error {
			return watch.Event{}, eventError(et, "%s event with a Status: %s", et, st.Message)
		}
		return watch.Event{Type: et, Object: st}, nil
	}
	if string(kind) != d.f.Kind {
		return watch.Event{}, eventError(et, "%s event with an object of kind %q, want %q", et, kind, d.f.Kind)
	}
	// whole: bytes the projection could not walk, decoded whole and the
	// object cleared after (they are not the object's bytes).
	whole := false
	if d.f.Project != nil && et != watch.Bookmark { // a bookmark's annotations say what it is
		if p, ok := d.f.Project.Proto(obj); ok {
			obj = p
		} else {
			whole = true
		}
	}
	if d.f.Lazy && d.f.Share == nil && !whole && (et == watch.Added || et == watch.Modified || et == watch.Deleted) {
		if raw, ok := d.lazy(obj); ok {
			return watch.Event{Type: et, Object: raw}, nil
		}
	}
	o := d.f.New()
	var labels, annotations map[string]string
	if d.f.StripManagedFields || d.f.Share != nil {
		obj, labels, annotations = d.rewriteMeta(obj)
	}
	if err := o.Unmarshal(obj); err != nil {
		return watch.Event{}, eventError(et, "%s event: %s: %w", et, d.f.Kind, err)
	}
	if whole {
		d.f.Project.Fields().Apply(o)
	}
	m := intern.ObjectMeta(o)
	d.rawObj, d.raw = nil, nil
	if d.f.KeepRaw && d.f.Share == nil && !whole && !(d.f.StripManagedFields && m != nil && len(m.ManagedFields) > 0) {
		// Bytes rewriteMeta could not walk keep their managedFields:
		// the object loses them below, so they are not its bytes.
		d.rawObj, d.raw = o, bytes.Clone(obj)
	}
	if m != nil && d.f.StripManagedFields {
		// rewriteMeta leaves bytes it cannot walk (metadata twice, a
		// varint protowire refuses) to Unmarshal, managedFields and all.
		m.ManagedFields = nil
	}
	if sh := d.f.Share; sh != nil {
		if m != nil {
			d.shareMaps(sh, m, labels, annotations)
		}
		sh.ObjectStrings(o)
	}
	return watch.Event{Type: et, Object: o}, nil
}

// lazy returns obj undecoded (Format.Lazy), managedFields cut; false if
// its metadata cannot be cut or read without decoding.
func (d *decoder) lazy(obj []byte) (*Raw, bool) {
	if d.f.Layout.Meta == 0 {
		return nil, false
	}
	if d.f.StripManagedFields {
		if obj, _, _ = d.rewriteMeta(obj); !d.walked {
			return nil, false
		}
	}
	if d.f.Check == nil || !d.f.Check.Valid(obj) {
		// Bytes that might not decode are decoded now, so that they
		// fail as an Error event when they arrive, as without Lazy,
		// rather than be kept and skipped at every read.
		return nil, false
	}
	m, ok := ReadMeta(obj, d.f.Layout.Meta)
	if !ok {
		return nil, false
	}
	return &Raw{Data: bytes.Clone(obj), Meta: m}, true
}

// shareMaps gives m the shared maps found by rewriteMeta, or remembers m's
// own maps for the next objects with the same wire bytes.
func (d *decoder) shareMaps(sh *intern.Sharer, m *metav1.ObjectMeta, labels, annotations map[string]string) {
	if labels != nil {
		m.Labels = labels
	} else {
		sh.RememberWireMap(d.lkey, m.Labels, true)
	}
	if annotations != nil {
		m.Annotations = annotations
	} else {
		sh.RememberWireMap(d.akey, m.Annotations, false) // values: mostly unique
	}
}

// eventType maps the wire name to the watch constant without allocating.
func eventType(b []byte) watch.EventType {
	switch string(b) {
	case "ADDED":
		return watch.Added
	case "MODIFIED":
		return watch.Modified
	case "DELETED":
		return watch.Deleted
	case "BOOKMARK":
		return watch.Bookmark
	case "ERROR":
		return watch.Error
	}
	return watch.EventType(b)
}

// eachField calls fn with the number and content of every length-delimited
// field of msg, skipping fields of other wire types.
func eachField(msg []byte, fn func(protowire.Number, []byte)) error {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return fieldError(msg, off, "tag", n)
		}
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg[off+n:])
			if m < 0 {
				return fieldError(msg, off, fmt.Sprintf("field %d", num), m)
			}
			fn(num, v)
			off += n + m
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[off+n:])
		if m < 0 {
			return fieldError(msg, off, fmt.Sprintf("field %d", num), m)
		}
		off += n + m
	}
	return nil
}

// fieldError says where a message stopped parsing and why, in words: a
// truncated varint or length says so rather than "unexpected EOF".
func fieldError(msg []byte, off int, what string, code int) error {
	why := protowire.ParseError(code).Error()
	if errors.Is(protowire.ParseError(code), io.ErrUnexpectedEOF) {
		why = "truncated: a varint or length runs past the end"
	}
	return fmt.Errorf("%s at byte %d of %d: %s", what, off, len(msg), why)
}
