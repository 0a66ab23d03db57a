package projection

import "reflect"

// Apply clears, in place, every field of obj that the projection leaves
// out: obj is a pointer to a struct of the projection's type (an object
// decoded whole, by a client's own decoder), or, for an untyped
// projection, the map of an unstructured object. Objects already
// projected are left as they are.
func (f *Fields) Apply(obj any) {
	if m, ok := obj.(map[string]any); ok {
		f.root.applyMap(m)
		return
	}
	v := reflect.ValueOf(obj)
	if !f.typed || v.Kind() != reflect.Pointer || v.IsNil() || v.Elem().Type() != f.root.typ {
		return
	}
	f.root.apply(v.Elem())
}

// apply clears what n leaves out of v, a struct of n's type.
func (n *Node) apply(v reflect.Value) {
	for i, keep := range n.keep {
		fv := v.Field(i)
		switch {
		case !n.typ.Field(i).IsExported():
		case !keep:
			if !fv.IsZero() {
				fv.SetZero()
			}
		case n.sub[i] != nil:
			n.sub[i].applyValue(fv)
		}
	}
}

// applyValue applies n to v, a struct, a pointer to one, or a list of
// them.
func (n *Node) applyValue(v reflect.Value) {
	switch v.Kind() {
	case reflect.Pointer:
		if !v.IsNil() {
			n.applyValue(v.Elem())
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			n.applyValue(v.Index(i))
		}
	case reflect.Struct:
		n.apply(v)
	}
}

// applyMap applies an untyped (or typed: by JSON name) n to an
// unstructured object's map.
func (n *Node) applyMap(m map[string]any) {
	for name, val := range m {
		c, keep := n.Child(name)
		switch {
		case !keep:
			delete(m, name)
		case c != nil:
			c.applyAny(val)
		}
	}
}

func (n *Node) applyAny(v any) {
	switch v := v.(type) {
	case map[string]any:
		n.applyMap(v)
	case []any:
		for _, e := range v {
			n.applyAny(e)
		}
	}
}
