package protowatch

import (
	"reflect"
	"strings"
	"sync"
	"unsafe"

	"google.golang.org/protobuf/encoding/protowire"
	"k8s.io/apimachinery/pkg/api/resource"
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
	// fields, by field number (a slice: a Pod's walk is hundreds of
	// lookups); numbers past its end are unknown fields.
	fields []field
	// leaf, if set, is a type with a hand-written Unmarshal (a
	// resource.Quantity), called on a new value of it.
	leaf func([]byte) bool
}

// field is what a Check expects of one field number.
type field struct {
	known bool           // a field of the type (the zero field: unknown, skipped)
	wire  protowire.Type // the wire type the generated code accepts
	// msg, for a message or a map entry (wire BytesType), checks its bytes;
	// nil for strings and bytes.
	msg *Check
	// bad: a field the Check cannot walk; bytes that hold it are not
	// accepted.
	bad bool
	// packed: a repeated varint, which may also come packed, as bytes of
	// varints.
	packed bool
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
	c := &Check{}
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
		c.set(num, fieldOf(sf.Type, seen))
	}
	if t == reflect.TypeFor[resource.Quantity]() {
		c = &Check{leaf: validQuantity}
		checks.Store(t, c)
		return c
	}
	if !tagged {
		// No generated fields: a hand-written Unmarshal, or nothing a
		// Check knows.
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

// fieldOf says what the generated code accepts for a field of Go type t.
// The wire type follows from the Go type, as the generated code's does
// (go-to-protobuf makes the .proto from the Go types), not from the
// field's protobuf tag: Kubernetes' tags are written by hand, and some
// say varint for an IntOrString or a string, or bytes for an int32.
func fieldOf(t reflect.Type, seen map[reflect.Type]*Check) field {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t.Name() != "" && t.Kind() != reflect.Struct && reflect.PointerTo(t).Implements(reflect.TypeFor[unmarshaler]()) {
		// A named slice or map with an Unmarshal of its own (ExtraValue,
		// Verbs): a message the generated code hands to it.
		return field{wire: protowire.BytesType, msg: &Check{leaf: func(b []byte) bool {
			return reflect.New(t).Interface().(unmarshaler).Unmarshal(b) == nil
		}}}
	}
	switch t.Kind() {
	case reflect.String:
		return field{wire: protowire.BytesType}
	case reflect.Slice:
		if t.Elem().Kind() == reflect.Uint8 {
			return field{wire: protowire.BytesType} // []byte
		}
		f := fieldOf(t.Elem(), seen) // repeated: each occurrence one element
		switch f.wire {
		case protowire.VarintType:
			f.packed = true // or packed: the generated code takes both
		case protowire.Fixed32Type, protowire.Fixed64Type:
			f.bad = true
		}
		return f
	case reflect.Struct:
		m := build(t, seen)
		return field{wire: protowire.BytesType, msg: m, bad: m == nil}
	case reflect.Map:
		return mapField(t, seen)
	case reflect.Bool, reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64,
		reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		return field{wire: protowire.VarintType}
	case reflect.Float64:
		return field{wire: protowire.Fixed64Type}
	case reflect.Float32:
		return field{wire: protowire.Fixed32Type}
	}
	return field{bad: true}
}

// maxField bounds the field numbers a Check holds in its slice: a type
// with a larger one accepts nothing (none of Kubernetes' has).
const maxField = 1 << 12

// set records what field num expects.
func (c *Check) set(num protowire.Number, f field) {
	if num > maxField {
		c.fields, c.leaf = nil, func([]byte) bool { return false }
		return
	}
	if c.leaf != nil {
		return
	}
	if int(num) >= len(c.fields) {
		c.fields = append(c.fields, make([]field, int(num)+1-len(c.fields))...)
	}
	f.known = true
	c.fields[num] = f
}

// packedVarints says whether b is whole varints, as packed repeated
// varints are.
func packedVarints(b []byte) bool {
	for len(b) > 0 {
		_, n := protowire.ConsumeVarint(b)
		if n < 0 {
			return false
		}
		b = b[n:]
	}
	return true
}

// validQuantity is what resource.Quantity's Unmarshal accepts: a message
// whose field 1 is a string ParseQuantity takes; read without allocating.
func validQuantity(b []byte) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return false // other wire types: Unmarshal's to judge
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return false
		}
		if num == 1 {
			if _, err := resource.ParseQuantity(unsafe.String(unsafe.SliceData(v), len(v))); err != nil {
				return false
			}
		}
		b = b[n+m:]
	}
	return true
}

// mapField: a map is a repeated entry message {1: key, 2: value}.
func mapField(t reflect.Type, seen map[reflect.Type]*Check) field {
	entry := &Check{}
	for num, kt := range map[protowire.Number]reflect.Type{1: t.Key(), 2: t.Elem()} {
		f := fieldOf(kt, seen)
		if f.bad || f.packed {
			return field{bad: true}
		}
		entry.set(num, f)
	}
	return field{wire: protowire.BytesType, msg: entry}
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
		// Tags and lengths of one byte are nearly all of them: read
		// inline, protowire for the others.
		var num protowire.Number
		var typ protowire.Type
		if b[0] < 0x80 && b[0] >= 8 {
			num, typ, b = protowire.Number(b[0]>>3), protowire.Type(b[0]&7), b[1:]
		} else {
			var n int
			if num, typ, n = protowire.ConsumeTag(b); n < 0 {
				return false
			}
			b = b[n:]
		}
		var f field
		if int(num) < len(c.fields) {
			f = c.fields[num]
		}
		var n int
		switch {
		case !f.known:
			// The generated code skips an unknown field; groups are
			// left to it.
			if typ == protowire.StartGroupType || typ == protowire.EndGroupType {
				return false
			}
			n = protowire.ConsumeFieldValue(num, typ, b)
		case f.packed && typ == protowire.BytesType:
			v, m := protowire.ConsumeBytes(b)
			if m < 0 || !packedVarints(v) {
				return false
			}
			n = m
		case f.bad || typ != f.wire:
			return false
		case typ == protowire.BytesType:
			var v []byte
			if len(b) > 0 && b[0] < 0x80 && int(b[0]) < len(b) {
				v, n = b[1:1+b[0]], 1+int(b[0])
			} else if v, n = protowire.ConsumeBytes(b); n < 0 {
				return false
			}
			if f.msg != nil && !f.msg.valid(v, depth+1) {
				return false
			}
		case typ == protowire.VarintType:
			_, n = protowire.ConsumeVarint(b)
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
