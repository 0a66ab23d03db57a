package projection

import "google.golang.org/protobuf/encoding/protowire"

// maxDepth bounds the nesting Proto walks; a projection deeper than this
// (none is) is refused.
const maxDepth = 32

// A Projector cuts the fields a projection leaves out of protobuf bytes,
// reusing its buffers from one object to the next. It belongs to one
// goroutine.
type Projector struct {
	f       *Fields
	scratch [maxDepth][]byte
}

// NewProjector returns a Projector of f, which must have been compiled
// against a type with protobuf tags.
func NewProjector(f *Fields) *Projector { return &Projector{f: f} }

// Fields is the projection p cuts.
func (p *Projector) Fields() *Fields { return p.f }

// Proto returns the bytes of msg, an encoded object of the projection's
// type, with only the kept fields: their bytes as they were, in their
// order, messages kept in part rewritten. The result is the Projector's
// until the next call. false if msg does not parse, or a kept field is
// not of the wire type its Go type has (the caller decodes msg as it is,
// and Unmarshal says what is wrong).
func (p *Projector) Proto(msg []byte) ([]byte, bool) {
	out, ok := p.proto(p.scratch[0][:0], msg, p.f.root, 1)
	p.scratch[0] = out
	return out, ok
}

func (p *Projector) proto(out, msg []byte, n *Node, depth int) ([]byte, bool) {
	for off := 0; off < len(msg); {
		num, typ, tn := protowire.ConsumeTag(msg[off:])
		if tn < 0 {
			return out, false
		}
		vn := protowire.ConsumeFieldValue(num, typ, msg[off+tn:])
		if vn < 0 {
			return out, false
		}
		field := msg[off : off+tn+vn]
		off += tn + vn
		child, keep := n.num(num)
		switch {
		case !keep:
		case child == nil:
			out = append(out, field...)
		case typ != protowire.BytesType || depth >= maxDepth:
			return out, false
		default:
			v, _ := protowire.ConsumeBytes(field[tn:])
			sub, ok := p.proto(p.scratch[depth][:0], v, child, depth+1)
			p.scratch[depth] = sub
			if !ok {
				return out, false
			}
			out = append(out, field[:tn]...)
			out = protowire.AppendVarint(out, uint64(len(sub)))
			out = append(out, sub...)
		}
	}
	return out, true
}

// num returns what of protobuf field num is kept (nums is short: a linear
// search beats a map).
func (n *Node) num(num protowire.Number) (child *Node, keep bool) {
	for _, f := range n.nums {
		if f.num == num {
			return f.child, true
		}
		if f.num > num {
			break
		}
	}
	return nil, false
}
