package squash

import (
	"bytes"
	"encoding/binary"
	"hash/crc32"
	"testing"
)

// FuzzDecode decodes arbitrary entries with a real dictionary (of the
// first Pods of testCorpus): Decode never panics, and the bytes it returns
// encode to an entry that decodes to them again. With fixSum the entry's
// checksum is set right first, so that the s2 block behind it, not only
// the checksum, is what is fuzzed.
func FuzzDecode(f *testing.F) {
	c := testCorpus(f)
	d := mustDict(f, c.proto)
	for _, o := range [][]byte{c.proto[30], c.proto[500], c.json[40], []byte("tiny"), bytes.Repeat([]byte{7}, 300)} {
		e := d.Encode(nil, o)
		f.Add(e, false)
		f.Add(e[:len(e)/2], true)
		f.Add(e, true)
	}
	f.Add([]byte{}, false)
	f.Add([]byte{kindS2, 0, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0x0f}, true)
	f.Fuzz(func(t *testing.T, entry []byte, fixSum bool) {
		if fixSum && len(entry) >= s2Header && entry[0] == kindS2 {
			entry = bytes.Clone(entry)
			binary.LittleEndian.PutUint32(entry[1:], crc32.Update(d.seed, castagnoli, entry[s2Header:]))
		}
		out, err := d.Decode(nil, entry)
		if err != nil {
			if len(out) != 0 {
				t.Fatalf("Decode returned %d bytes with error %v", len(out), err)
			}
			return
		}
		if len(out) > MaxLen {
			t.Fatalf("Decode returned %d bytes, more than MaxLen", len(out))
		}
		// The same into a dst with bytes and spare room.
		dst := make([]byte, 3, 3+len(out)+10)
		again, err := d.Decode(dst, entry)
		if err != nil || !bytes.Equal(again[3:], out) {
			t.Fatalf("Decode into a dst: %v, not the same bytes", err)
		}
		e := d.Encode(nil, out)
		if len(e) > len(out)+1 {
			t.Fatalf("Encode of %d bytes: entry of %d", len(out), len(e))
		}
		back, err := d.Decode(nil, e)
		if err != nil || !bytes.Equal(back, out) {
			t.Fatalf("Decode(Encode(%d bytes)): %v, not the same bytes", len(out), err)
		}
	})
}
