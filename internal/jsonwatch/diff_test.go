package jsonwatch

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"reflect"
	"strings"
	"testing"

	"k8s.io/apimachinery/pkg/api/resource"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/util/intstr"
	utiljson "k8s.io/apimachinery/pkg/util/json"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/projection"
)

// The differential tests hold the direct decoder to apimachinery's: for
// any one event's bytes, both give equal events, or both fail.
//
// The reference is the path client-go's dynamic client takes: the event
// decoded into a metav1.WatchEvent with apimachinery's JSON rules
// (k8s.io/apimachinery/pkg/util/json), its type checked, its object
// decoded by unstructured.UnstructuredJSONScheme into an Unstructured
// (the dynamic client's serializer creates one for the kind the object
// names, and decodes into it). An ERROR event's object is a
// metav1.Status, as there. Typed objects are decoded with the same JSON
// rules into the Go type, as the scheme's JSON serializer does, and their
// kind and apiVersion cleared after, as typed clients' codecs do.

// reference decodes one event as apimachinery does; strip removes
// metadata.managedFields afterwards, as the informer would.
func reference(event []byte, f *Format) (watch.Event, error) {
	var we metav1.WatchEvent
	if err := utiljson.Unmarshal(event, &we); err != nil {
		return watch.Event{}, err
	}
	et := watch.EventType(we.Type)
	if !valid(et) {
		return watch.Event{}, fmt.Errorf("invalid type %q", we.Type)
	}
	if et == watch.Error {
		st := &metav1.Status{}
		if we.Object.Raw == nil {
			return watch.Event{}, errors.New("no object")
		}
		if err := utiljson.Unmarshal(we.Object.Raw, st); err != nil {
			return watch.Event{}, err
		}
		return watch.Event{Type: et, Object: st}, nil
	}
	if f.New != nil {
		obj := f.New()
		if we.Object.Raw == nil {
			return watch.Event{}, errors.New("no object")
		}
		raw := we.Object.Raw
		if f.StripManagedFields {
			raw = withoutManagedFields(raw)
		}
		if err := utiljson.Unmarshal(raw, obj); err != nil {
			return watch.Event{}, err
		}
		if k := obj.GetObjectKind().GroupVersionKind().Kind; k != f.Kind {
			return watch.Event{}, fmt.Errorf("kind %q", k)
		}
		obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{}) // as the typed clients' codec does
		if f.StripManagedFields {
			if m, ok := obj.(metav1.Object); ok {
				m.SetManagedFields(nil)
			}
		}
		return watch.Event{Type: et, Object: obj}, nil
	}
	u := &unstructured.Unstructured{}
	if _, _, err := unstructured.UnstructuredJSONScheme.Decode(we.Object.Raw, nil, u); err != nil {
		return watch.Event{}, err
	}
	if f.StripManagedFields {
		if md, ok := u.Object["metadata"].(map[string]any); ok {
			delete(md, "managedFields")
		}
	}
	return watch.Event{Type: et, Object: u}, nil
}

// withoutManagedFields replaces each value of metadata.managedFields in an
// object's bytes by null, whatever it held: stripped, it is skipped
// unread, as if it were absent (a fresh object's field stays nil either
// way).
func withoutManagedFields(raw []byte) []byte {
	spans := members(raw, "metadata")
	out := []byte{}
	last := 0
	for _, md := range spans {
		for _, mf := range members(raw[md[0]:md[1]], "managedFields") {
			out = append(out, raw[last:md[0]+mf[0]]...)
			out = append(out, "null"...)
			last = md[0] + mf[1]
		}
	}
	return append(out, raw[last:]...)
}

// members returns the byte spans of the values of every member called name
// of the object in raw; none if raw is not one.
func members(raw []byte, name string) [][2]int {
	dec := json.NewDecoder(bytes.NewReader(raw))
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return nil
	}
	var spans [][2]int
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil
		}
		var v json.RawMessage
		if err := dec.Decode(&v); err != nil {
			return nil
		}
		if tok == name {
			end := int(dec.InputOffset())
			spans = append(spans, [2]int{end - len(v), end})
		}
	}
	return spans
}

// direct decodes the first event of a stream with a Reader.
func direct(stream []byte, f *Format) (watch.Event, error) {
	r := NewDecoder(f).NewReader(io.NopCloser(bytes.NewReader(stream)))
	defer r.Close()
	return r.Next()
}

// firstValue returns the first JSON value of a stream as client-go's
// framer would cut it, or false if there is none.
func firstValue(stream []byte) ([]byte, bool) {
	var raw jsonRaw
	dec := newStdDecoder(stream)
	if err := dec.Decode(&raw); err != nil {
		return nil, false
	}
	return raw, true
}

// compare checks that the direct decoder agrees with the reference on one
// stream's first event.
func compare(t *testing.T, stream []byte, f *Format) {
	t.Helper()
	got, gotErr := direct(stream, f)
	event, ok := firstValue(stream)
	if !ok {
		if gotErr == nil {
			t.Fatalf("%q: not one JSON value, yet decoded to %v", stream, got)
		}
		return
	}
	want, wantErr := reference(event, f)
	switch {
	case (gotErr == nil) != (wantErr == nil):
		t.Fatalf("%q:\ndirect:    %v, %v\nreference: %v, %v", stream, describe(got), gotErr, describe(want), wantErr)
	case gotErr == nil && !reflect.DeepEqual(got, want):
		t.Fatalf("%q:\ndirect:    %s\nreference: %s", stream, describe(got), describe(want))
	}
}

func describe(ev watch.Event) string {
	if u, ok := ev.Object.(*unstructured.Unstructured); ok {
		return fmt.Sprintf("%s %#v", ev.Type, u.Object)
	}
	return fmt.Sprintf("%s %#v", ev.Type, ev.Object)
}

var unstructuredFormat = &Format{StripManagedFields: true, ShareContainers: true}

// eventCases are single events: realistic ones and the odd cases where
// encoding/json's rules are easy to get wrong.
var eventCases = []string{
	widgetEvent,
	`{"type":"ADDED","object":{"kind":"Widget","apiVersion":"bench.kinformer.io/v1","metadata":{"name":"a"}}}`,
	// numbers: ints, floats, exponents, negative zero, beyond int64, beyond float64
	`{"type":"MODIFIED","object":{"kind":"W","metadata":{"name":"n"},"spec":{"a":1,"b":-0,"c":1.0,"d":1e3,"e":-1E-2,"f":9223372036854775807,"g":9223372036854775808,"h":-9223372036854775808,"i":-9223372036854775809,"j":12345678901234567890123,"k":0.1,"l":5e-324,"m":1e-400}}}`,
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"n"},"spec":{"big":1e400}}}`,
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"n"},"spec":[1,{"x":[1e999]}]}}`,
	// strings: escapes, surrogate pairs, lone surrogates, invalid UTF-8
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"\u0061\n\t\"\\\/"},"s":"\ud83d\ude00 \ud800 \udc00x \u00e9 é"}}`,
	"{\"type\":\"ADDED\",\"object\":{\"kind\":\"W\",\"metadata\":{\"name\":\"a\"},\"s\":\"\xff\xfe ok \xc3\x28\",\"\xe2\x82\":1}}",
	// names: escaped, duplicated (the last wins), empty
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a"},"\u006bind":"V","x":1,"x":2,"":3}}`,
	`{"\u0074ype":"ADDED","object":{"kind":"W","metadata":{"name":"a"}},"type":"DELETED","extra":[1,2,{"a":null}]}`,
	// the envelope: the object first, duplicated, missing, null; odd types
	`{"object":{"kind":"W","metadata":{"name":"a"}},"type":"ADDED"}`,
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a"}},"object":{"kind":"W","metadata":{"name":"b"}}}`,
	`{"type":"ADDED"}`,
	`{"type":"ADDED","object":null}`,
	`{"type":"ADDED","object":[]}`,
	`{"type":"ADDED","object":"x"}`,
	`{"type":"added","object":{"kind":"W","metadata":{"name":"a"}}}`,
	`{"type":1,"object":{"kind":"W","metadata":{"name":"a"}}}`,
	`{"type":null,"object":{"kind":"W","metadata":{"name":"a"}}}`,
	`{"type":1,"object":{"kind":"W","metadata":{"name":"a"}},"type":"ADDED"}`,
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a"}},"type":null}`,
	`{"type":"ADDED","object":{"kind":"W","x":1e999},"object":{"kind":"W","metadata":{"name":"b"}}}`,
	`{"Type":"ADDED","object":{"kind":"W","metadata":{"name":"a"}}}`,
	`{"type":"ADDED","Object":{"kind":"W","metadata":{"name":"a"}}}`,
	`[]`,
	`"ADDED"`,
	`{}`,
	// kinds: missing, not a string, hidden by a bad apiVersion; a list
	`{"type":"ADDED","object":{"metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{"kind":7,"metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{"kind":"W","apiVersion":"a/b/c","metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{"kind":"W","apiVersion":"/","metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{"kind":"WList","apiVersion":"v1","items":[{"kind":"W"}],"metadata":{}}}`,
	// managedFields: stripped only from the top-level metadata
	`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"a","managedFields":[{"manager":"m","fieldsV1":{"f:spec":{}}}]},"spec":{"metadata":{"managedFields":1},"managedFields":2}}}`,
	`{"type":"ADDED","object":{"kind":"W","metadata":"not an object","managedFields":[]}}`,
	// bookmarks and errors
	`{"type":"BOOKMARK","object":{"kind":"W","apiVersion":"v1","metadata":{"resourceVersion":"12","creationTimestamp":null,"annotations":{"k8s.io/initial-events-end":"true"}}}}`,
	`{"type":"ERROR","object":{"kind":"Status","apiVersion":"v1","metadata":{},"status":"Failure","message":"too old resource version: 1 (2)","reason":"Expired","code":410}}`,
	`{"type":"ERROR","object":{"kind":"Status","code":"410"}}`,
	`{"object":{"kind":"Status","code":500},"type":"ERROR"}`,
	// syntax errors and truncation
	`{"type":"ADDED","object":{"kind":"W",}}`,
	`{"type":"ADDED","object":{"kind":"W"`,
	`{"type":"ADDED","object":{"kind":"W","x":01}}`,
	`{"type":"ADDED","object":{"kind":"W","x":"a` + "\x01" + `"}}`,
	``,
	` `,
}

const widgetEvent = `{"type":"ADDED","object":{"apiVersion":"bench.kinformer.io/v1","kind":"Widget","metadata":{"annotations":{"bench.kinformer.io/note":"n-00001"},"creationTimestamp":"2026-11-30T10:00:00Z","generation":1,"labels":{"app":"bench","tier":"t3","id":"w-00001"},"managedFields":[{"apiVersion":"bench.kinformer.io/v1","fieldsType":"FieldsV1","fieldsV1":{"f:metadata":{"f:labels":{".":{},"f:app":{}}},"f:spec":{".":{},"f:replicas":{}}},"manager":"bench","operation":"Update","time":"2026-11-30T10:00:00Z"}],"name":"w-00001","namespace":"bench-crd","resourceVersion":"4711","uid":"0b9b7f5e-8f7c-4f45-9d62-1c1f1b0e3a11"},"spec":{"replicas":3,"ratio":0.75,"enabled":true,"owner":null,"tags":["a","b","c"],"ports":[{"name":"http","port":8080},{"name":"https","port":8443}],"template":{"image":"registry.example/app:v1.2.3","resources":{"cpu":"250m","memory":"128Mi"},"env":[{"name":"A","value":"1"}]}},"status":{"phase":"Ready","observedGeneration":1,"conditions":[{"type":"Ready","status":"True","lastTransitionTime":"2026-11-30T10:00:01Z"}]}}}`

func TestMatchesApimachineryUnstructured(t *testing.T) {
	for _, strip := range []bool{true, false} {
		f := &Format{StripManagedFields: strip}
		for _, c := range eventCases {
			compare(t, []byte(c), f)
			compare(t, []byte(c+"\n"+widgetEvent), f)
		}
	}
}

// widget is a typed custom resource, the kubebuilder shape.
type widget struct {
	metav1.TypeMeta   `json:",inline"`
	metav1.ObjectMeta `json:"metadata,omitempty"`
	Spec              widgetSpec   `json:"spec,omitempty"`
	Status            widgetStatus `json:"status,omitempty"`
}

type widgetSpec struct {
	Replicas *int32               `json:"replicas,omitempty"`
	Ratio    float64              `json:"ratio,omitempty"`
	Enabled  bool                 `json:"enabled"`
	Owner    *string              `json:"owner"`
	Tags     []string             `json:"tags,omitempty"`
	Ports    []port               `json:"ports,omitempty"`
	Template map[string]any       `json:"template,omitempty"`
	Extra    runtime.RawExtension `json:"extra,omitempty"`
	Size     resource.Quantity    `json:"size,omitempty"`
	Target   intstr.IntOrString   `json:"target,omitempty"`
	Any      any                  `json:"any,omitempty"`
	Since    metav1.Time          `json:"since,omitempty"`
}

type port struct {
	Name string `json:"name"`
	Port int32  `json:"port"`
}

type widgetStatus struct {
	Phase              string             `json:"phase,omitempty"`
	ObservedGeneration int64              `json:"observedGeneration,omitempty"`
	Conditions         []metav1.Condition `json:"conditions,omitempty"`
}

func (w *widget) DeepCopyObject() runtime.Object { panic("not needed") }

var typedFormat = &Format{New: func() runtime.Object { return &widget{} }, Kind: "Widget", StripManagedFields: true, ShareContainers: true}

var typedCases = []string{
	widgetEvent,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"replicas":"3"}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"replicas":3000000000}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"ratio":1e400}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"any":{"a":1,"b":1.5,"c":[1,2e3]},"template":{"n":-7}}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"extra":{"x":[1,2]},"size":"1.5Gi","target":"http","since":"2026-11-30T10:00:00Z"}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"target":8080,"size":"bogus"}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"Spec":{"replicas":3},"spec":{"Replicas":4}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"tags":null,"owner":null,"enabled":null}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a","labels":{"a":"b"},"labels":{"c":"d"}}}}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a"},"spec":{"tags":"x"}}}`,
	`{"type":"ADDED","object":{"kind":"Gadget","metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":{"metadata":{"name":"a"}}}`,
	`{"type":"ADDED","object":[1]}`,
	`{"type":"ADDED","object":null}`,
	`{"type":"ADDED","object":{"kind":"Widget","metadata":{"name":"a","managedFields":"bogus"}}}`,
	"{\"type\":\"ADDED\",\"object\":{\"kind\":\"Widget\",\"metadata\":{\"name\":\"\xff\"}}}",
	`{"object":{"kind":"Widget","metadata":{"name":"a"}},"type":"MODIFIED"}`,
	`{"type":"ERROR","object":{"kind":"Status","code":410,"reason":"Expired"}}`,
}

func TestMatchesApimachineryTyped(t *testing.T) {
	for _, strip := range []bool{true, false} {
		f := *typedFormat
		f.StripManagedFields = strip
		for _, c := range typedCases {
			compare(t, []byte(c), &f)
			compare(t, []byte(c+widgetEvent), &f)
		}
	}
}

func FuzzDecodeEvent(f *testing.F) {
	for _, c := range eventCases {
		f.Add([]byte(c), false)
	}
	for _, c := range typedCases {
		f.Add([]byte(c), true)
	}
	f.Fuzz(func(t *testing.T, event []byte, typed bool) {
		// The reference refuses what is nested deeper than 10,000; so does
		// the tokenizer, but the counts differ at the edge.
		if bytes.Count(event, []byte("["))+bytes.Count(event, []byte("{")) > 5000 {
			return
		}
		if typed {
			compare(t, event, typedFormat)
		} else {
			compare(t, event, unstructuredFormat)
		}
	})
}

// TestStream: a stream of events, one of them not understood, goes on
// past it; a truncated event ends it with ErrTruncated, and a clean end
// with io.EOF.
func TestStream(t *testing.T) {
	stream := strings.Join([]string{
		widgetEvent,
		`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"n"},"spec":{"big":[1e400,{"a":[1]}],"after":1}}}`,
		`{"type":"BOOKMARK","object":{"kind":"W","metadata":{"resourceVersion":"5"}}}`,
		`{"type":"ADDED","object":{"kind":"W","metadata":{"name":"late"}}}`,
	}, "\n") + "\n"
	r := NewDecoder(unstructuredFormat).NewReader(io.NopCloser(strings.NewReader(stream)))
	var got []string
	for {
		ev, err := r.Next()
		if err == io.EOF {
			break
		}
		var ee *EventError
		switch {
		case errors.As(err, &ee):
			got = append(got, "error:"+string(ee.Type))
			continue
		case err != nil:
			t.Fatal(err)
		}
		got = append(got, string(ev.Type)+":"+ev.Object.(*unstructured.Unstructured).GetName())
	}
	want := []string{"ADDED:w-00001", "error:ADDED", "BOOKMARK:", "ADDED:late"}
	if !reflect.DeepEqual(got, want) {
		t.Fatalf("got %v, want %v", got, want)
	}

	r = NewDecoder(unstructuredFormat).NewReader(io.NopCloser(strings.NewReader(widgetEvent + widgetEvent[:100])))
	if _, err := r.Next(); err != nil {
		t.Fatal(err)
	}
	if _, err := r.Next(); !errors.Is(err, ErrTruncated) {
		t.Fatalf("truncated event: got %v, want ErrTruncated", err)
	}
	if _, err := r.Next(); err != io.EOF {
		t.Fatalf("after a broken stream: got %v, want io.EOF", err)
	}

	r = NewDecoder(unstructuredFormat).NewReader(io.NopCloser(strings.NewReader("\x00\x00\x01\x02k8s\x00 protobuf")))
	if _, err := r.Next(); !errors.Is(err, ErrNotJSON) {
		t.Fatalf("not JSON: got %v, want ErrNotJSON", err)
	}
}

// TestSharing: objects share their names and short values, boxed once.
func TestSharing(t *testing.T) {
	d := NewDecoder(unstructuredFormat)
	r := d.NewReader(io.NopCloser(strings.NewReader(widgetEvent + widgetEvent)))
	a, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	b, err := r.Next()
	if err != nil {
		t.Fatal(err)
	}
	ua, ub := a.Object.(*unstructured.Unstructured), b.Object.(*unstructured.Unstructured)
	if !reflect.DeepEqual(ua, ub) {
		t.Fatal("the same event decoded twice differs")
	}
	sa, sb := ua.Object["spec"].(map[string]any), ub.Object["spec"].(map[string]any)
	if pa, pb := ifacePtr(sa["template"].(map[string]any)["image"]), ifacePtr(sb["template"].(map[string]any)["image"]); pa != pb {
		t.Errorf("a short string value is not shared: %x vs %x", pa, pb)
	}
	if _, ok := ua.Object["metadata"].(map[string]any)["managedFields"]; ok {
		t.Error("managedFields kept")
	}
}

// Format.Fields: an event decoded with a projection is the whole event's
// decoding with the fields left out cleared (projection.Apply), wherever
// the whole decodes; a bookmark keeps its annotations.
func TestProjectionMatchesApply(t *testing.T) {
	paths := []string{"spec.replicas", "spec.ports.port", "status.conditions", "metadata.labels", "s", "x"}
	untyped, err := projection.Compile(nil, paths)
	if err != nil {
		t.Fatal(err)
	}
	typedFields, err := projection.Compile(reflect.TypeFor[*widget](), paths[:4])
	if err != nil {
		t.Fatal(err)
	}
	check := func(c string, f, whole *Format, fields *projection.Fields) {
		t.Helper()
		want, wantErr := direct([]byte(c), whole)
		if wantErr != nil {
			return // a value left out may be what fails the whole
		}
		got, err := direct([]byte(c), f)
		if err != nil {
			t.Fatalf("%q: %v; the whole decodes", c, err)
		}
		if want.Type != watch.Bookmark && want.Type != watch.Error {
			if u, ok := want.Object.(*unstructured.Unstructured); ok {
				fields.Apply(u.Object)
			} else {
				fields.Apply(want.Object)
			}
		}
		if !reflect.DeepEqual(got, want) {
			t.Fatalf("%q:\nprojected: %s\nwant:      %s", c, describe(got), describe(want))
		}
	}
	for _, c := range eventCases {
		check(c, &Format{StripManagedFields: true, Fields: untyped}, &Format{StripManagedFields: true}, untyped)
	}
	for _, c := range typedCases {
		f, whole := *typedFormat, *typedFormat
		f.Fields = typedFields
		check(c, &f, &whole, typedFields)
	}
}
