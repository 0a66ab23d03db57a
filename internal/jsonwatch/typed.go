package jsonwatch

import (
	"errors"
	"fmt"

	"github.com/go-json-experiment/json"
	"github.com/go-json-experiment/json/jsontext"
	jsonv1 "github.com/go-json-experiment/json/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/runtime"
	"k8s.io/apimachinery/pkg/runtime/schema"
)

// typed decodes objects into Go structs straight from the tokenizer, with
// encoding/json's rules as apimachinery applies them (sigs.k8s.io/json):
// the v1 semantics of encoding/json/v2, names matched case-sensitively,
// numbers in interface{} fields as values gives them. managedFields, when
// stripped, are skipped in the token stream.
type typed struct {
	vals *values
	opts json.Options
	copy tokenCopy // reused: a projected object's JSON
}

func newTyped(vals *values, strip bool) *typed {
	t := &typed{vals: vals}
	unm := []*json.Unmarshalers{
		// interface{} fields: ints stay ints, as apimachinery's decoder
		// keeps them (encoding/json alone would give float64).
		json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *any) error {
			saved := vals.dec
			vals.dec = dec
			x, err := vals.value(levelOther)
			vals.dec = saved
			if err != nil {
				return err
			}
			*v = x
			return nil
		}),
	}
	if strip {
		unm = append(unm, json.UnmarshalFromFunc(func(dec *jsontext.Decoder, v *[]metav1.ManagedFieldsEntry) error {
			*v = nil
			return dec.SkipValue()
		}))
	}
	t.opts = json.JoinOptions(
		jsonv1.DefaultOptionsV1(),
		json.MatchCaseInsensitiveNames(false),
		json.WithUnmarshalers(json.JoinUnmarshalers(unm...)),
	)
	return t
}

// decode decodes the value at the decoder's position into a new object of
// f's kind (or, for a list's item, of no kind: the server leaves it out of
// lists of built-in types), projected by f.Fields if project. An error wrapping errSemantic means the value
// was read to its end but is not such an object.
func (t *typed) decode(f *Format, item, project bool) (runtime.Object, error) {
	dec := t.vals.dec
	depth, off := dec.StackDepth(), dec.InputOffset()
	obj := f.New()
	from := dec
	if f.Fields != nil && project {
		// What the projection leaves out is skipped unread; the rest,
		// copied as it came, is decoded as the whole would have been.
		t.copy.reset()
		if err := t.copy.value(dec, f.Fields.Root()); err != nil {
			return nil, err
		}
		from = jsontext.NewDecoder(&t.copy.buf, jsontext.AllowDuplicateNames(true), jsontext.AllowInvalidUTF8(true))
		depth, off = from.StackDepth(), from.InputOffset()
	}
	if err := json.UnmarshalDecode(from, obj, t.opts); err != nil {
		var syn *jsontext.SyntacticError
		if errors.As(err, &syn) || !errors.As(err, new(*json.SemanticError)) {
			return nil, err
		}
		if err := skipTo(from, depth, off); err != nil {
			return nil, err
		}
		return nil, fmt.Errorf("%w: %s: %w", errSemantic, f.Kind, err)
	}
	if k := obj.GetObjectKind().GroupVersionKind().Kind; f.Kind != "" && k != f.Kind && (!item || k != "") {
		return nil, fmt.Errorf("%w: an object of kind %q, want %q", errSemantic, k, f.Kind)
	}
	// As client-go's typed clients give them (runtime.WithoutVersionDecoder),
	// and as protobuf decoding does: the type says the kind.
	obj.GetObjectKind().SetGroupVersionKind(schema.GroupVersionKind{})
	if f.Share != nil {
		f.Share.Object(obj)
	}
	return obj, nil
}

// skipTo reads on to the end of the value that started at stack depth
// depth and input offset off, wherever in it decoding stopped.
func skipTo(dec *jsontext.Decoder, depth int, off int64) error {
	if dec.StackDepth() == depth && dec.InputOffset() == off {
		return dec.SkipValue() // nothing of it was read
	}
	for dec.StackDepth() > depth {
		switch dec.PeekKind() {
		case '}', ']':
			if _, err := dec.ReadToken(); err != nil {
				return err
			}
		default:
			if err := dec.SkipValue(); err != nil {
				return err
			}
		}
	}
	return nil
}
