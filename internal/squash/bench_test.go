package squash

import (
	"bytes"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"

	"github.com/klauspost/compress/dict"
	"github.com/klauspost/compress/s2"
	"github.com/klauspost/compress/zstd"
)

// codec is one way to hold an object's bytes, for BenchmarkCodecs.
type codec struct {
	name   string
	encode func(dst, src []byte) []byte
	decode func(dst, src []byte) ([]byte, error)
}

const (
	benchObjects = 3000 // the Pods of BenchmarkCodecs
	benchSkip    = 256  // the first ones, samples only: not measured
	trainSamples = 256  // the samples of a trained dictionary
)

// codecs returns the codecs compared, their dictionaries made from the
// first objects of objs.
func codecs(tb testing.TB, objs [][]byte) []codec {
	tb.Helper()
	cs := []codec{{
		name:   "none",
		encode: func(dst, src []byte) []byte { return append(dst[:0], src...) },
		decode: func(dst, src []byte) ([]byte, error) { return append(dst[:0], src...), nil },
	}, {
		name:   "s2",
		encode: s2.Encode,
		decode: s2.Decode,
	}}
	for _, n := range []int{8, 24, 64} {
		d := makeS2Dict(objs, n) // as NewDict: up to MaxDictLen bytes
		cs = append(cs, codec{
			name:   fmt.Sprintf("s2-raw%d", n),
			encode: d.Encode,
			decode: d.Decode,
		})
		if n == 24 {
			cs = append(cs, codec{
				name:   fmt.Sprintf("s2-raw%d-better", n),
				encode: d.EncodeBetter,
				decode: d.Decode,
			})
		}
	}
	trained, err := dict.BuildS2Dict(objs[:trainSamples], dict.Options{MaxDictSize: 64 << 10, HashBytes: 6})
	if err != nil {
		tb.Fatal(err)
	}
	if d := s2.NewDict(trained); d != nil {
		cs = append(cs, codec{name: "s2-trained64k", encode: d.Encode, decode: d.Decode})
	} else {
		tb.Log("dict.BuildS2Dict made an invalid dictionary")
	}

	zcodec := func(name string, eo []zstd.EOption, do []zstd.DOption) {
		eo = append(eo, zstd.WithEncoderConcurrency(1), zstd.WithEncoderCRC(false), zstd.WithEncoderLevel(zstd.SpeedDefault))
		do = append(do, zstd.WithDecoderConcurrency(1))
		enc, err := zstd.NewWriter(nil, eo...)
		if err != nil {
			tb.Fatal(err)
		}
		dec, err := zstd.NewReader(nil, do...)
		if err != nil {
			tb.Fatal(err)
		}
		cs = append(cs, codec{
			name:   name,
			encode: func(dst, src []byte) []byte { return enc.EncodeAll(src, dst[:0]) },
			decode: func(dst, src []byte) ([]byte, error) { return dec.DecodeAll(src, dst[:0]) },
		})
	}
	zcodec("zstd", nil, nil)
	raw, _ := dictContent(objs, 24) // as s2-raw24's
	zcodec("zstd-raw24", []zstd.EOption{zstd.WithEncoderDictRaw(1, raw)}, []zstd.DOption{zstd.WithDecoderDictRaw(1, raw)})
	zd, err := dict.BuildZstdDict(objs[:trainSamples], dict.Options{MaxDictSize: 16 << 10, HashBytes: 6, ZstdDictID: 2, ZstdLevel: zstd.SpeedDefault})
	if err != nil {
		tb.Fatal(err)
	}
	zcodec("zstd-trained16k", []zstd.EOption{zstd.WithEncoderDict(zd)}, []zstd.DOption{zstd.WithDecoderDicts(zd)})

	// This package: s2-raw24 (DictSamples), its header and checksum.
	sq, err := NewDict(objs)
	if err != nil {
		tb.Fatal(err)
	}
	cs = append(cs, codec{name: "squash", encode: sq.Encode, decode: sq.Decode})
	return cs
}

var benchData struct {
	once  sync.Once
	pods  *corpus
	kinds map[string][]codec
}

// BenchmarkCodecs compares the codecs on Pods (their protobuf, "pod") and
// on custom resources (the same Pods' JSON, "json"): the dictionaries are
// made from the first of 3000 objects in list order, and the objects after
// the first 256 are measured. Each reports bytes/obj (the average entry)
// and its ns/op is one object's encoding or decoding.
func BenchmarkCodecs(b *testing.B) {
	benchData.once.Do(func() {
		benchData.pods = makeCorpus(b, 1, benchObjects)
		benchData.kinds = map[string][]codec{
			"pod":  codecs(b, benchData.pods.proto),
			"json": codecs(b, benchData.pods.json),
		}
	})
	for _, kind := range []string{"pod", "json"} {
		objs := benchData.pods.proto
		if kind == "json" {
			objs = benchData.pods.json
		}
		objs = objs[benchSkip:]
		for _, c := range benchData.kinds[kind] {
			entries := make([][]byte, len(objs))
			total := 0
			for i, o := range objs {
				entries[i] = bytes.Clone(c.encode(nil, o))
				total += len(entries[i])
				if out, err := c.decode(nil, entries[i]); err != nil || !bytes.Equal(out, o) {
					b.Fatalf("%s/%s: object %d does not round trip: %v", kind, c.name, i, err)
				}
			}
			perObj := float64(total) / float64(len(objs))
			b.Run(kind+"/"+c.name+"/encode", func(b *testing.B) {
				buf := make([]byte, 0, 2*s2.MaxEncodedLen(64<<10))
				i := 0
				for b.Loop() {
					buf = c.encode(buf[:0], objs[i])
					if i++; i == len(objs) {
						i = 0
					}
				}
				b.ReportMetric(perObj, "bytes/obj")
			})
			b.Run(kind+"/"+c.name+"/decode", func(b *testing.B) {
				buf := make([]byte, 0, 64<<10)
				i := 0
				for b.Loop() {
					var err error
					if buf, err = c.decode(buf[:0], entries[i]); err != nil {
						b.Fatal(err)
					}
					if i++; i == len(objs) {
						i = 0
					}
				}
				b.ReportMetric(perObj, "bytes/obj")
			})
		}
	}
}

// BenchmarkNewDict is the cost of making a dictionary from a list's first
// Pods (what an informer pays once, and again for each new dictionary).
func BenchmarkNewDict(b *testing.B) {
	c := makeCorpus(b, 1, 100)
	for b.Loop() {
		if _, err := NewDict(c.proto); err != nil {
			b.Fatal(err)
		}
	}
}

// BenchmarkChecksum is what an entry's checksum costs Encode and Decode
// each: a CRC-32C of a Pod's s2 block (about 760 bytes).
func BenchmarkChecksum(b *testing.B) {
	c := makeCorpus(b, 1, 300)
	d, err := NewDict(c.proto)
	if err != nil {
		b.Fatal(err)
	}
	block := d.Encode(nil, c.proto[200])[s2Header:]
	b.SetBytes(int64(len(block)))
	for b.Loop() {
		crc32.Update(d.seed, castagnoli, block)
	}
}
