package protowatch

import (
	"reflect"
	"strconv"
	"strings"

	"google.golang.org/protobuf/encoding/protowire"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"

	"github.com/kinformer/kinformer/internal/intern"
)

// rewriteMeta cuts fields out of the object's metadata before it is
// decoded: managedFields (if stripped), and labels and annotations whose
// exact wire bytes an earlier object had, whose decoded maps it returns for
// the object to share. It leaves the wire bytes of the labels and
// annotations in d.lkey and d.akey. The result is in d.scratch, or obj
// itself when nothing is cut or the bytes do not parse (Unmarshal then says
// what is wrong).
func (d *decoder) rewriteMeta(obj []byte) (out []byte, labels, annotations map[string]string) {
	l := d.f.Layout
	d.lkey, d.akey = d.lkey[:0], d.akey[:0]
	d.walked = false
	if l.Meta == 0 {
		return obj, nil, nil
	}
	// bail leaves the bytes to Unmarshal, and nothing to remember under a
	// partial key.
	bail := func() ([]byte, map[string]string, map[string]string) {
		d.lkey, d.akey = d.lkey[:0], d.akey[:0]
		return obj, nil, nil
	}
	// Find the metadata field.
	start, tagLen, end := -1, 0, 0
	var meta []byte
	for off := 0; off < len(obj); {
		num, typ, n := protowire.ConsumeTag(obj[off:])
		if n < 0 {
			return obj, nil, nil
		}
		m := protowire.ConsumeFieldValue(num, typ, obj[off+n:])
		if m < 0 {
			return obj, nil, nil
		}
		if num == l.Meta && start >= 0 {
			return bail() // metadata twice: Unmarshal merges them
		}
		if num == l.Meta && typ == protowire.BytesType {
			meta, _ = protowire.ConsumeBytes(obj[off+n:])
			start, tagLen, end = off, n, off+n+m
		}
		off += n + m
	}
	if start < 0 {
		return obj, nil, nil
	}
	// Collect its labels and annotations, see whether managedFields are there.
	managed := false
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		if n < 0 {
			return bail()
		}
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if m < 0 {
			return bail()
		}
		if (num == l.ManagedFields || num == l.Labels || num == l.Annotations) && typ != protowire.BytesType {
			return bail() // not what ObjectMeta has there: let Unmarshal say so
		}
		switch num {
		case l.ManagedFields:
			managed = true
		case l.Labels:
			d.lkey = append(d.lkey, meta[off:off+n+m]...)
		case l.Annotations:
			d.akey = append(d.akey, meta[off:off+n+m]...)
		}
		off += n + m
	}
	var drop [3]protowire.Number
	if d.f.StripManagedFields && managed {
		drop[0] = l.ManagedFields
	}
	if sh := d.f.Share; sh != nil {
		var ok bool
		if intern.Shareable(d.lkey) {
			if labels, ok = sh.WireMap(d.lkey); ok {
				drop[1] = l.Labels
			}
		}
		if intern.Shareable(d.akey) {
			if annotations, ok = sh.WireMap(d.akey); ok {
				drop[2] = l.Annotations
			}
		}
	}
	d.walked = true
	if drop == [3]protowire.Number{} {
		return obj, labels, annotations
	}
	kept := 0
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if num != drop[0] && num != drop[1] && num != drop[2] {
			kept += n + m
		}
		off += n + m
	}
	out = append(d.scratch[:0], obj[:start]...)
	out = append(out, obj[start:start+tagLen]...)
	out = protowire.AppendVarint(out, uint64(kept))
	for off := 0; off < len(meta); {
		num, typ, n := protowire.ConsumeTag(meta[off:])
		m := protowire.ConsumeFieldValue(num, typ, meta[off+n:])
		if num != drop[0] && num != drop[1] && num != drop[2] {
			out = append(out, meta[off:off+n+m]...)
		}
		off += n + m
	}
	out = append(out, obj[end:]...)
	d.scratch = out
	return out, labels, annotations
}

// Meta is what an encoded object's metadata says of it.
type Meta struct {
	Name, Namespace, UID, ResourceVersion string
}

// ReadMeta reads the name, namespace, UID and resourceVersion of an
// encoded object whose ObjectMeta is field meta, without decoding it.
// false if the bytes do not parse, or hold the metadata (or one of these
// fields) twice, which Unmarshal would merge: decode those.
func ReadMeta(b []byte, meta protowire.Number) (Meta, bool) {
	var m Meta
	var mb []byte
	found := false
	ok := eachBytes(b, func(num protowire.Number, v []byte) bool {
		if num != meta {
			return true
		}
		if found {
			return false
		}
		found, mb = true, v
		return true
	})
	if !ok || !found {
		return m, false
	}
	var seen [7]bool
	ok = eachBytes(mb, func(num protowire.Number, v []byte) bool {
		var f *string
		switch num {
		case 1:
			f = &m.Name
		case 3:
			f = &m.Namespace
		case 5:
			f = &m.UID
		case 6:
			f = &m.ResourceVersion
		default:
			return true
		}
		if seen[num] {
			return false
		}
		seen[num], *f = true, string(v)
		return true
	})
	return m, ok
}

// eachBytes calls fn with each length-delimited field of msg until it
// returns false; false if it did, or msg does not parse.
func eachBytes(msg []byte, fn func(protowire.Number, []byte) bool) bool {
	for off := 0; off < len(msg); {
		num, typ, n := protowire.ConsumeTag(msg[off:])
		if n < 0 {
			return false
		}
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(msg[off+n:])
			if m < 0 || !fn(num, v) {
				return false
			}
			off += n + m
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, msg[off+n:])
		if m < 0 {
			return false
		}
		off += n + m
	}
	return true
}

// Layout holds the protobuf field numbers of a type's embedded ObjectMeta
// and of ObjectMeta's managedFields, labels and annotations.
type Layout struct {
	Meta, ManagedFields, Labels, Annotations protowire.Number
}

// LayoutOf reads the Layout of a struct type from its protobuf struct tags;
// the zero Layout if any field is missing or not as expected.
func LayoutOf(t reflect.Type) Layout {
	if t.Kind() != reflect.Struct {
		return Layout{}
	}
	f, ok := t.FieldByName("ObjectMeta")
	if !ok || f.Type != reflect.TypeFor[metav1.ObjectMeta]() || len(f.Index) != 1 {
		return Layout{}
	}
	num := func(name string) protowire.Number {
		sf, _ := f.Type.FieldByName(name)
		return fieldNumber(sf.Tag)
	}
	l := Layout{Meta: fieldNumber(f.Tag), ManagedFields: num("ManagedFields"), Labels: num("Labels"), Annotations: num("Annotations")}
	if l.Meta == 0 || l.ManagedFields == 0 || l.Labels == 0 || l.Annotations == 0 {
		return Layout{}
	}
	return l
}

// fieldNumber reads the number of a `protobuf:"bytes,17,rep,..."` tag.
func fieldNumber(tag reflect.StructTag) protowire.Number {
	parts := strings.Split(tag.Get("protobuf"), ",")
	if len(parts) < 2 || parts[0] != "bytes" {
		return 0
	}
	n, err := strconv.Atoi(parts[1])
	if err != nil || n <= 0 {
		return 0
	}
	return protowire.Number(n)
}
