package jsonwatch

import (
	"bytes"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/kinformer/kinformer/internal/intern"
)

// values decodes JSON values, token by token, into what apimachinery's
// unstructured decoder (k8s.io/apimachinery/pkg/util/json.Unmarshal into a
// map[string]interface{}) gives for them:
//
//   - objects as map[string]interface{}, the last of duplicate names
//     winning;
//   - arrays as []interface{};
//   - numbers without a '.' that fit as int64, else float64 (an overflowing
//     float is an error, as there);
//   - strings with invalid UTF-8 or lone surrogates replaced by U+FFFD;
//   - true, false and null as bool and nil.
//
// Besides, object names and short strings and numbers repeat between
// objects (every object has the same field names): they are interned, so
// that objects share one copy of each, boxed once; and metadata.managedFields
// of the top-level object can be skipped without being decoded.
//
// A values belongs to one goroutine.
type values struct {
	dec   *jsontext.Decoder
	names intern.Table[string] // object names
	atoms intern.Table[any]    // short strings and numbers, by their raw literal
	buf   []byte               // scratch: unquoting
	stack []any                // scratch: the elements of arrays being decoded
	pairs []pair               // scratch: the members of objects being decoded
	// StripManagedFields skips metadata.managedFields of top-level objects.
	strip bool
}

type pair struct {
	name string
	val  any
}

// maxAtom: longer strings rarely repeat and are not interned.
const maxAtom = 64

// errSemantic wraps errors in a syntactically valid value that apimachinery
// refuses too (a number out of range): the value has been read to its end,
// and the stream can go on.
var errSemantic = errors.New("invalid value")

// level says where in the top-level object a value is.
type level uint8

const (
	levelOther    level = iota
	levelTop            // the top-level object
	levelMetadata       // its metadata
)

// value reads the next value. A returned error wrapping errSemantic means
// the value was read to its end but is not acceptable; any other error is
// the tokenizer's: the stream is broken.
func (v *values) value(at level) (any, error) {
	switch v.dec.PeekKind() {
	case '{':
		m, err := v.object(at)
		if m == nil {
			return nil, err
		}
		return m, err
	case '[':
		return v.array()
	case '"':
		raw, err := v.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		if a, ok := v.atoms.Get(raw); ok {
			return a, nil
		}
		s := v.str(raw)
		var a any = s
		if len(s) <= maxAtom {
			v.atoms.Put(string(raw), a)
		}
		return a, nil
	case '0':
		raw, err := v.dec.ReadValue()
		if err != nil {
			return nil, err
		}
		if a, ok := v.atoms.Get(raw); ok {
			return a, nil
		}
		a, err := number(raw)
		if err != nil {
			return nil, err
		}
		if len(raw) <= maxAtom {
			v.atoms.Put(string(raw), a)
		}
		return a, nil
	case 't', 'f', 'n':
		tok, err := v.dec.ReadToken()
		if err != nil {
			return nil, err
		}
		switch tok.Kind() {
		case 't':
			return true, nil
		case 'f':
			return false, nil
		}
		return nil, nil
	}
	// Not the start of a value: ReadToken reports what is there instead.
	_, err := v.dec.ReadToken()
	if err == nil {
		err = fmt.Errorf("jsonwatch: unexpected token")
	}
	return nil, err
}

// object reads an object. A semantic error in one member is kept while the
// rest is read, so that the stream stays in step.
func (v *values) object(at level) (map[string]any, error) {
	if _, err := v.dec.ReadToken(); err != nil {
		return nil, err
	}
	base := len(v.pairs)
	var bad error
	for v.dec.PeekKind() != '}' {
		name, err := v.name()
		if err != nil {
			v.pairs = v.pairs[:base]
			return nil, err
		}
		inner := levelOther
		switch {
		case at == levelTop && name == "metadata":
			inner = levelMetadata
		case at == levelMetadata && v.strip && name == "managedFields":
			if err := v.dec.SkipValue(); err != nil {
				v.pairs = v.pairs[:base]
				return nil, err
			}
			continue
		}
		val, err := v.value(inner)
		if err != nil {
			if !errors.Is(err, errSemantic) {
				v.pairs = v.pairs[:base]
				return nil, err
			}
			bad = cmpErr(bad, err)
		}
		v.pairs = append(v.pairs, pair{name, val})
	}
	if _, err := v.dec.ReadToken(); err != nil {
		v.pairs = v.pairs[:base]
		return nil, err
	}
	members := v.pairs[base:]
	m := make(map[string]any, len(members))
	for _, p := range members {
		m[p.name] = p.val
	}
	clear(members)
	v.pairs = v.pairs[:base]
	return m, bad
}

// array reads an array into a slice of exactly its length.
func (v *values) array() (any, error) {
	if _, err := v.dec.ReadToken(); err != nil {
		return nil, err
	}
	base := len(v.stack)
	var bad error
	for v.dec.PeekKind() != ']' {
		val, err := v.value(levelOther)
		if err != nil {
			if !errors.Is(err, errSemantic) {
				v.stack = v.stack[:base]
				return nil, err
			}
			bad = cmpErr(bad, err)
		}
		v.stack = append(v.stack, val)
	}
	if _, err := v.dec.ReadToken(); err != nil {
		v.stack = v.stack[:base]
		return nil, err
	}
	elems := v.stack[base:]
	a := make([]any, len(elems))
	copy(a, elems)
	clear(elems)
	v.stack = v.stack[:base]
	return a, bad
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// name reads an object member's name, interned.
func (v *values) name() (string, error) {
	raw, err := v.dec.ReadValue()
	if err != nil {
		return "", err
	}
	key := raw[1 : len(raw)-1] // the name, if it has no escapes (else a key that cannot match)
	if s, ok := v.names.Get(key); ok {
		return s, nil
	}
	s := v.str(raw)
	if len(s) <= maxAtom && s == string(key) {
		v.names.Put(s, s)
	}
	return s, nil
}

// str unquotes a raw JSON string as encoding/json does: invalid UTF-8 and
// lone surrogates become U+FFFD.
func (v *values) str(raw jsontext.Value) string {
	inner := raw[1 : len(raw)-1]
	if bytes.IndexByte(inner, '\\') < 0 && utf8.Valid(inner) {
		return string(inner)
	}
	// AppendUnquote replaces what is not valid UTF-8 and says so; the
	// replaced string is what encoding/json gives.
	v.buf, _ = jsontext.AppendUnquote(v.buf[:0], raw)
	return string(v.buf)
}

// number converts a JSON number as apimachinery does: no '.' and within
// int64 is an int64, anything else a float64; a float out of range is an
// error.
func number(raw []byte) (any, error) {
	if bytes.IndexByte(raw, '.') < 0 {
		if i, ok := parseInt(raw); ok {
			return i, nil
		}
	}
	f, err := strconv.ParseFloat(string(raw), 64)
	if err != nil {
		return nil, fmt.Errorf("%w: number %s: %w", errSemantic, raw, errors.Unwrap(err))
	}
	return f, nil
}

// parseInt parses a JSON integer (no fraction, no exponent) into an int64,
// false if it is not one or does not fit.
func parseInt(raw []byte) (int64, bool) {
	b := raw
	neg := len(b) > 0 && b[0] == '-'
	if neg {
		b = b[1:]
	}
	if len(b) == 0 || len(b) > 19 {
		return 0, false
	}
	var u uint64
	for _, c := range b {
		if c < '0' || c > '9' {
			return 0, false
		}
		u = u*10 + uint64(c-'0')
	}
	switch {
	case neg && u == 1<<63:
		return math.MinInt64, true
	case neg && u < 1<<63:
		return -int64(u), true
	case !neg && u < 1<<63:
		return int64(u), true
	}
	return 0, false
}
