package jsonwatch

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"strconv"
	"unicode/utf8"
	"unsafe"

	"github.com/go-json-experiment/json/jsontext"

	"github.com/kinformer/kinformer/internal/intern"
	"github.com/kinformer/kinformer/internal/projection"
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
	dec    *jsontext.Decoder
	names  intern.Table[string] // object names
	atoms  intern.Table[any]    // short strings and numbers, by their raw literal
	buf    []byte               // scratch: unquoting
	stack  []any                // scratch: the elements of arrays being decoded
	pairs  []pair               // scratch: the members of objects being decoded
	shared intern.Table[any]    // small containers of stable values, by their members' identities
	key    []byte               // scratch: a shared container's key
	// StripManagedFields skips metadata.managedFields of top-level objects.
	strip bool
	// shareContainers shares small objects and arrays between objects:
	// only where nothing modifies a decoded object (no Transform).
	shareContainers bool
	// project is the projection of top-level objects (Format.Fields):
	// members it leaves out are skipped unread. nil: all kept.
	project *projection.Node
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
	levelUnique         // a metadata field that every object has its own of
)

// unique tells the metadata fields whose values no two objects share:
// interning them would only fill the tables.
func unique(name string) bool {
	switch name {
	case "name", "uid", "resourceVersion", "creationTimestamp":
		return true
	}
	return false
}

// value reads the next value. A returned error wrapping errSemantic means
// the value was read to its end but is not acceptable; any other error is
// the tokenizer's: the stream is broken.
func (v *values) value(at level) (any, error) {
	x, _, err := v.val(at, nil)
	return x, err
}

// val is value, also saying whether x is stable: an interned atom, a
// constant, or a shared container, whose identity stands for its content
// (see appendName and appendValue).
// sel is what of the value is kept (projection.Node; nil: all of it).
func (v *values) val(at level, sel *projection.Node) (x any, stable bool, err error) {
	switch v.dec.PeekKind() {
	case '{':
		m, stable, err := v.object(at, sel)
		if m == nil {
			return nil, false, err
		}
		return m, stable, err
	case '[':
		return v.array(sel)
	case '"':
		raw, err := v.dec.ReadValue()
		if err != nil {
			return nil, false, err
		}
		if at == levelUnique {
			return v.str(raw), false, nil
		}
		if a, ok := v.atoms.Get(raw); ok {
			return a, true, nil
		}
		s := v.str(raw)
		var a any = s
		if len(s) > maxAtom || !v.atoms.Admit(raw) {
			return a, false, nil // too long, or not seen before: not worth a slot yet
		}
		v.atoms.Put(string(raw), a)
		return a, true, nil
	case '0':
		raw, err := v.dec.ReadValue()
		if err != nil {
			return nil, false, err
		}
		if a, ok := v.atoms.Get(raw); ok {
			return a, true, nil
		}
		a, err := number(raw)
		if err != nil || len(raw) > maxAtom || !v.atoms.Admit(raw) {
			return a, false, err
		}
		v.atoms.Put(string(raw), a)
		return a, true, nil
	case 't', 'f', 'n':
		tok, err := v.dec.ReadToken()
		if err != nil {
			return nil, false, err
		}
		switch tok.Kind() {
		case 't':
			return true, true, nil
		case 'f':
			return false, true, nil
		}
		return nil, true, nil
	}
	// Not the start of a value: ReadToken reports what is there instead.
	_, err = v.dec.ReadToken()
	if err == nil {
		err = fmt.Errorf("jsonwatch: unexpected token")
	}
	return nil, false, err
}

// Small objects and arrays made only of stable values repeat between
// objects (a container's ports, its resources, a condition's fields): such
// a container is shared, found by a key made of its members' identities.
// An identity is an address, which the allocator could give again once
// its value is freed; but the table keeps each shared container, hence
// every value its key names, alive as long as the key can be found: a key
// that matches names the very same values.
const (
	maxShared = 8 // members or elements of a shared container
)

// appendName appends the identity of a name (its data address and
// length) to a sharing key; appendValue that of a value (its interface
// words).
func appendName(key []byte, name string) []byte {
	key = binary.LittleEndian.AppendUint64(key, uint64(uintptr(unsafe.Pointer(unsafe.StringData(name)))))
	return binary.LittleEndian.AppendUint64(key, uint64(len(name)))
}

func appendValue(key []byte, x any) []byte {
	w := (*[2]uintptr)(unsafe.Pointer(&x))
	key = binary.LittleEndian.AppendUint64(key, uint64(w[0]))
	return binary.LittleEndian.AppendUint64(key, uint64(w[1]))
}

// object reads an object. A semantic error in one member is kept while the
// rest is read, so that the stream stays in step.
func (v *values) object(at level, sel *projection.Node) (map[string]any, bool, error) {
	if _, err := v.dec.ReadToken(); err != nil {
		return nil, false, err
	}
	base := len(v.pairs)
	var bad error
	stable := at == levelOther
	for v.dec.PeekKind() != '}' {
		name, interned, err := v.name()
		if err != nil {
			v.pairs = v.pairs[:base]
			return nil, false, err
		}
		child, keep := sel.Child(name)
		if !keep {
			if err := v.dec.SkipValue(); err != nil {
				v.pairs = v.pairs[:base]
				return nil, false, err
			}
			continue
		}
		inner := levelOther
		switch {
		case at == levelTop && name == "metadata":
			inner = levelMetadata
		case at == levelMetadata && unique(name):
			inner = levelUnique
		case at == levelMetadata && v.strip && name == "managedFields":
			if err := v.dec.SkipValue(); err != nil {
				v.pairs = v.pairs[:base]
				return nil, false, err
			}
			continue
		}
		val, st, err := v.val(inner, child)
		if err != nil {
			if !errors.Is(err, errSemantic) {
				v.pairs = v.pairs[:base]
				return nil, false, err
			}
			bad = cmpErr(bad, err)
		}
		stable = stable && st && interned
		v.pairs = append(v.pairs, pair{name, val})
	}
	if _, err := v.dec.ReadToken(); err != nil {
		v.pairs = v.pairs[:base]
		return nil, false, err
	}
	members := v.pairs[base:]
	var key []byte
	if v.shareContainers && stable && bad == nil && len(members) <= maxShared {
		key = append(v.key[:0], 'm')
		for _, p := range members {
			key = appendValue(appendName(key, p.name), p.val)
		}
		v.key = key
		if x, ok := v.shared.Get(key); ok {
			clear(members)
			v.pairs = v.pairs[:base]
			return x.(map[string]any), true, nil
		}
	}
	m := make(map[string]any, len(members))
	for _, p := range members {
		m[p.name] = p.val
	}
	clear(members)
	v.pairs = v.pairs[:base]
	if key != nil && v.shared.Admit(key) {
		v.shared.Put(string(key), m)
		return m, true, nil
	}
	return m, false, bad
}

// array reads an array into a slice of exactly its length.
func (v *values) array(sel *projection.Node) (any, bool, error) {
	if _, err := v.dec.ReadToken(); err != nil {
		return nil, false, err
	}
	base := len(v.stack)
	var bad error
	stable := true
	for v.dec.PeekKind() != ']' {
		val, st, err := v.val(levelOther, sel)
		if err != nil {
			if !errors.Is(err, errSemantic) {
				v.stack = v.stack[:base]
				return nil, false, err
			}
			bad = cmpErr(bad, err)
		}
		stable = stable && st
		v.stack = append(v.stack, val)
	}
	if _, err := v.dec.ReadToken(); err != nil {
		v.stack = v.stack[:base]
		return nil, false, err
	}
	elems := v.stack[base:]
	var key []byte
	if v.shareContainers && stable && bad == nil && len(elems) <= maxShared {
		key = append(v.key[:0], 'a')
		for _, e := range elems {
			key = appendValue(key, e)
		}
		v.key = key
		if x, ok := v.shared.Get(key); ok {
			clear(elems)
			v.stack = v.stack[:base]
			return x, true, nil
		}
	}
	a := make([]any, len(elems))
	copy(a, elems)
	clear(elems)
	v.stack = v.stack[:base]
	if key != nil && v.shared.Admit(key) {
		var x any = a // boxed once: its identity is the shared slice's
		v.shared.Put(string(key), x)
		return x, true, nil
	}
	return a, false, bad
}

// cmpErr keeps the first error.
func cmpErr(first, err error) error {
	if first != nil {
		return first
	}
	return err
}

// name reads an object member's name, interned if it can be (short, and
// without escapes): then interned is set.
func (v *values) name() (name string, interned bool, err error) {
	raw, err := v.dec.ReadValue()
	if err != nil {
		return "", false, err
	}
	key := raw[1 : len(raw)-1] // the name, if it has no escapes (else a key that cannot match)
	if s, ok := v.names.Get(key); ok {
		return s, true, nil
	}
	s := v.str(raw)
	if len(s) <= maxAtom && s == string(key) {
		v.names.Put(s, s)
		return s, true, nil
	}
	return s, false, nil
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
