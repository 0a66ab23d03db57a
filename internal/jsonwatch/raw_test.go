package jsonwatch

import (
	"bytes"
	"reflect"
	"testing"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"

	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// lazyEqual checks Format.Lazy on one stream: an event left undecoded
// holds bytes that decode (as a compact cache decodes them) to what the
// event decoded without Lazy holds, and metadata that is that object's;
// any other outcome is the one without Lazy, errors included.
func lazyEqual(t *testing.T, stream []byte, f Format) (undecoded bool) {
	t.Helper()
	whole, wholeErr := direct(stream, &f)
	lazy := f
	lazy.Lazy = true
	got, err := direct(stream, &lazy)
	raw, ok := got.Object.(*protowatch.Raw)
	if !ok {
		if (err == nil) != (wholeErr == nil) || !reflect.DeepEqual(got, whole) {
			t.Fatalf("%q:\nlazy:  %s, %v\nwhole: %s, %v", stream, describe(got), err, describe(whole), wholeErr)
		}
		return false
	}
	if wholeErr != nil {
		t.Fatalf("%q: left undecoded, but it does not decode: %v", stream, wholeErr)
	}
	obj, err := NewDecoder(&Format{}).Object(raw.Data)
	if err != nil {
		t.Fatalf("%q: the bytes kept (%s) do not decode: %v", stream, raw.Data, err)
	}
	u := whole.Object.(*unstructured.Unstructured)
	if !reflect.DeepEqual(obj.(*unstructured.Unstructured).Object, u.Object) || got.Type != whole.Type {
		t.Fatalf("%q:\nkept:  %s\nwhole: %s", stream, raw.Data, describe(whole))
	}
	if m := (protowatch.Meta{Name: u.GetName(), Namespace: u.GetNamespace(), UID: string(u.GetUID()), ResourceVersion: u.GetResourceVersion()}); raw.Meta != m {
		t.Fatalf("%q: metadata %+v, want %+v", stream, raw.Meta, m)
	}
	return true
}

func TestLazyMatchesDecoding(t *testing.T) {
	fields, err := projection.Compile(nil, []string{"spec.ports.port", "status", "s", "x"})
	if err != nil {
		t.Fatal(err)
	}
	undecoded := 0
	extra := []string{
		`{"type":"ADDED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":"a","namespace":"n","uid":"u","resourceVersion":"7","managedFields":[{"x":1}]},"metadata":{"name":"b"}}}`,
		`{"type":"ADDED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":"a","name":"b"}}}`,
		`{"type":"ADDED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":"a\u0062"}}}`,
		`{"type":"ADDED","object":{"apiVersion":"a/b/c","kind":"W","metadata":{"name":"a"}}}`,
		`{"type":"ADDED","object":{"apiVersion":"v1","kind":"","metadata":{"name":"a"}}}`,
		`{"type":"ADDED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":7}}}`,
		`{"type":"DELETED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":"a"},"spec":{"n":1e400}}}`,
		`{"type":"MODIFIED","object":{"apiVersion":"v1","kind":"W","metadata":{"name":"a"},"spec":{"n":1e-400,"m":[1,2.5,-0]}}}`,
	}
	for _, strip := range []bool{true, false} {
		for _, c := range append(append([]string{}, eventCases...), extra...) {
			for _, f := range []Format{{StripManagedFields: strip}, {StripManagedFields: strip, Fields: fields}} {
				if lazyEqual(t, []byte(c), f) {
					undecoded++
				}
				lazyEqual(t, []byte(c+"\n"+widgetEvent), f)
			}
		}
	}
	if undecoded < 10 {
		t.Fatalf("only %d events left undecoded", undecoded)
	}
	// What the copy keeps is what came, managedFields and what the
	// projection leaves out skipped.
	ev, err := direct([]byte(widgetEvent), &Format{StripManagedFields: true, Lazy: true})
	if err != nil {
		t.Fatal(err)
	}
	if data := ev.Object.(*protowatch.Raw).Data; bytes.Contains(data, []byte("managedFields")) || !bytes.Contains(data, []byte(`"ports":[{"name":"http","port":8080}`)) {
		t.Fatalf("kept %s", data)
	}
}
