package projection

import "reflect"

// probeDepth bounds how deep Probe fills nested structs (recursive types,
// such as JSONSchemaProps, would not end).
const probeDepth = 8

// Probe returns a new object of the projection's type (a pointer to a
// struct) with every exported field set, strings to "x", numbers to 1,
// bools to true, lists and maps to one such element, pointers to such a
// value, and a copy of it projected; nil, nil for an untyped projection.
// A function of the object that gives the same on both reads only what
// the projection keeps, as far as one object can tell.
func (f *Fields) Probe() (whole, projected any) {
	if !f.typed {
		return nil, nil
	}
	mk := func() any {
		v := reflect.New(f.root.typ)
		fill(v.Elem(), probeDepth)
		return v.Interface()
	}
	whole, projected = mk(), mk()
	f.Apply(projected)
	return whole, projected
}

func fill(v reflect.Value, depth int) {
	if depth == 0 || !v.CanSet() {
		return
	}
	switch v.Kind() {
	case reflect.String:
		v.SetString("x")
	case reflect.Bool:
		v.SetBool(true)
	case reflect.Int, reflect.Int8, reflect.Int16, reflect.Int32, reflect.Int64:
		v.SetInt(1)
	case reflect.Uint, reflect.Uint8, reflect.Uint16, reflect.Uint32, reflect.Uint64:
		v.SetUint(1)
	case reflect.Float32, reflect.Float64:
		v.SetFloat(1)
	case reflect.Pointer:
		p := reflect.New(v.Type().Elem())
		fill(p.Elem(), depth-1)
		v.Set(p)
	case reflect.Slice:
		s := reflect.MakeSlice(v.Type(), 1, 1)
		fill(s.Index(0), depth-1)
		v.Set(s)
	case reflect.Map:
		m := reflect.MakeMapWithSize(v.Type(), 1)
		k, e := reflect.New(v.Type().Key()).Elem(), reflect.New(v.Type().Elem()).Elem()
		fill(k, depth-1)
		fill(e, depth-1)
		m.SetMapIndex(k, e)
		v.Set(m)
	case reflect.Struct:
		for i := range v.NumField() {
			if v.Type().Field(i).IsExported() {
				fill(v.Field(i), depth-1)
			}
		}
	}
}
