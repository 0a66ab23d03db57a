// Package projection keeps only some fields of objects, chosen by their
// paths in JSON names ("metadata.labels", "spec.containers.image"), and
// does it before they are decoded: in their protobuf bytes (Proto), in
// their JSON token stream (JSON, and Node for a decoder walking it), and,
// for objects decoded whole by someone else, in the decoded object (Apply).
//
// A path names a field of the type; through a list it names the field in
// each element ("spec.containers.image": every container's image). A path
// ends at a map, a list of scalars, or a value with its own encoding
// (Quantity, Time, IntOrString): those are kept whole. A path that is a
// prefix of another keeps everything under it.
package projection

import (
	"errors"
	"fmt"
	"reflect"
	"slices"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
)

// Always are the paths every projection keeps: what names an object and
// says which version of it the cache holds.
var Always = []string{"metadata.name", "metadata.namespace", "metadata.uid", "metadata.resourceVersion"}

// ErrPath is wrapped by the errors of paths that are not fields of the
// type, or not paths at all.
var ErrPath = errors.New("not a field path")

// Fields is a compiled projection: which fields of one type are kept. It
// is immutable, and safe to use from many goroutines; a Projector (for
// protobuf bytes) belongs to one.
type Fields struct {
	paths []string // as given, cleaned and sorted, Always included
	root  *Node
	typed bool // compiled against a Go type
}

// Node is the projection of one object or message: which of its members
// are kept, and what of each. A nil *Node keeps everything.
type Node struct {
	names map[string]*Node // JSON names (inline structs' fields included)
	// Go and protobuf, for a typed projection.
	keep []bool     // by Go field index: kept (whole or in part)
	sub  []*Node    // by Go field index: the part kept; nil if whole
	nums []numField // by protobuf field number, sorted
	typ  reflect.Type
}

// numField is a kept protobuf field: its number and what of it is kept.
type numField struct {
	num   protowire.Number
	child *Node // nil: whole
}

// whole is the node of a member kept whole, in names.
var whole *Node

// Paths returns the projection's paths, sorted, Always included: its
// identity (two projections with the same paths keep the same).
func (f *Fields) Paths() []string { return slices.Clone(f.paths) }

// String is the paths joined with commas.
func (f *Fields) String() string { return strings.Join(f.paths, ",") }

// Root is the node of the object itself, for a decoder that walks the
// JSON tokens (Node.Child).
func (f *Fields) Root() *Node { return f.root }

// Child returns what of member name is kept: keep false if nothing, a nil
// node if all of it. On a nil node (all kept), everything is kept whole.
func (n *Node) Child(name string) (child *Node, keep bool) {
	if n == nil {
		return nil, true
	}
	c, ok := n.names[name]
	return c, ok
}

// Compile returns the projection of paths for Go struct type t (a pointer
// to one is taken for it), checking that each path names a field of t; t
// nil compiles the paths as they are (unstructured objects, which have no
// type to check them against). The Always paths and, for JSON, apiVersion
// and kind are added.
func Compile(t reflect.Type, paths []string) (*Fields, error) {
	for t != nil && t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	if t != nil && t.Kind() != reflect.Struct {
		return nil, fmt.Errorf("projection: %s is not a struct", t)
	}
	all := append(slices.Clone(Always), paths...)
	for _, tm := range []string{"apiVersion", "kind"} {
		if t == nil {
			all = append(all, tm)
		} else if _, _, ok := jsonField(t, tm); ok {
			all = append(all, tm)
		}
	}
	var clean [][]string
	for _, p := range all {
		segs := strings.Split(p, ".")
		for _, s := range segs {
			if s == "" || strings.TrimSpace(s) != s {
				return nil, fmt.Errorf("projection: %w: %q", ErrPath, p)
			}
		}
		clean = append(clean, segs)
	}
	// A path that is a prefix of another keeps all of it: drop the longer.
	slices.SortFunc(clean, func(a, b []string) int { return slices.Compare(a, b) })
	var kept [][]string
	for _, segs := range clean {
		if n := len(kept); n > 0 && hasPrefix(segs, kept[n-1]) {
			continue
		}
		kept = append(kept, segs)
	}
	f := &Fields{typed: t != nil}
	for _, segs := range kept {
		f.paths = append(f.paths, strings.Join(segs, "."))
	}
	if t == nil {
		f.root = &Node{names: map[string]*Node{}}
		for _, segs := range kept {
			f.root.addUntyped(segs)
		}
		return f, nil
	}
	root := newNode(t)
	for _, segs := range kept {
		if err := root.add(t, segs, segs); err != nil {
			return nil, err
		}
	}
	root.finish()
	f.root = root
	return f, nil
}

func hasPrefix(s, prefix []string) bool {
	return len(s) >= len(prefix) && slices.Equal(s[:len(prefix)], prefix)
}

func (n *Node) addUntyped(segs []string) {
	c, ok := n.names[segs[0]]
	if len(segs) == 1 {
		n.names[segs[0]] = whole
		return
	}
	if ok && c == whole {
		return
	}
	if c == nil {
		c = &Node{names: map[string]*Node{}}
		n.names[segs[0]] = c
	}
	c.addUntyped(segs[1:])
}

func newNode(t reflect.Type) *Node {
	return &Node{typ: t, names: map[string]*Node{}, keep: make([]bool, t.NumField()), sub: make([]*Node, t.NumField())}
}

// add adds the path segs (the rest of path) to n, a node of struct type t.
func (n *Node) add(t reflect.Type, segs, path []string) error {
	sf, inline, ok := jsonField(t, segs[0])
	if !ok {
		return fmt.Errorf("projection: %w: %q: %s has no field %q", ErrPath, strings.Join(path, "."), t, segs[0])
	}
	if inline != nil {
		// A field of an inline struct (a Volume's VolumeSource): its own
		// Go field, and in protobuf its own message.
		i := inline.Index[0]
		it := inline.Type
		for it.Kind() == reflect.Pointer {
			it = it.Elem()
		}
		n.keep[i] = true
		c := n.sub[i]
		if c == nil {
			c = newNode(it)
			n.sub[i] = c
		}
		if err := c.add(it, segs, path); err != nil {
			return err
		}
		n.names[segs[0]] = c.names[segs[0]]
		return nil
	}
	i := sf.Index[0]
	if len(segs) == 1 {
		n.keep[i], n.sub[i] = true, nil
		n.names[segs[0]] = whole
		return nil
	}
	et, ok := container(sf.Type)
	if !ok {
		return fmt.Errorf("projection: %w: %q: %s.%s is a %s, kept whole or not at all", ErrPath, strings.Join(path, "."), t.Name(), sf.Name, kindOf(sf.Type))
	}
	n.keep[i] = true
	c := n.sub[i]
	if c == nil {
		c = newNode(et)
		n.sub[i] = c
		n.names[segs[0]] = c
	}
	return c.add(et, segs[1:], path)
}

// finish fills in the protobuf numbers of n and its children, from the Go
// fields' protobuf tags (a field without one is not in the bytes).
func (n *Node) finish() {
	for i := range n.keep {
		if n.sub[i] != nil {
			n.sub[i].finish()
		}
		if !n.keep[i] {
			continue
		}
		if num := tagNumber(n.typ.Field(i).Tag); num > 0 {
			n.nums = append(n.nums, numField{num: num, child: n.sub[i]})
		}
	}
	slices.SortFunc(n.nums, func(a, b numField) int { return int(a.num) - int(b.num) })
}

// jsonField finds the field of struct t named name in JSON, directly or
// in an inline struct (then inline is the inline field of t). A direct
// field wins over one of an inline struct, as in encoding/json.
func jsonField(t reflect.Type, name string) (sf, inline *reflect.StructField, ok bool) {
	for i := range t.NumField() {
		f := t.Field(i)
		if n, in := jsonName(f); f.IsExported() && !in && n == name {
			return &f, nil, true
		}
	}
	for i := range t.NumField() {
		f := t.Field(i)
		if _, in := jsonName(f); !f.IsExported() || !in {
			continue
		}
		ft := f.Type
		for ft.Kind() == reflect.Pointer {
			ft = ft.Elem()
		}
		if ft.Kind() == reflect.Struct {
			if _, _, found := jsonField(ft, name); found {
				return nil, &f, true
			}
		}
	}
	return nil, nil, false
}

// jsonName is a field's name in JSON, or inline for an embedded struct
// that encoding/json flattens into its parent.
func jsonName(f reflect.StructField) (name string, inline bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "-" && opts == "" {
		return "", false
	}
	if name == "" && (strings.Contains(","+opts+",", ",inline,") || f.Anonymous) {
		return "", true
	}
	if name == "" {
		name = f.Name
	}
	return name, false
}

// jsonSelf is a type with an encoding of its own (Quantity, Time,
// IntOrString, RawExtension): a path ends there.
type jsonSelf interface{ UnmarshalJSON([]byte) error }

// container returns the struct a path may go on into from a field of type
// t: through pointers and lists. false for anything else.
func container(t reflect.Type) (reflect.Type, bool) {
	for t.Kind() == reflect.Pointer || t.Kind() == reflect.Slice || t.Kind() == reflect.Array {
		t = t.Elem()
	}
	if t.Kind() != reflect.Struct {
		return nil, false
	}
	if reflect.PointerTo(t).Implements(reflect.TypeFor[jsonSelf]()) {
		return nil, false
	}
	return t, true
}

func kindOf(t reflect.Type) string {
	for t.Kind() == reflect.Pointer {
		t = t.Elem()
	}
	switch t.Kind() {
	case reflect.Map:
		return "map"
	case reflect.Slice, reflect.Array:
		return "list of " + kindOf(t.Elem())
	case reflect.Struct:
		return t.Name()
	}
	return t.Kind().String()
}

// tagNumber reads the field number of a `protobuf:"bytes,17,rep,..."` tag
// (any wire type); 0 if there is none.
func tagNumber(tag reflect.StructTag) protowire.Number {
	parts := strings.Split(tag.Get("protobuf"), ",")
	if len(parts) < 2 {
		return 0
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 {
		return 0
	}
	return protowire.Number(n)
}

// Union returns a projection keeping what a or b keeps; nil (everything)
// if either is nil. Both must be of the same type.
func Union(a, b *Fields) (*Fields, error) {
	if a == nil || b == nil {
		return nil, nil
	}
	var t reflect.Type
	if a.typed {
		t = a.root.typ
	}
	return Compile(t, append(a.Paths(), b.paths...))
}

// Covers tells whether f keeps everything g keeps (nil keeps everything).
func Covers(f, g *Fields) bool {
	if f == nil {
		return true
	}
	if g == nil {
		return false
	}
	for _, p := range g.paths {
		segs := strings.Split(p, ".")
		covered := false
		for _, q := range f.paths {
			if hasPrefix(segs, strings.Split(q, ".")) {
				covered = true
				break
			}
		}
		if !covered {
			return false
		}
	}
	return true
}

// Equal tells whether f and g keep the same (nil: everything).
func Equal(f, g *Fields) bool {
	if f == nil || g == nil {
		return f == g
	}
	return slices.Equal(f.paths, g.paths)
}
