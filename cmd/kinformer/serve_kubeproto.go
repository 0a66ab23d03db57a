package main

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"mime"
	"runtime"
	"strings"
	"sync"
	"weak"

	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/runtime/serializer/protobuf"
	"k8s.io/apimachinery/pkg/runtime/serializer/streaming"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes/scheme"
	restwatch "k8s.io/client-go/rest/watch"
)

// --kube-api's protobuf, for the built-in types (client-go's scheme), as
// the API server encodes them: an object in its envelope ("k8s\0" and
// runtime.Unknown), a watch as length-delimited frames of
// metav1.WatchEvent, each embedding its object so encoded. The caches hold
// unstructured objects: each is converted to its Go type as it is sent.

const (
	contentTypeProtobuf      = "application/vnd.kubernetes.protobuf"
	contentTypeProtobufWatch = "application/vnd.kubernetes.protobuf;stream=watch"
)

var (
	protoSerializer = protobuf.NewSerializer(scheme.Scheme, scheme.Scheme)
	protoRaw        = protobuf.NewRawSerializer(scheme.Scheme, scheme.Scheme)
)

// kubeNegotiate picks what to answer in from an Accept header: protobuf
// if the client asks for it before JSON and gvk is a built-in type, JSON
// if it takes JSON (or says nothing); ok false if neither (406). jsonOK:
// the client takes JSON too, where protobuf would lose fields.
func kubeNegotiate(accept string, gvk schema.GroupVersionKind) (proto, jsonOK, ok bool) {
	if accept == "" {
		return false, true, true
	}
	for _, part := range strings.Split(accept, ",") {
		mt, params, err := mime.ParseMediaType(strings.TrimSpace(part))
		if err != nil || params["as"] != "" {
			continue // a Table, PartialObjectMetadata: not served
		}
		switch mt {
		case contentTypeProtobuf:
			if scheme.Scheme.Recognizes(gvk) {
				proto, ok = true, true
			}
		case "application/json", "*/*", "application/*":
			return proto, true, true
		}
	}
	return proto, false, ok
}

// lossyError says that an object has fields its Go type lacks (a cluster
// newer than serve's build): its protobuf, made from the Go type, would
// lose them. JSON keeps them.
type lossyError struct{ err error }

func (e *lossyError) Error() string { return e.err.Error() }

// protoChecked remembers the objects found to have no field their Go type
// lacks: the check (a strict conversion, twice the cost of a plain one)
// is made once for each object the cache holds, not for every list that
// sends it. An object is remembered by its pointer, weakly: the cache
// replaces an object on a change, never changes one it holds, so an
// object's content is its pointer's; an entry goes when its object is
// collected (a version replaced or deleted, an object made for one
// request). nil checks every time.
type protoChecked struct {
	m sync.Map // weak.Pointer[unstructured.Unstructured] -> struct{}
}

func (c *protoChecked) has(o *unstructured.Unstructured) bool {
	if c == nil {
		return false
	}
	_, ok := c.m.Load(weak.Make(o))
	return ok
}

func (c *protoChecked) add(o *unstructured.Unstructured) {
	if c == nil {
		return
	}
	wp := weak.Make(o)
	if _, had := c.m.LoadOrStore(wp, struct{}{}); !had {
		runtime.AddCleanup(o, func(wp weak.Pointer[unstructured.Unstructured]) { c.m.Delete(wp) }, wp)
	}
}

// len is how many objects are remembered.
func (c *protoChecked) len() int {
	n := 0
	c.m.Range(func(any, any) bool { n++; return true })
	return n
}

// typedObject converts o to its Go type. A *lossyError comes with the
// object converted (without the fields its type lacks). checked spares
// the check of a version already checked.
func typedObject(o *unstructured.Unstructured, checked *protoChecked) (kruntime.Object, error) {
	typed, err := scheme.Scheme.New(o.GroupVersionKind())
	if err != nil {
		return nil, err
	}
	strict := !checked.has(o)
	switch err := kruntime.DefaultUnstructuredConverter.FromUnstructuredWithValidation(o.UnstructuredContent(), typed, strict); {
	case kruntime.IsStrictDecodingError(err):
		return typed, &lossyError{fmt.Errorf("%s %s/%s has fields serve's %T lacks, which protobuf would lose (%w)", o.GetKind(), o.GetNamespace(), o.GetName(), typed, err)}
	case err != nil:
		return nil, fmt.Errorf("%s %s/%s as %T: %w", o.GetKind(), o.GetNamespace(), o.GetName(), typed, err)
	case strict:
		checked.add(o)
	}
	return typed, nil
}

// isLossy reports whether err is a *lossyError.
func isLossy(err error) bool {
	var l *lossyError
	return errors.As(err, &l)
}

// writeProtoObject writes o in protobuf. An object with fields its type
// lacks is written without them if allowLossy, else not at all; lossy
// says which (a *lossyError), nil for others.
func writeProtoObject(w io.Writer, o *unstructured.Unstructured, checked *protoChecked, allowLossy bool) (lossy, err error) {
	typed, err := typedObject(o, checked)
	if isLossy(err) {
		if lossy = err; !allowLossy {
			return lossy, nil
		}
		err = nil
	}
	if err != nil {
		return nil, err
	}
	return lossy, protoSerializer.Encode(typed, w)
}

// writeProtoList writes objs as gvk's list (ConfigMapList for a
// ConfigMap), at resourceVersion rv, with continue token cont; as
// writeProtoObject for an object with fields its type lacks.
func writeProtoList(w io.Writer, gvk schema.GroupVersionKind, objs []*unstructured.Unstructured, rv, cont string, checked *protoChecked, allowLossy bool) (lossy, err error) {
	list, err := scheme.Scheme.New(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	if err != nil {
		return nil, err
	}
	items := make([]kruntime.Object, 0, len(objs))
	for _, o := range objs {
		typed, err := typedObject(o, checked)
		if isLossy(err) {
			if lossy == nil {
				lossy = err
			}
			if !allowLossy {
				return lossy, nil
			}
			err = nil
		}
		if err != nil {
			return nil, err
		}
		items = append(items, typed)
	}
	if err := meta.SetList(list, items); err != nil {
		return lossy, err
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return lossy, err
	}
	lm.SetResourceVersion(rv)
	lm.SetContinue(cont)
	list.GetObjectKind().SetGroupVersionKind(gvk.GroupVersion().WithKind(gvk.Kind + "List"))
	return lossy, protoSerializer.Encode(list, w)
}

// protoEncoded is an object's protobuf (in its envelope), made once
// however many watch it (kubeEvent.proto); lossy if the object has fields
// its Go type lacks (the protobuf does not).
type protoEncoded struct {
	once  sync.Once
	b     []byte
	lossy error // a *lossyError, or nil
	err   error
}

// of returns o's protobuf, encoding it the first time.
func (p *protoEncoded) of(o *unstructured.Unstructured, checked *protoChecked) (b []byte, lossy, err error) {
	p.once.Do(func() {
		var buf bytes.Buffer
		var lossy error
		if lossy, p.err = writeProtoObject(&buf, o, checked, true); p.err == nil {
			p.b, p.lossy = buf.Bytes(), lossy
		}
	})
	return p.b, p.lossy, p.err
}

// protoWatchEncoder writes watch events as the API server's protobuf
// stream does.
type protoWatchEncoder struct {
	enc     *restwatch.Encoder // an object's event, encoding the object
	frames  streaming.Encoder  // an event whose object is encoded already
	gvk     schema.GroupVersionKind
	jsonOK  bool // the client takes JSON: an event protobuf would lose fields of ends the watch
	checked *protoChecked
	lossy   bool // an event was of an object with fields its Go type lacks
}

func newProtoWatchEncoder(w io.Writer, gvk schema.GroupVersionKind, jsonOK bool, checked *protoChecked) *protoWatchEncoder {
	fw := protobuf.LengthDelimitedFramer.NewFrameWriter(w)
	frames := streaming.NewEncoder(fw, protoRaw)
	return &protoWatchEncoder{enc: restwatch.NewEncoder(frames, protoSerializer), frames: frames, gvk: gvk, jsonOK: jsonOK, checked: checked}
}

// event writes an event of o, whose protobuf pe holds (nil: o's own,
// made here). An object that does not convert to its Go type ends the
// watch with an ERROR event naming it (its client lists again, and the
// list says the same): never a change left out silently. One whose
// protobuf would lose fields, if the client takes JSON, is not written:
// an ERROR event 410 Expired ends the watch (a *lossyError), and its
// client lists again, answered in JSON (not a watch from the last
// version it had: initial events are not in version order, and one
// after it may be unsent); if not, it is written without them.
func (p *protoWatchEncoder) event(typ string, o *unstructured.Unstructured, pe *protoEncoded) error {
	if pe == nil {
		pe = new(protoEncoded)
	}
	b, lossy, err := pe.of(o, p.checked)
	if err != nil {
		st := apierrors.NewInternalError(err).Status()
		st.Kind, st.APIVersion = "Status", "v1"
		if werr := p.status(&st); werr != nil {
			return werr
		}
		return err
	}
	if lossy != nil {
		p.lossy = true
		if p.jsonOK {
			st := apierrors.NewResourceExpired(fmt.Sprintf("%v: list again (answered in JSON from now on)", lossy)).Status()
			st.Kind, st.APIVersion = "Status", "v1"
			if werr := p.status(&st); werr != nil {
				return werr
			}
			return lossy
		}
	}
	return p.frames.Encode(&metav1.WatchEvent{Type: typ, Object: kruntime.RawExtension{Raw: b}})
}

func (p *protoWatchEncoder) bookmark(rv string, end bool) error {
	typed, err := scheme.Scheme.New(p.gvk)
	if err != nil {
		return err
	}
	typed.GetObjectKind().SetGroupVersionKind(p.gvk)
	m, err := meta.Accessor(typed)
	if err != nil {
		return err
	}
	m.SetResourceVersion(rv)
	if end {
		m.SetAnnotations(map[string]string{initialEventsEnd: "true"})
	}
	return p.enc.Encode(&watch.Event{Type: watch.Bookmark, Object: typed})
}

func (p *protoWatchEncoder) status(st *metav1.Status) error {
	return p.enc.Encode(&watch.Event{Type: watch.Error, Object: st})
}
