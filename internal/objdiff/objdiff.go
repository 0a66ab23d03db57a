// Package objdiff says briefly how two states of a Kubernetes object
// differ, for the mutation detector's reports: by semantic equality
// (equality.Semantic), paths in JSON names, values cut short.
package objdiff

import (
	"fmt"
	"reflect"
	"slices"
	"strings"
	"sync"
	"unicode/utf8"

	"k8s.io/apimachinery/pkg/api/equality"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
)

// MaxDiffs and MaxValue bound what Diff says: the first differences
// found, each value cut at MaxValue runes.
const (
	MaxDiffs = 3
	MaxValue = 60
)

// Diff returns "" if now is semantically equal to was
// (equality.Semantic: quantities by value, times by instant, nil and
// empty maps and slices alike), else a short account of what differs:
// the first few paths (MaxDiffs), with the values now and before.
func Diff(now, was any) string {
	if semanticEqual(now, was) {
		return ""
	}
	var a, b reflect.Value
	if u, ok := any(now).(*unstructured.Unstructured); ok && u != nil {
		if w, ok := any(was).(*unstructured.Unstructured); ok && w != nil {
			a, b = reflect.ValueOf(u.Object), reflect.ValueOf(w.Object)
		}
	}
	if !a.IsValid() {
		a, b = reflect.ValueOf(now), reflect.ValueOf(was)
	}
	var diffs []string
	more := false
	walkDiff(a, b, "", func(path, what string) bool {
		if len(diffs) == MaxDiffs {
			more = true
			return false
		}
		if path == "" {
			path = "object"
		}
		diffs = append(diffs, path+": "+what)
		return true
	})
	if len(diffs) == 0 { // differs only where reflection cannot look
		return "changed"
	}
	s := strings.Join(diffs, "; ")
	if more {
		s += "; …"
	}
	return s
}

// semanticFails holds the types equality.Semantic cannot compare: it
// panics on an unexported field of a type it has no function for (a
// time.Time in a custom resource's struct, say). Those are compared with
// reflect.DeepEqual, stricter but never wrong the other way.
var semanticFails sync.Map // reflect.Type -> struct{}

// semanticEqual is equality.Semantic.DeepEqual, or reflect.DeepEqual for
// the types it cannot compare. reflect.DeepEqual comes first: objects equal
// to it are equal to Semantic too, it is several times faster and does not
// allocate, and an object unchanged since its copy was made is
// reflect.DeepEqual to the copy. Semantic is asked only when it says no.
func semanticEqual(a, b any) (equal bool) {
	if reflect.DeepEqual(a, b) {
		return true
	}
	t := reflect.TypeOf(a)
	if _, ok := semanticFails.Load(t); ok {
		return reflect.DeepEqual(a, b)
	}
	defer func() {
		if r := recover(); r != nil {
			semanticFails.Store(t, struct{}{})
			equal = reflect.DeepEqual(a, b)
		}
	}()
	return equality.Semantic.DeepEqual(a, b)
}

// walkDiff calls found with the path and an account of each difference
// between a (now) and b (before), descending into what differs, until
// found returns false. Struct fields are named by their JSON names.
func walkDiff(a, b reflect.Value, path string, found func(path, what string) bool) bool {
	if a.CanInterface() && b.CanInterface() && semanticEqual(a.Interface(), b.Interface()) {
		return true
	}
	leaf := func() bool {
		sa, sb := showValue(a), showValue(b)
		if sa == sb && a.IsValid() && b.IsValid() { // 1 and 1: an int64 and a float64
			sa, sb = sa+" ("+a.Type().String()+")", sb+" ("+b.Type().String()+")"
		}
		return found(path, sa+", was "+sb)
	}
	if a.Kind() == reflect.Interface && b.Kind() == reflect.Interface && !a.IsNil() && !b.IsNil() {
		a, b = a.Elem(), b.Elem()
	}
	if a.Type() != b.Type() {
		return leaf()
	}
	switch a.Kind() {
	case reflect.Pointer:
		if a.IsNil() || b.IsNil() {
			return leaf()
		}
		return walkDiff(a.Elem(), b.Elem(), path, found)
	case reflect.Struct:
		t := a.Type()
		differs := false
		for i := range t.NumField() {
			f := t.Field(i)
			if !f.IsExported() {
				continue
			}
			name, inline := jsonName(f)
			p := path
			if !inline {
				p = joinPath(path, name)
			}
			fa, fb := a.Field(i), b.Field(i)
			if fa.CanInterface() && fb.CanInterface() && semanticEqual(fa.Interface(), fb.Interface()) {
				continue
			}
			differs = true
			if !walkDiff(fa, fb, p, found) {
				return false
			}
		}
		if !differs { // quantities, times: compared as a whole
			return leaf()
		}
		return true
	case reflect.Map:
		keys := map[string]reflect.Value{}
		for _, m := range []reflect.Value{a, b} {
			for _, k := range m.MapKeys() {
				keys[fmt.Sprint(k.Interface())] = k
			}
		}
		names := make([]string, 0, len(keys))
		for n := range keys {
			names = append(names, n)
		}
		slices.Sort(names)
		jsonObject := a.Type().Elem().Kind() == reflect.Interface
		for _, n := range names {
			k := keys[n]
			p := path + fmt.Sprintf("[%q]", n)
			if jsonObject {
				p = joinPath(path, n)
			}
			va, vb := a.MapIndex(k), b.MapIndex(k)
			var ok bool
			switch {
			case !va.IsValid():
				ok = found(p, "absent, was "+showValue(vb))
			case !vb.IsValid():
				ok = found(p, showValue(va)+", was absent")
			default:
				ok = walkDiff(va, vb, p, found)
			}
			if !ok {
				return false
			}
		}
		return true
	case reflect.Slice, reflect.Array:
		if a.Len() != b.Len() {
			return found(path, fmt.Sprintf("%d items, was %d", a.Len(), b.Len()))
		}
		for i := range a.Len() {
			if !walkDiff(a.Index(i), b.Index(i), fmt.Sprintf("%s[%d]", path, i), found) {
				return false
			}
		}
		return true
	}
	return leaf()
}

// jsonName returns the name of a struct field in JSON, and whether it is
// inlined (an embedded struct without a name, like TypeMeta).
func jsonName(f reflect.StructField) (string, bool) {
	tag := f.Tag.Get("json")
	name, opts, _ := strings.Cut(tag, ",")
	if name == "" && f.Anonymous && (strings.Contains(opts, "inline") || tag == "") {
		return "", true
	}
	if name == "" || name == "-" {
		name = f.Name
	}
	return name, false
}

func joinPath(path, name string) string {
	if path == "" {
		return name
	}
	return path + "." + name
}

// showValue renders v briefly: strings quoted, values with a String
// method (quantities, times) by it, others by fmt, all cut at
// MaxValue runes.
func showValue(v reflect.Value) string {
	if !v.IsValid() {
		return "absent"
	}
	if !v.CanInterface() {
		return "(unexported)"
	}
	var s string
	switch {
	case v.Kind() == reflect.Pointer && !v.IsNil():
		return showValue(v.Elem()) // never a String method on the cached value itself: it may cache into it
	case v.Kind() == reflect.String:
		s = fmt.Sprintf("%q", v.String())
	case (v.Kind() == reflect.Pointer || v.Kind() == reflect.Interface || v.Kind() == reflect.Map || v.Kind() == reflect.Slice) && v.IsNil():
		s = "nil"
	default:
		x := v.Interface()
		if _, ok := x.(fmt.Stringer); !ok && reflect.PointerTo(v.Type()).Implements(reflect.TypeFor[fmt.Stringer]()) {
			p := reflect.New(v.Type()) // a copy: String may cache into its receiver
			p.Elem().Set(v)
			x = p.Interface()
		}
		if str, ok := x.(string); ok {
			s = fmt.Sprintf("%q", str)
		} else {
			s = fmt.Sprintf("%v", x)
		}
	}
	if utf8.RuneCountInString(s) > MaxValue {
		r := []rune(s)
		s = string(r[:MaxValue]) + "…"
	}
	return s
}
