package protowatch

import (
	"google.golang.org/protobuf/encoding/protowire"

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
