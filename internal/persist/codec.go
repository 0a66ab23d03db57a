package persist

import (
	"encoding/json"
	"fmt"
	"reflect"
	"sync"

	jsonv2 "github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/jsonwatch"
	"github.com/kinformer/kinformer/internal/protowatch"
)

// Codec encodes the objects of a state file: protobuf for the built-in
// types (what they have on the wire), JSON for the others, decoded as
// their watches are (internal/jsonwatch: numbers as apimachinery decodes
// them, names and short values interned). A Codec decodes on one
// goroutine at a time.
type Codec[T kruntime.Object] struct {
	Encode func(T) ([]byte, error)
	Decode func([]byte) (T, error)
	// Meta reads an encoding's metadata without decoding it; nil for
	// JSON.
	Meta func([]byte) (Meta, bool)
	// Copies: the objects Decode returns share no memory with the bytes
	// they were decoded from (protobuf's generated Unmarshal copies every
	// string and byte slice), which may then be reused.
	Copies bool
}

// Meta is what an encoded object's metadata says of it.
type Meta = protowatch.Meta

type protoObject interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// NewCodec returns the codec of objects of type t, which is T or, for an
// interface T, a type that implements it; nil means T.
func NewCodec[T kruntime.Object](t reflect.Type) Codec[T] {
	t, fresh := maker[T](t)
	if c, ok := protoCodec[T](t, fresh); ok {
		return c
	}
	// managedFields are never stored; any kind; objects are stored after
	// the Transform, so restored ones may share containers.
	dec := jsonDecoder[T](fresh, true)
	return Codec[T]{
		Encode: func(obj T) ([]byte, error) { return json.Marshal(obj) },
		Decode: func(b []byte) (T, error) { return decodeJSON[T](dec, b) },
	}
}

// NewReadCodec is NewCodec for a compact cache (Options.Compact): its
// Decode may run on many goroutines at once, and the objects it returns
// share no map, slice or object with any other (interned strings only).
func NewReadCodec[T kruntime.Object](t reflect.Type) Codec[T] {
	t, fresh := maker[T](t)
	if c, ok := protoCodec[T](t, fresh); ok {
		return c
	}
	pool := sync.Pool{New: func() any { return jsonDecoder[T](fresh, false) }}
	encode := func(obj T) ([]byte, error) { return json.Marshal(obj) }
	if _, ok := any(fresh()).(*unstructured.Unstructured); ok {
		// Its content is maps, slices, strings, int64s, float64s and
		// bools: encoding/json's Marshal of it goes through MarshalJSON
		// and then checks and compacts the result again, twice the work
		// of encoding it once.
		encode = func(obj T) ([]byte, error) {
			return jsonv2.Marshal(any(obj).(*unstructured.Unstructured).Object, jsontext.AllowInvalidUTF8(true))
		}
	}
	return Codec[T]{
		Encode: encode,
		Decode: func(b []byte) (T, error) {
			dec := pool.Get().(*jsonwatch.Decoder)
			defer pool.Put(dec)
			return decodeJSON[T](dec, b)
		},
	}
}

// maker returns the type of the objects (t, or T if nil) and a function
// that makes a new empty one.
func maker[T kruntime.Object](t reflect.Type) (reflect.Type, func() T) {
	if t == nil {
		t = reflect.TypeFor[T]()
	}
	fresh := func() T { return *new(T) }
	if t.Kind() == reflect.Pointer {
		elem := t.Elem()
		fresh = func() T { return reflect.New(elem).Interface().(T) }
	}
	return t, fresh
}

// protoCodec is the codec of a type with protobuf (every built-in type):
// what it has on the wire. Its Decode is safe for concurrent use.
func protoCodec[T kruntime.Object](t reflect.Type, fresh func() T) (Codec[T], bool) {
	if _, ok := any(fresh()).(protoObject); !ok {
		return Codec[T]{}, false
	}
	c := Codec[T]{
		Encode: func(obj T) ([]byte, error) { return any(obj).(protoObject).Marshal() },
		Decode: func(b []byte) (T, error) {
			obj := fresh()
			return obj, any(obj).(protoObject).Unmarshal(b)
		},
		Copies: true,
	}
	if t.Kind() == reflect.Pointer {
		if meta := protowatch.LayoutOf(t.Elem()).Meta; meta != 0 {
			c.Meta = func(b []byte) (Meta, bool) { return protowatch.ReadMeta(b, meta) }
		}
	}
	return c, true
}

// jsonDecoder decodes the JSON of objects made by fresh (unstructured
// ones for *unstructured.Unstructured).
func jsonDecoder[T kruntime.Object](fresh func() T, shareContainers bool) *jsonwatch.Decoder {
	f := &jsonwatch.Format{ShareContainers: shareContainers}
	if _, ok := any(fresh()).(*unstructured.Unstructured); !ok {
		f.New = func() kruntime.Object { return fresh() }
	}
	return jsonwatch.NewDecoder(f)
}

func decodeJSON[T kruntime.Object](dec *jsonwatch.Decoder, b []byte) (T, error) {
	o, err := dec.Object(b)
	if err != nil {
		return *new(T), err
	}
	obj, ok := o.(T)
	if !ok {
		return *new(T), fmt.Errorf("decoded a %T, want %T", o, obj)
	}
	return obj, nil
}
