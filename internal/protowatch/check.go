package protowatch

import (
	"reflect"
	"strings"
	"sync"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
)

// A Check tells, without decoding and without allocating, whether a type's
// generated Unmarshal would accept an object's bytes. A Lazy Format keeps
// bytes undecoded only if they pass: bytes that would fail to decode must
// fail when they arrive (an Error event), not at every later read.
//
// It is conservative: it says yes only to what it has walked field by
// field against the type's protobuf tags, and no to anything it is unsure
// of (groups, a wire type the field does not have, a map entry longer than
// its entry, nesting past maxDepth). A no costs only a decode, which then
// says what is wrong, or succeeds where the generated code is more lenient.
type Check struct {
	fields map[protowire.Number]field
	// leaf, if set, is a type with a hand-written Unmarshal (a
	// resource.Quantity), called on a new value of it.
	leaf func([]byte) bool
}

// field is what a Check expects of one field number.
type field struct {
	wire protowire.Type // the wire type the generated code accepts
	// msg, for a message or a map entry (wire BytesType), checks its bytes;
	// nil for strings and bytes.
	msg *Check
	// bad: a field the Check cannot walk; bytes that hold it are not
	// accepted.
	bad bool
}

// maxDepth bounds the nesting a Check walks; deeper bytes are decoded.
const maxDepth = 64

var checks sync.Map // reflect.Type → *Check

// CheckOf returns the Check of a struct type with generated protobuf code
// (a Kubernetes built-in type); nil if t is not one.
func CheckOf(t reflect.Type) *Check {
	if t.Kind() != reflect.Struct {
		return nil
	}
	buildMu.Lock()
	defer buildMu.Unlock()
	c := build(t, map[reflect.Type]*Check{})
	if c == nil || c.leaf != nil || len(c.fields) == 0 {
		return nil
	}
	return c
}

// buildMu serialises building, so that a recursive type is built once.
var buildMu sync.Mutex

// timestamp stands for metav1.Time and MicroTime, whose hand-written
// Unmarshal decodes a Timestamp.
var timestamp = reflect.TypeFor[metav1.Timestamp]()

type unmarshaler interface{ Unmarshal([]byte) error }

// build makes the Check of struct type t; seen holds the Checks being
// built, for recursive types (JSONSchemaProps).
func build(t reflect.Type, seen map[reflect.Type]*Check) *Check {
	if c, ok := checks.Load(t); ok {
		return c.(*Check)
	}
	if c, ok := seen[t]; ok {
		return c
	}
	switch t {
	case reflect.TypeFor[metav1.Time](), reflect.TypeFor[metav1.MicroTime]():
		return build(timestamp, seen)
	}
	c := &Check{fields: map[protowire.Number]field{}}
	seen[t] = c
	tagged := false
	for i := range t.NumField() {
		sf := t.Field(i)
		tag := sf.Tag.Get("protobuf")
		if tag == "" || tag == "-" {
			continue
		}
		tagged = true
		parts := strings.Split(tag, ",")
		if len(parts) < 3 {
			continue
		}
		num, ok := parseNumber(parts[1])
		if !ok {
			// Not a tag generated code has: accept nothing (a type
			// being built may already be referred to, so not nil).
			c.fields, c.leaf = nil, func([]byte) bool { return false }
			break
		}
		c.fields[num] = fieldOf(parts[0], sf, seen)
	}
	if !tagged {
		// No generated fields: a hand-written Unmarshal (Quantity), or
		// nothing a Check knows.
		if !reflect.PointerTo(t).Implements(reflect.TypeFor[unmarshaler]()) {
			return nil
		}
		c = &Check{leaf: func(b []byte) bool {
			return reflect.New(t).Interface().(unmarshaler).Unmarshal(b) == nil
		}}
	}
	checks.Store(t, c)
	return c
}

// fieldOf says what the generated code accepts for a field tagged
// `protobuf:"kind,num,..."` of Go type sf.Type.
func fieldOf(kind string, sf reflect.StructField, seen map[reflect.Type]*Check) field {
	t := sf.Type
	repeated := false
	for t.Kind() == reflect.Pointer || (t.Kind() == reflect.Slice && t.Elem().Kind() != reflect.Uint8) {
		repeated = repeated || t.Kind() == reflect.Slice
		t = t.Elem()
	}
	switch kind {
	case "varint", "zigzag32", "zigzag64":
		if repeated {
			return field{bad: true} // packed or not: decode
		}
		return field{wire: protowire.VarintType}
	case "fixed64":
		return field{wire: protowire.Fixed64Type, bad: repeated}
	case "fixed32":
		return field{wire: protowire.Fixed32Type, bad: repeated}
	case "bytes":
	default:
		return field{bad: true}
	}
	switch t.Kind() {
	case reflect.String:
		return field{wire: protowire.BytesType}
	case reflect.Slice: // []byte
		return field{wire: protowire.BytesType}
	case reflect.Struct:
		m := build(t, seen)
		return field{wire: protowire.BytesType, msg: m, bad: m == nil}
	case reflect.Map:
		return mapField(sf, t, seen)
	}
	return field{bad: true}
}

// mapField: a map is a repeated entry message {1: key, 2: value}.
// Kubernetes' types tag only the map, so the entry's wire types follow
// from the key and value types (or from protobuf_key and protobuf_val
// tags, where a type has them).
func mapField(sf reflect.StructField, t reflect.Type, seen map[reflect.Type]*Check) field {
	entry := &Check{fields: map[protowire.Number]field{}}
	for num, kt := range map[protowire.Number]struct {
		tag string
		t   reflect.Type
	}{1: {sf.Tag.Get("protobuf_key"), t.Key()}, 2: {sf.Tag.Get("protobuf_val"), t.Elem()}} {
		kind, _, _ := strings.Cut(kt.tag, ",")
		if kind == "" {
			kind = wireKind(kt.t)
		}
		f := fieldOf(kind, reflect.StructField{Type: kt.t}, seen)
		if f.bad {
			return field{bad: true}
		}
		entry.fields[num] = f
	}
	return field{wire: protowire.BytesType, msg: entry}
}

// wireKind is the protobuf tag kind of an untagged map key or value type.
func wireKind(t reflect.Type) string {
	switch t.Kind() {
	case reflect.String, reflect.Slice, reflect.Struct, reflect.Pointer:
		return "bytes"
	case reflect.Bool, reflect.Int32, reflect.Int64, reflect.Uint32, reflect.Uint64:
		return "varint"
	case reflect.Float64:
		return "fixed64"
	case reflect.Float32:
		return "fixed32"
	}
	return ""
}

func parseNumber(s string) (protowire.Number, bool) {
	n := 0
	for _, r := range s {
		if r < '0' || r > '9' || n > 1<<29 {
			return 0, false
		}
		n = n*10 + int(r-'0')
	}
	num := protowire.Number(n)
	return num, num.IsValid()
}

// Valid says whether the type's generated Unmarshal accepts b (false when
// unsure).
func (c *Check) Valid(b []byte) bool { return c.valid(b, 0) }

func (c *Check) valid(b []byte, depth int) bool {
	if c.leaf != nil {
		return c.leaf(b)
	}
	if depth > maxDepth {
		return false
	}
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		f, known := c.fields[num]
		switch {
		case !known:
			// The generated code skips an unknown field; groups are
			// left to it.
			if typ == protowire.StartGroupType || typ == protowire.EndGroupType {
				return false
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
		case f.bad || typ != f.wire:
			return false
		case f.msg != nil:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || !f.msg.valid(v, depth+1) {
				return false
			}
			n = m
		default:
			n = protowire.ConsumeFieldValue(num, typ, b)
		}
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}
