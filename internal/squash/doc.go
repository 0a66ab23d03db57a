// Package squash compresses a compact cache's objects (Options.Compact:
// each object held as its encoding, protobuf for built-in types, JSON for
// custom resources) against a dictionary made from the informer's own
// first objects. The objects of one type in one cluster are near copies
// of each other: the Pods of a Deployment differ in their names, UIDs,
// IPs and timestamps. Compressed one by one without a dictionary they
// shrink little (s2: 0.68 of a Pod's protobuf); against a dictionary of
// 24 Pods to 0.29. It is the codec of the compact cache (the root's
// packer, internal/store/compact_dict.go), and stands alone: it knows nothing of caches.
//
// # Use
//
//	d, err := squash.NewDict(first)   // the first encodings an informer receives
//	entry := d.Encode(nil, obj)       // to hold
//	obj, err = d.Decode(nil, entry)   // to read: ErrCorrupt if damaged or another dictionary's
//	state := d.Bytes()                // for a state file; squash.LoadDict(state)
//	ratio.Add(len(obj), len(entry))   // a Ratio per dictionary: ratio.Degraded(base, min)
//
// A Dict is immutable and safe for concurrent use. Its content is at most
// MaxDictLen (64 KiB) whatever its samples: the first DictSamples (24)
// samples that fit; plus, once Encode has run, s2's 32 KiB hash table.
//
// # Entry format
//
// The first byte of an entry says what follows:
//
//	0x00 (raw)  the object as it came. Objects that do not compress to
//	            7/8 of their size or less, shorter than 16 bytes, or
//	            longer than MaxLen (16 MiB) are kept so: no entry is more
//	            than one byte longer than its object.
//	0x53 (s2)   a CRC-32C (4 bytes, little endian) of the rest, its
//	            initial value made from the dictionary's ID, then an s2
//	            block (github.com/klauspost/compress/s2) made with the
//	            dictionary, which starts with the object's length as a
//	            uvarint.
//
// Decode checks the checksum before it decodes, so an entry made with
// another dictionary, or damaged (flipped bits, truncated, extended), is
// ErrCorrupt, but for a chance of 2^-32, and damaged input never makes it
// allocate more than MaxLen. The two header values are 4 bits apart: no
// flipped bit turns one into the other. A raw entry has no checksum (it
// would cost 4 bytes more than the promised one): its damage is for the
// object's own decoding (protobuf, JSON) to find. The checksum costs 46 ns
// on a Pod's entry (-bench BenchmarkChecksum), each way: 6% of a decode.
//
// Bytes serialises a dictionary as "sqd\x01", the s2 dictionary (its
// repeat offset as a uvarint, its content), and a CRC-32C of all that (4
// bytes, little endian); LoadDict checks all three. ID is the first 8
// bytes of the SHA-256 of the s2 dictionary: two dictionaries of the same
// samples have the same ID and decode each other's entries.
//
// # Measurements, and the codec chosen
//
// BenchmarkCodecs compares codecs on 3000 realistic Pods (pods_test.go:
// the Pods of Deployments in a few namespaces, in list order, with
// server-filled fields and status, no managedFields; 2,597 B of protobuf,
// 5,049 B of JSON on average). Dictionaries are made from the first
// objects (the trained ones from the first 256), the objects after the
// first 256 are measured. Medians of
//
//	GOWORK=off go test -run '^$' -bench 'BenchmarkCodecs|BenchmarkNewDict' -benchtime=300ms -count=6 ./internal/squash
//
// on the 2-core development machine, shared with other work (most rows'
// 6 runs are within ±15% of their median; a few JSON encode rows spread
// up to twice it):
//
//	                      protobuf Pods                 JSON Pods
//	codec             B/obj ratio   enc ns  dec ns   B/obj ratio   enc ns  dec ns
//	none               2597 1.000       53      67    5049 1.000      129     160
//	s2                 1776 0.684     1846     435    2523 0.500     3408     883
//	s2-raw8             825 0.318     2940     702     831 0.165     3526     921
//	s2-raw24            758 0.292     3202     688     830 0.164     4460     927
//	s2-raw24-better     709 0.273    10615    1094     783 0.155    13141    1362
//	s2-raw64            757 0.292     3225     677     830 0.164     5054    1322
//	s2-trained64k       842 0.324     3470     850    1250 0.248    10036    2555
//	zstd               1466 0.564    19192    4874    1845 0.365    35651    7574
//	zstd-raw24          604 0.233    37892    5785     580 0.115    57770    6039
//	zstd-trained16k     663 0.255    42440    6252     860 0.170    48848    5730
//	squash (default)    763 0.294     3346     757     835 0.165     3834    1078
//
// s2-rawN is s2 with a raw dictionary, the first N objects one after the
// other up to 64 KiB (s2's limit: 24 of these Pods make about 61 KiB, so
// raw64 holds only one or two more; raw24 of the JSON holds 12); -better is s2's EncodeBetter;
// trained64k is github.com/klauspost/compress/dict's BuildS2Dict of 256
// Pods; zstd is level SpeedDefault, no frame CRC; squash is this package:
// s2-raw24 with its header and checksum.
//
// The default is s2 with a raw dictionary of the first 24 objects (at
// most 64 KiB), encoded with s2's fast Encode. Every cache read pays a
// decode, so decode speed comes first, then memory: s2 decodes a Pod in
// about 0.7 µs, zstd with a dictionary in 5.8-6.3 µs (8-9 times more) for
// 20% fewer bytes (604 against 758 B/Pod) with a raw dictionary, 13% with
// a trained one, and encodes 12 times slower. EncodeBetter saves 6.5%
// more bytes for 3.3 times the encoding and 1.6 times the decoding. Fewer
// samples (8) cost 9% more bytes on Pods; more than 24 of these Pods do
// not fit in 64 KiB. A trained s2 dictionary is worse than the raw one (it keeps
// fragments, and s2 has no entropy coding to make up for it). Against
// holding the protobuf as is, the default keeps a Pod in 0.29 of its
// bytes (JSON in 0.17) and adds about 0.7 µs to a read, next to the
// 18-22 µs a Pod's protobuf takes to unmarshal (corev1.Pod.Unmarshal, the
// same machine): 4%. The header and checksum add 5 bytes and 70 ns to a
// Pod's decode (squash against s2-raw24). NewDict costs about 0.12 ms.
//
// # When to make a new dictionary
//
// A Ratio counts bytes in and out. The ratio does not drift with the
// objects' values: a dictionary of another cluster's Pods (other names,
// namespaces, images) keeps these Pods at 0.290 against 0.291 with their
// own; the dictionary holds the type's structure. It degrades when the
// dictionary does not fit the objects' structure: the JSON Pods'
// dictionary keeps protobuf Pods at 0.53 (1.8 times), a useless one at
// 0.68 (2.3 times) (TestRatioDegrades). Hence DegradedFactor, 1.5: a
// caller that finds, after a re-list, the list's ratio more than 1.5
// times the ratio of the list the dictionary was made from, over enough
// bytes (a few dozen objects), makes a new dictionary from the new list's
// first objects and re-encodes.
package squash
