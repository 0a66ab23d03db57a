package kinformer

import (
	"bufio"
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"reflect"
	"slices"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"

	"google.golang.org/protobuf/encoding/protowire"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	utilnet "k8s.io/apimachinery/pkg/util/net"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/rest"
)

// Direct decoding. client-go decodes a protobuf watch stream in three
// copies: the frame, then WatchEvent.Object.Raw, then runtime.Unknown.Raw,
// before the object itself; and it decodes managedFields only for the
// informer to drop them. For a built-in type watched through a clientset's
// typed client, kinformer opens the watch itself on the client's REST client
// and decodes the stream straight into T: each frame is read into one
// reused buffer, the WatchEvent and runtime.Unknown envelopes are walked in
// place, managedFields are cut out of the wire bytes (unless kept), and T's
// generated Unmarshal copies out only what the object keeps. The stream is
// read on the informer's own loop goroutine (stream.go), not handed over
// from a decoding goroutine event by event.

const (
	// protobufWatch is the media type of a protobuf watch stream: frames of
	// a 4-byte big-endian length, then a metav1.WatchEvent.
	protobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
	// maxFrame bounds one frame; etcd refuses objects far smaller, so a
	// longer frame means the stream is not what it claims to be.
	maxFrame = 64 << 20
	// keepBuffer: a buffer grown past this for one large object is dropped
	// afterwards rather than kept for the life of the watch.
	keepBuffer = 1 << 20
)

// protoUnmarshaler is implemented by every built-in Kubernetes type (the
// gogo-generated Unmarshal).
type protoUnmarshaler interface {
	Unmarshal([]byte) error
}

// restScoped is what client-go's typed resource clients (gentype.Client)
// offer besides List and Watch.
type restScoped interface {
	GetClient() rest.Interface
	GetNamespace() string
}

// directSource opens watches that kinformer decodes itself. It is used by
// the informer's loop goroutine only.
type directSource[T Object] struct {
	client    rest.Interface
	namespace string
	kind      string // T's kind, matched against discovery
	resource  string // the resource's plural name, found on first use
	newObj    func() T
	// The protobuf field numbers of T.ObjectMeta and of ObjectMeta's
	// managedFields, labels and annotations, read from their struct tags;
	// metaField is 0 if T's layout is not the usual one.
	metaField, managedField, labelsField, annotationsField protowire.Number
	strip                                                  bool // cut managedFields out of the bytes
	// share: intern the objects' strings and share equal labels and
	// annotations maps, found by their wire bytes before they are decoded.
	// Only without Options.Transform, which may modify maps in place.
	share  bool
	sharer sharer // its maps keyed by wire bytes; used by the loop's goroutine
	// notProto: a stream's first frame was unreadable (a server or proxy
	// that ignored Accept): the next watches go through the client.
	notProto atomic.Bool
}

// newDirectSource returns a directSource for lw if it is a typed client of
// a real server and T is a protobuf type; else nil, and the informer uses
// lw's own Watch.
func newDirectSource[T Object](lw any, keepManagedFields, share bool) *directSource[T] {
	rs, ok := lw.(restScoped)
	if !ok || !mayStream(lw) {
		return nil
	}
	t := reflect.TypeFor[T]()
	if t.Kind() != reflect.Pointer || t.Elem().Kind() != reflect.Struct {
		return nil
	}
	if _, ok := any(*new(T)).(protoUnmarshaler); !ok {
		return nil
	}
	client := rs.GetClient()
	if v := reflect.ValueOf(client); !v.IsValid() || (v.Kind() == reflect.Pointer && v.IsNil()) {
		return nil
	}
	elem := t.Elem()
	d := &directSource[T]{
		client:    client,
		namespace: rs.GetNamespace(),
		kind:      elem.Name(),
		newObj:    func() T { return reflect.New(elem).Interface().(T) },
	}
	d.metaField, d.managedField, d.labelsField, d.annotationsField = metaLayout(elem)
	d.strip = !keepManagedFields && d.metaField != 0
	d.share = share && d.metaField != 0
	return d
}

// metaLayout returns the protobuf field numbers of T's embedded ObjectMeta
// and of ObjectMeta's managedFields, labels and annotations, or zeros if
// any is not found; the decoder then leaves metadata bytes alone.
func metaLayout(elem reflect.Type) (meta, managed, labels, annotations protowire.Number) {
	f, ok := elem.FieldByName("ObjectMeta")
	if !ok || f.Type != reflect.TypeFor[metav1.ObjectMeta]() || len(f.Index) != 1 {
		return 0, 0, 0, 0
	}
	num := func(name string) protowire.Number {
		sf, _ := f.Type.FieldByName(name)
		return protoFieldNumber(sf.Tag)
	}
	meta, managed, labels, annotations = protoFieldNumber(f.Tag), num("ManagedFields"), num("Labels"), num("Annotations")
	if meta == 0 || managed == 0 || labels == 0 || annotations == 0 {
		return 0, 0, 0, 0
	}
	return meta, managed, labels, annotations
}

// protoFieldNumber reads the number of a `protobuf:"bytes,17,rep,..."` tag.
func protoFieldNumber(tag reflect.StructTag) protowire.Number {
	parts := strings.Split(tag.Get("protobuf"), ",")
	if len(parts) < 2 || parts[0] != "bytes" {
		return 0
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 {
		return 0
	}
	return protowire.Number(n)
}

// errNoDirect says the server or the resource does not allow direct
// decoding; the informer goes back to the client's Watch for good.
var errNoDirect = errors.New("direct decoding not possible")

// resolve finds the resource's plural name by discovery: the one resource
// of the client's group version whose kind is T's and that can be watched.
func (d *directSource[T]) resolve(ctx context.Context) error {
	if d.resource != "" {
		return nil
	}
	body, err := d.client.Get().SetHeader("Accept", "application/json").DoRaw(ctx)
	if _, isStatus := err.(apierrors.APIStatus); isStatus && IsPersistent(err) {
		// Discovery refused (403, 404, …): the client's Watch may still
		// work. Anything else (503 while the server starts, a timeout) is
		// retried with the watch.
		return fmt.Errorf("%w: discovery: %v", errNoDirect, err)
	}
	if err != nil {
		return err
	}
	var list metav1.APIResourceList
	if err := json.Unmarshal(body, &list); err != nil {
		return fmt.Errorf("%w: discovery: %v", errNoDirect, err)
	}
	var found []string
	for _, r := range list.APIResources {
		if r.Kind == d.kind && !strings.Contains(r.Name, "/") && slices.Contains(r.Verbs, "watch") {
			found = append(found, r.Name)
		}
	}
	if len(found) != 1 {
		return fmt.Errorf("%w: %d watchable resources of kind %s in %s", errNoDirect, len(found), d.kind, list.GroupVersion)
	}
	d.resource = found[0]
	return nil
}

// watch opens a watch for the loop's goroutine to read and decode itself.
func (d *directSource[T]) watch(ctx context.Context, opts metav1.ListOptions) (*directReader, error) {
	if d.notProto.Load() {
		return nil, fmt.Errorf("%w: the server answered a protobuf watch with something else", errNoDirect)
	}
	if err := d.resolve(ctx); err != nil {
		return nil, err
	}
	opts.Watch = true
	body, err := d.client.Get().
		NamespaceIfScoped(d.namespace, d.namespace != "").
		Resource(d.resource).
		VersionedParams(&opts, metav1.ParameterCodec).
		SetHeader("Accept", protobufWatch).
		Throttle(nil). // as client-go's Watch: watches are not rate-limited
		Stream(ctx)
	if err != nil {
		if apierrors.IsNotAcceptable(err) || apierrors.IsUnsupportedMediaType(err) {
			return nil, fmt.Errorf("%w: %v", errNoDirect, err)
		}
		return nil, err
	}
	dec := &frameDecoder[T]{src: d, r: bufio.NewReaderSize(body, 64<<10)}
	return &directReader{body: body, decode: dec.next, notProto: &d.notProto}, nil
}

// directReader reads a protobuf watch stream on its caller's goroutine.
type directReader struct {
	body     io.ReadCloser
	decode   func() (watch.Event, error) // reads and decodes one frame
	notProto *atomic.Bool
	once     sync.Once
	closed   atomic.Bool // by close: a read error is then ours
	frames   int
	broken   bool // an unreadable stream was reported: it is over
}

// close closes the body; safe to call from any goroutine, more than once,
// also while next is blocked reading.
func (r *directReader) close() {
	r.once.Do(func() {
		r.closed.Store(true)
		r.body.Close()
	})
}

// next returns the next event, or false when the stream has ended.
func (r *directReader) next() (watch.Event, bool) {
	if r.broken {
		return watch.Event{}, false
	}
	ev, err := r.decode()
	if err == nil {
		r.frames++
		return ev, true
	}
	var netErr net.Error
	if r.closed.Load() || errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) || utilnet.IsProbableEOF(err) ||
		errors.Is(err, context.Canceled) || errors.Is(err, context.DeadlineExceeded) ||
		(errors.As(err, &netErr) && netErr.Timeout()) {
		return watch.Event{}, false // ended by the server, the network or us: resume from the last version
	}
	// The stream cannot be trusted past this point. If not even its first
	// frame could be read, it is not a protobuf stream at all: the next
	// watches go through the client.
	if r.frames == 0 {
		r.notProto.Store(true)
	}
	r.broken = true
	return watch.Event{Type: watch.Error, Object: &metav1.Status{
		Status:  metav1.StatusFailure,
		Code:    http.StatusInternalServerError,
		Reason:  metav1.StatusReasonInternalError,
		Message: "unreadable watch stream: " + err.Error(),
	}}, true
}

// decodeFailure is the object of an event whose frame was intact but whose
// content was not understood: the informer reports it and goes on.
type decodeFailure struct{ err error }

func (d *decodeFailure) GetObjectKind() schema.ObjectKind { return schema.EmptyObjectKind }
func (d *decodeFailure) DeepCopyObject() runtime.Object   { return d }

// frameDecoder reads and decodes one frame at a time.
type frameDecoder[T Object] struct {
	src     *directSource[T]
	r       *bufio.Reader
	frame   []byte // reused for every frame
	scratch []byte // reused for objects with metadata fields cut out
	lkey    []byte // reused: the wire bytes of the labels
	akey    []byte // reused: the wire bytes of the annotations
}

var k8sMagic = []byte{0x6b, 0x38, 0x73, 0x00} // "k8s\0": runtime.Unknown follows

// next reads one frame. An error means the stream cannot go on; a frame it
// could read but not decode is returned as an event with a *decodeFailure.
func (f *frameDecoder[T]) next() (watch.Event, error) {
	var hdr [4]byte
	if _, err := io.ReadFull(f.r, hdr[:]); err != nil {
		return watch.Event{}, err
	}
	n := binary.BigEndian.Uint32(hdr[:])
	if n > maxFrame {
		return watch.Event{}, fmt.Errorf("a frame of %d bytes, more than %d: not a protobuf watch stream", n, maxFrame)
	}
	if uint32(cap(f.frame)) < n {
		f.frame = make([]byte, max(n, 2*uint32(cap(f.frame)), 4096))
	}
	buf := f.frame[:n]
	if _, err := io.ReadFull(f.r, buf); err != nil {
		return watch.Event{}, err
	}
	ev := f.decode(buf)
	if cap(f.frame) > keepBuffer {
		f.frame = nil
	}
	if cap(f.scratch) > keepBuffer {
		f.scratch = nil
	}
	if cap(f.lkey) > keepBuffer || cap(f.akey) > keepBuffer {
		f.lkey, f.akey = nil, nil
	}
	return ev, nil
}

// decode decodes a metav1.WatchEvent{1: type, 2: RawExtension{1: raw}}
// whose raw object is "k8s\0" + runtime.Unknown{1: TypeMeta{1: apiVersion,
// 2: kind}, 2: raw, 3: contentEncoding, 4: contentType}.
func (f *frameDecoder[T]) decode(frame []byte) watch.Event {
	var typ, ext []byte
	if err := eachField(frame, func(num protowire.Number, v []byte) {
		switch num {
		case 1:
			typ = v
		case 2:
			ext = v
		}
	}); err != nil {
		return failed("", fmt.Errorf("watch event: %w", err))
	}
	et := eventType(typ)
	var raw []byte
	if err := eachField(ext, func(num protowire.Number, v []byte) {
		if num == 1 {
			raw = v
		}
	}); err != nil {
		return failed(et, fmt.Errorf("%s event: object: %w", et, err))
	}
	if !bytes.HasPrefix(raw, k8sMagic) {
		return failed(et, fmt.Errorf("%s event: object is not a protobuf-encoded Kubernetes object", et))
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
		return failed(et, fmt.Errorf("%s event: envelope: %w", et, err))
	}
	if len(encoding) != 0 || (len(contentType) != 0 && !bytes.HasPrefix(contentType, []byte("application/vnd.kubernetes.protobuf"))) {
		return failed(et, fmt.Errorf("%s event: object encoded as %q %q", et, encoding, contentType))
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
			return failed(et, fmt.Errorf("%s event: Status: %w", et, err))
		}
		if et != watch.Error {
			return failed(et, fmt.Errorf("%s event with a Status: %s", et, st.Message))
		}
		return watch.Event{Type: et, Object: st}
	}
	if string(kind) != f.src.kind {
		return failed(et, fmt.Errorf("%s event with an object of kind %q, want %q", et, kind, f.src.kind))
	}
	o := f.src.newObj()
	var labels, annotations map[string]string
	if f.src.strip || f.src.share {
		obj, labels, annotations = f.rewriteMeta(obj)
	}
	if err := any(o).(protoUnmarshaler).Unmarshal(obj); err != nil {
		return failed(et, fmt.Errorf("%s event: %s: %w", et, f.src.kind, err))
	}
	if f.src.share {
		f.shareMaps(objectMeta(o), labels, annotations)
		f.src.sharer.internObject(o, true)
	}
	return watch.Event{Type: et, Object: o}
}

// shareMaps gives m the shared maps found by rewriteMeta, or remembers m's
// own (interned) maps for the next objects with the same wire bytes.
func (f *frameDecoder[T]) shareMaps(m *metav1.ObjectMeta, labels, annotations map[string]string) {
	if m == nil {
		return
	}
	if labels != nil {
		m.Labels = labels
	} else if m.Labels != nil && shareable(f.lkey) {
		f.src.sharer.internMap(m.Labels, true)
		f.src.sharer.maps.put(string(f.lkey), m.Labels)
	}
	if annotations != nil {
		m.Annotations = annotations
	} else if m.Annotations != nil && shareable(f.akey) {
		f.src.sharer.internMap(m.Annotations, false)
		f.src.sharer.maps.put(string(f.akey), m.Annotations)
	}
}

func shareable(key []byte) bool { return len(key) > 0 && len(key) <= mapPoolMaxBytes }

func failed(et watch.EventType, err error) watch.Event {
	return watch.Event{Type: et, Object: &decodeFailure{err: fmt.Errorf("%w: %w", ErrUnexpectedObject, err)}}
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
	for len(msg) > 0 {
		num, typ, n := protowire.ConsumeTag(msg)
		if n < 0 {
			return protowire.ParseError(n)
		}
		msg = msg[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg)
			if m < 0 {
				return protowire.ParseError(m)
			}
			fn(num, v)
			msg = msg[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg)
		if m < 0 {
			return protowire.ParseError(m)
		}
		msg = msg[m:]
	}
	return nil
}

// rewriteMeta cuts fields out of the object's metadata before it is
// decoded: managedFields (if stripped), and labels and annotations whose
// exact wire bytes an earlier object had, whose decoded maps it returns for
// the object to share. It leaves the wire bytes of the labels and
// annotations in f.lkey and f.akey. The result is in f.scratch, or obj
// itself when nothing is cut or the bytes do not parse (Unmarshal then says
// what is wrong).
func (f *frameDecoder[T]) rewriteMeta(obj []byte) (out []byte, labels, annotations map[string]string) {
	src := f.src
	f.lkey, f.akey = f.lkey[:0], f.akey[:0]
	// bail leaves the bytes to Unmarshal, and nothing to remember under a
	// partial key.
	bail := func() ([]byte, map[string]string, map[string]string) {
		f.lkey, f.akey = f.lkey[:0], f.akey[:0]
		return obj, nil, nil
	}
	// Find the metadata field.
	start, tagLen, end := -1, 0, 0
	var meta []byte
	for off := 0; off < len(obj); {
		num, typ, n := protowire.ConsumeTag(obj[off:])
		if n < 0 {
			return obj, nil, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, obj[off+n:])
		if m < 0 {
			return obj, nil, nil
		}
		if num == src.metaField && start >= 0 {
			return bail() // metadata twice: Unmarshal merges them
		}
		if num == src.metaField && typ == protowire.BytesType {
			meta, _ = protowire.ConsumeBytes(obj[off+n:])
			start, tagLen, end = off, n, off+n+m
		}
		off += n + m
	}
	if start < 0 {
		return obj, nil, nil
	}
	// Collect its labels and annotations, see whether managedFields are there.
	managed := false
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		if n < 0 {
			return bail()
		}
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if m < 0 {
			return bail()
		}
		if (num == src.managedField || num == src.labelsField || num == src.annotationsField) && typ != protowire.BytesType {
			return bail() // not what ObjectMeta has there: let Unmarshal say so
		}
		switch num {
		case src.managedField:
			managed = true
		case src.labelsField:
			f.lkey = append(f.lkey, meta[off:off+n+m]...)
		case src.annotationsField:
			f.akey = append(f.akey, meta[off:off+n+m]...)
		}
		off += n + m
	}
	var drop [3]protowire.Number
	if src.strip && managed {
		drop[0] = src.managedField
	}
	if src.share {
		var ok bool
		if shareable(f.lkey) {
			if labels, ok = src.sharer.maps.get(f.lkey); ok {
				drop[1] = src.labelsField
			}
		}
		if shareable(f.akey) {
			if annotations, ok = src.sharer.maps.get(f.akey); ok {
				drop[2] = src.annotationsField
			}
		}
	}
	if drop == [3]protowire.Number{} {
		return obj, labels, annotations
	}
	kept := 0
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if num != drop[0] && num != drop[1] && num != drop[2] {
			kept += n + m
		}
		off += n + m
	}
	out = append(f.scratch[:0], obj[:start]...)
	out = append(out, obj[start:start+tagLen]...)
	out = protowire.AppendVarint(out, uint64(kept))
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if num != drop[0] && num != drop[1] && num != drop[2] {
			out = append(out, meta[off:off+n+m]...)
		}
		off += n + m
	}
	out = append(out, obj[end:]...)
	f.scratch = out
	return out, labels, annotations
}
