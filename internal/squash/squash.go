package squash

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"

	"github.com/klauspost/compress/s2"
)

const (
	// MaxDictLen caps a dictionary's content: NewDict never keeps more,
	// whatever its samples (s2 cannot refer further back anyway).
	MaxDictLen = s2.MaxDictSize // 64 KiB

	// DictSamples is how many samples NewDict uses at most: the first
	// ones, up to MaxDictLen bytes (doc.go: the measurements).
	DictSamples = 24

	// MaxLen is the largest object Encode compresses; larger ones are
	// kept as they are. Decode refuses a compressed entry that says it
	// holds more, so damaged input never makes it allocate more.
	MaxLen = 16 << 20
)

// The header byte of an entry.
// They are 4 bits apart, so that no bit flipped in the header turns one
// into the other.
const (
	kindRaw = 0x00 // the object as it came: kindRaw, object
	kindS2  = 0x53 // 'S', checksum (4 bytes, little endian), s2 block
)

const s2Header = 1 + 4

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

var (
	// ErrCorrupt is returned by Decode for an entry that is damaged,
	// truncated, or was made with another dictionary.
	ErrCorrupt = errors.New("squash: corrupt entry or another dictionary's")
	// ErrFewSamples is returned by NewDict when its samples are fewer
	// than s2.MinDictSize bytes in all.
	ErrFewSamples = errors.New("squash: too few sample bytes for a dictionary")
)

// Dict is a dictionary made from sample encodings: the first objects of
// an informer. It is never changed once made, and its methods may be
// called on many goroutines at once.
type Dict struct {
	s2   *s2.Dict
	ser  []byte // s2.Dict.Bytes(): repeat offset (uvarint) and content
	id   uint64
	seed uint32 // the checksums' initial value, from id
}

// NewDict makes a dictionary of the first DictSamples samples, as many
// of them as fit in MaxDictLen bytes (at least the first one, cut if it
// is longer). The samples are not kept.
func NewDict(samples [][]byte) (*Dict, error) {
	sd := makeS2Dict(samples, DictSamples)
	if sd == nil {
		return nil, ErrFewSamples
	}
	return newDict(sd.Bytes())
}

// makeS2Dict returns the s2 dictionary of dictContent(samples, n); nil if
// it is shorter than s2.MinDictSize.
func makeS2Dict(samples [][]byte, n int) *s2.Dict {
	data, last := dictContent(samples, n)
	if len(data) < s2.MinDictSize {
		return nil
	}
	// The repeat offset starts at the last sample's first bytes: an
	// object's first bytes can then be a repeat (they vary little).
	return s2.MakeDict(data, last[:min(len(last), 32)])
}

// dictContent returns the first n samples one after the other, as many of
// them as fit in MaxDictLen bytes (at least the first one, cut if it is
// longer), and the last of them.
func dictContent(samples [][]byte, n int) (data, last []byte) {
	for i, s := range samples {
		if i == n || len(data) == MaxDictLen {
			break
		}
		if len(data)+len(s) > MaxDictLen {
			if len(data) > 0 {
				break
			}
			s = s[:MaxDictLen]
		}
		data = append(data, s...)
		if len(s) > 0 {
			last = s
		}
	}
	return data, last
}

// dictMagic starts Bytes: "squash", a version.
var dictMagic = []byte("sqd\x01")

// LoadDict returns the dictionary that Bytes returned, after checking it.
func LoadDict(b []byte) (*Dict, error) {
	if len(b) < len(dictMagic)+4 || string(b[:len(dictMagic)]) != string(dictMagic) {
		return nil, errors.New("squash: not a dictionary")
	}
	body, sum := b[len(dictMagic):len(b)-4], b[len(b)-4:]
	if crc32.Checksum(b[:len(b)-4], castagnoli) != binary.LittleEndian.Uint32(sum) {
		return nil, errors.New("squash: damaged dictionary")
	}
	return newDict(body) // copied
}

// newDict returns the dictionary that s2.Dict.Bytes returned as ser.
func newDict(ser []byte) (*Dict, error) {
	// s2.NewDict copies the content unless 16 bytes of room follow it.
	ser = append(make([]byte, 0, len(ser)+16), ser...)
	sd := s2.NewDict(ser)
	if sd == nil {
		return nil, errors.New("squash: invalid dictionary")
	}
	// s2.NewDict checks the length, from 16 bytes to 64 KiB, and that the
	// repeat offset is in the content; as MakeDict does, keep it 8 bytes
	// before the end.
	if r, n := binary.Uvarint(ser); n <= 0 || r+8 > uint64(len(ser)-n) {
		return nil, errors.New("squash: invalid dictionary")
	}
	h := sha256.Sum256(ser)
	id := binary.LittleEndian.Uint64(h[:8])
	return &Dict{s2: sd, ser: ser, id: id, seed: uint32(id) ^ uint32(id>>32)}, nil
}

// ID identifies the dictionary: a hash of its content. Two dictionaries
// with the same ID decode each other's entries.
func (d *Dict) ID() uint64 { return d.id }

// Len is the size of the dictionary's content in bytes.
func (d *Dict) Len() int { return len(d.ser) }

// Bytes returns the dictionary serialised, for LoadDict: "sqd\x01", the
// s2 dictionary (its repeat offset as a uvarint, its content), a CRC-32C
// of what comes before it (4 bytes, little endian).
func (d *Dict) Bytes() []byte {
	b := make([]byte, 0, len(dictMagic)+len(d.ser)+4)
	b = append(b, dictMagic...)
	b = append(b, d.ser...)
	return binary.LittleEndian.AppendUint32(b, crc32.Checksum(b, castagnoli))
}

func (d *Dict) String() string { return fmt.Sprintf("squash.Dict(%016x, %d B)", d.id, len(d.ser)) }

// Encode appends src's entry to dst and returns it. The entry is src
// compressed against d (kindS2), or src as it is after one header byte
// (kindRaw) if compressing does not make it smaller than 7/8 of itself.
// The result may have spare capacity (up to about 1/6 of src): a caller
// that keeps many entries copies each to a slice of its own length.
func (d *Dict) Encode(dst, src []byte) []byte {
	start := len(dst)
	if len(src) > MaxLen || len(src) < 16 {
		return raw(dst, src)
	}
	need := s2Header + s2.MaxEncodedLen(len(src))
	if cap(dst)-start < need {
		dst = append(dst[:start:start], make([]byte, need)...)
	}
	block := d.s2.Encode(dst[start+s2Header:start+s2Header], src)
	n := s2Header + len(block)
	if n > len(src)-len(src)/8 {
		return raw(dst[:start], src)
	}
	dst = dst[:start+n]
	dst[start] = kindS2
	binary.LittleEndian.PutUint32(dst[start+1:], crc32.Update(d.seed, castagnoli, block))
	return dst
}

// Raw returns the object of an entry kept as it came (a raw entry, made
// by Encode or Wrap) without copying it, and true; false for an entry
// that must be decoded.
func Raw(entry []byte) ([]byte, bool) {
	if len(entry) == 0 || entry[0] != kindRaw {
		return nil, false
	}
	return entry[1:], true
}

// Len returns the length of an entry's object without decoding it (for
// a compressed entry, what its block says, unchecked): what the entry
// holds, to tell how well a dictionary fits.
func Len(entry []byte) (int, error) {
	if len(entry) == 0 {
		return 0, ErrCorrupt
	}
	switch entry[0] {
	case kindRaw:
		return len(entry) - 1, nil
	case kindS2:
		if len(entry) < s2Header+1 {
			return 0, ErrCorrupt
		}
		n, err := s2.DecodedLen(entry[s2Header:])
		if err != nil || n > MaxLen {
			return 0, ErrCorrupt
		}
		return n, nil
	}
	return 0, ErrCorrupt
}

// Wrap appends src's raw entry to dst: src as it is after one header
// byte, for an object held before there is a dictionary.
func Wrap(dst, src []byte) []byte { return raw(dst, src) }

func raw(dst, src []byte) []byte {
	dst = append(dst, kindRaw)
	return append(dst, src...)
}

// Decode appends the object of entry, which Encode made with d (or a
// dictionary of the same ID), to dst and returns it. An entry that is
// damaged or was made with another dictionary is an error, ErrCorrupt,
// unless it is kindRaw (its object's own decoding has to tell) or its
// checksum (32 bits) matches by chance. On error dst is returned as it
// was.
func (d *Dict) Decode(dst, entry []byte) ([]byte, error) {
	if len(entry) == 0 {
		return dst, ErrCorrupt
	}
	switch entry[0] {
	case kindRaw:
		return append(dst, entry[1:]...), nil
	case kindS2:
	default:
		return dst, ErrCorrupt
	}
	if len(entry) < s2Header+1 {
		return dst, ErrCorrupt
	}
	block := entry[s2Header:]
	if crc32.Update(d.seed, castagnoli, block) != binary.LittleEndian.Uint32(entry[1:]) {
		return dst, ErrCorrupt
	}
	n, err := s2.DecodedLen(block)
	if err != nil || n > MaxLen || n < 16 {
		return dst, ErrCorrupt
	}
	start := len(dst)
	if cap(dst)-start < n {
		dst = append(dst[:start:start], make([]byte, n)...)
	}
	out, err := d.s2.Decode(dst[start:start+n], block)
	if err != nil || len(out) != n {
		return dst[:start], ErrCorrupt
	}
	return dst[:start+n], nil
}
