package store

import (
	"encoding/binary"
	"unique"
	"unsafe"

	"k8s.io/apimachinery/pkg/runtime/schema"

	"github.com/kinformer/kinformer/internal/packedvalues"
)

// The record a compact cache keeps for each object (compact.go): its
// encoding, resourceVersion and, for some objects, extras.

// packed is an object of a compact cache. It is never changed once made
// (and published). It is 24 bytes, a size class of its own: each field
// is one word of what every object has. Its namespace is its key's in a
// cache of the default key (namespace/name), else one of its extras.
type packed struct {
	// d is the first byte of the encoding (nil if it is empty), whose
	// length is in rl; an encoding of lenMask bytes or more has its length
	// in the 8 bytes before it, which d points to (newPacked).
	d *byte
	// rl holds, in its top bit, whether the object is cluster-scoped
	// (clusterBit: its key is its name, whatever the name holds); below
	// it, above lenBits, rvn: metadata.resourceVersion, if it is a decimal
	// number without leading zeros (what every API server backed by etcd
	// gives: its revisions) other than 0 and at most maxRVN (half a
	// trillion revisions); else 0, and the packer's oddRVs hold it. Below
	// lenBits, the encoding's length (lenMask: a long one).
	rl uint64
	// x holds what only some caches or objects have; nil for none.
	x *packedExtra
}

const (
	lenBits    = 24
	lenMask    = 1<<lenBits - 1
	maxRVN     = 1<<(63-lenBits) - 1
	clusterBit = 1 << 63
)

// setData makes data the encoding p holds.
func (p *packed) setData(data []byte) {
	p.rl &^= lenMask
	switch {
	case len(data) == 0:
		p.d = nil
	case len(data) >= lenMask:
		// 16 MiB, more than etcd keeps by default: worth a copy, once.
		b := make([]byte, 8+len(data))
		binary.LittleEndian.PutUint64(b, uint64(len(data)))
		copy(b[8:], data)
		p.d, p.rl = &b[0], p.rl|lenMask
	default:
		p.d, p.rl = unsafe.SliceData(data), p.rl|uint64(len(data))
	}
}

// data returns the encoding p holds (not to be changed).
func (p *packed) data() []byte {
	n := p.rl & lenMask
	if n == lenMask {
		n = binary.LittleEndian.Uint64(unsafe.Slice(p.d, 8))
		return unsafe.Slice((*byte)(unsafe.Add(unsafe.Pointer(p.d), 8)), n)
	}
	return unsafe.Slice(p.d, n)
}

// rvn returns p's resourceVersion as a number, 0 if it is not one rl
// holds (the packer's oddRVs does).
func (p *packed) rvn() uint64 { return p.rl &^ clusterBit >> lenBits }

// rvNumber returns rv as packed.rvn keeps it: its number, or 0 if it is
// not a decimal number in canonical form (or is "0"), or above maxRVN.
func rvNumber(rv string) uint64 {
	if len(rv) == 0 || len(rv) > 19 || rv[0] < '1' || rv[0] > '9' {
		return 0 // 19 digits always fit a uint64
	}
	var n uint64
	for i := 0; i < len(rv); i++ {
		c := rv[i]
		if c < '0' || c > '9' {
			return 0
		}
		n = n*10 + uint64(c-'0')
	}
	if n > maxRVN {
		return 0
	}
	return n
}

// packedExtra is what a packed object may have besides its bytes.
type packedExtra struct {
	uid  string              // metadata.uid, if the cache keeps UIDs (Cache.uids)
	vals packedvalues.Values // the values of the eager indexes, in Cache.order
	// kind holds, where set, the object's apiVersion and kind, if it had
	// any and its encoding does not hold them (protobuf; set again on
	// decoding), and its metadata.namespace, in a cache of another key
	// than the default (packer.keyNS false): one word for both, as few
	// objects have either and a cache's have few distinct pairs, so that
	// the extras of an indexed object are 48 bytes, a size class.
	kind unique.Handle[nsKind]
}

// nsKind is what packedExtra.kind holds.
type nsKind struct {
	ns  string
	gvk schema.GroupVersionKind
}

// nsKind returns what x.kind holds (zero if unset).
func (x *packedExtra) nsKind() nsKind {
	if x.kind == (unique.Handle[nsKind]{}) {
		return nsKind{}
	}
	return x.kind.Value()
}

var noExtra packedExtra // never changed

// extra returns p's extras, to read.
func (p *packed) extra() *packedExtra {
	if p.x == nil {
		return &noExtra
	}
	return p.x
}

// ext returns p's extras to set, while p is being made.
func (p *packed) ext() *packedExtra {
	if p.x == nil {
		p.x = &packedExtra{}
	}
	return p.x
}
