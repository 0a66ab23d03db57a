package persist

import (
	"encoding/json"
	"fmt"
	"reflect"

	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	kruntime "k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/jsonwatch"
)

// Codec encodes the objects of a state file: protobuf for the built-in
// types (what they have on the wire), JSON for the others, decoded as
// their watches are (internal/jsonwatch: numbers as apimachinery decodes
// them, names and short values interned). A Codec decodes on one
// goroutine at a time.
type Codec[T kruntime.Object] struct {
	Encode func(T) ([]byte, error)
	Decode func([]byte) (T, error)
}

type protoObject interface {
	Marshal() ([]byte, error)
	Unmarshal([]byte) error
}

// NewCodec returns the codec of objects of type t, which is T or, for an
// interface T, a type that implements it; nil means T.
func NewCodec[T kruntime.Object](t reflect.Type) Codec[T] {
	if t == nil {
		t = reflect.TypeFor[T]()
	}
	fresh := func() T { return *new(T) }
	if t.Kind() == reflect.Pointer {
		elem := t.Elem()
		fresh = func() T { return reflect.New(elem).Interface().(T) }
	}
	if _, ok := any(fresh()).(protoObject); ok {
		return Codec[T]{
			Encode: func(obj T) ([]byte, error) { return any(obj).(protoObject).Marshal() },
			Decode: func(b []byte) (T, error) {
				obj := fresh()
				return obj, any(obj).(protoObject).Unmarshal(b)
			},
		}
	}
	// managedFields are never stored; any kind; objects are stored after
	// the Transform, so restored ones may share containers.
	f := &jsonwatch.Format{ShareContainers: true}
	if _, ok := any(fresh()).(*unstructured.Unstructured); !ok {
		f.New = func() kruntime.Object { return fresh() }
	}
	dec := jsonwatch.NewDecoder(f)
	return Codec[T]{
		Encode: func(obj T) ([]byte, error) { return json.Marshal(obj) },
		Decode: func(b []byte) (T, error) {
			o, err := dec.Object(b)
			if err != nil {
				return *new(T), err
			}
			obj, ok := o.(T)
			if !ok {
				return *new(T), fmt.Errorf("decoded a %T, want %T", o, obj)
			}
			return obj, nil
		},
	}
}
