package persist

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	corev1 "k8s.io/api/core/v1"
	"k8s.io/apimachinery/pkg/api/equality"

	"github.com/kinformer/kinformer/internal/squash"
)

// squashedSet is 60 ConfigMaps alike but for a name and a value, their
// encodings, and a dictionary of the first ones.
func squashedSet(t *testing.T, secret string) (objs []*corev1.ConfigMap, enc [][]byte, d *squash.Dict) {
	t.Helper()
	c := NewCodec[*corev1.ConfigMap](nil)
	for i := range 60 {
		o := labelled("ns", fmt.Sprintf("cm-%02d", i), "7")
		o.Data["text"] = strings.Repeat(secret+" is a value shared by every object; ", 8) + fmt.Sprint(i)
		b, err := c.Encode(o)
		if err != nil {
			t.Fatal(err)
		}
		objs, enc = append(objs, o), append(enc, b)
	}
	d, err := squash.NewDict(enc)
	if err != nil {
		t.Fatal(err)
	}
	return objs, enc, d
}

// A compact cache's entries are written as they are held, with the
// dictionary beside them: the file takes their size; OpenEncoded gives
// each object's encoding with its entry and dictionary, and the
// dictionary first; a cache of objects opens the same file (Open
// decompresses); an entry held as it came, and an object written as an
// encoding, sit beside them.
func TestEntriesKeepTheirDictionary(t *testing.T) {
	dir := t.TempDir()
	objs, enc, d := squashedSet(t, "zebra")
	p, reports := testPersister(t, dir)
	openPersister(t, p)
	b := p.Batch()
	b.SetDicts([]*squash.Dict{d})
	entries := map[string][]byte{}
	plainBytes, entryBytes := 0, 0
	for i, o := range objs[:50] {
		e := d.Encode(nil, enc[i])
		if e[0] == 0 {
			t.Fatalf("%s held as it came: the test's objects do not compress", o.Name)
		}
		entries[key(o)] = e
		b.PutEntry(key(o), e)
		plainBytes, entryBytes = plainBytes+len(enc[i]), entryBytes+len(e)
	}
	raw := squash.Wrap(nil, enc[50])
	entries[key(objs[50])] = raw
	b.PutEntry(key(objs[50]), raw)
	b.Put(key(objs[51]), objs[51]) // an encoding
	b.End("9")
	p.Flush()
	if entryBytes*3 > plainBytes {
		t.Fatalf("entries of %d bytes for %d of encodings: the test's objects do not compress", entryBytes, plainBytes)
	}
	// The text, in the clear: in the dictionary, and in the two objects
	// not compressed; not in the 50 compressed ones.
	needle := []byte("zebra is a value")
	if n, want := bytes.Count(stateFile(t, dir), needle), bytes.Count(d.Bytes(), needle)+2*8; n > want {
		t.Fatalf("the file holds the objects' text %d times, want at most %d: not their compressed entries", n, want)
	}
	p.Start()
	p.Stop()

	p2, reports2 := testPersister(t, dir)
	var got []*squash.Dict
	loaded := map[string]Entry{}
	rv, ok := p2.OpenEncoded(true, func(ds []*squash.Dict) { got = ds }, func(e Entry) error {
		if len(got) == 0 {
			return errors.New("an entry before the dictionaries")
		}
		loaded[e.Key] = e
		return nil
	})
	if !ok || rv != "9" || len(loaded) != 52 {
		t.Fatalf("OpenEncoded = %q, %t, %d objects; want 9, true, 52 (reports %v)", rv, ok, len(loaded), reports2())
	}
	if len(got) != 1 || got[0].ID() != d.ID() {
		t.Fatalf("dictionaries %v, want [%v]", got, d)
	}
	for i, o := range objs[:52] {
		e := loaded[key(o)]
		if !bytes.Equal(e.Data, enc[i]) {
			t.Fatalf("%s: its encoding differs", e.Key)
		}
		switch {
		case i < 50 && (!bytes.Equal(e.Squashed, entries[e.Key]) || e.Dict == nil || e.Dict.ID() != d.ID()):
			t.Fatalf("%s: entry %d bytes, dictionary %v; want its entry of %d bytes and %v", e.Key, len(e.Squashed), e.Dict, len(entries[e.Key]), d)
		case i == 50 && (!bytes.Equal(e.Squashed, raw) || e.Dict != nil):
			t.Fatalf("%s, held as it came: entry %q, dictionary %v", e.Key, e.Squashed, e.Dict)
		case i == 51 && e.Squashed != nil:
			t.Fatalf("%s, written as an encoding, has an entry", e.Key)
		}
	}
	p2.Start()
	p2.Stop()

	// A cache of objects.
	items, rv := reload(t, dir)
	if rv != "9" || len(items) != 52 {
		t.Fatalf("Open: %d objects at %q, want 52 at 9", len(items), rv)
	}
	for _, o := range objs[:52] {
		if !equality.Semantic.DeepEqual(items[key(o)], o) {
			t.Fatalf("%s decoded as %+v", key(o), items[key(o)])
		}
	}
	if errs := append(reports(), reports2()...); len(errs) > 0 {
		t.Fatalf("reports: %v", errs)
	}
}

// The dictionary of a file with keys is encrypted as its objects are (it
// is made of them); it opens with the keys, and a file whose entry
// decodes with none of its dictionaries is damaged: set aside, nothing
// restored.
func TestEntriesSealedAndDamaged(t *testing.T) {
	dir := t.TempDir()
	k := newKey(t)
	objs, enc, d := squashedSet(t, "okapi")
	p, _ := sealedPersister(t, dir, k)
	if _, _, ok := p.Open(true, checkKey); !ok {
		t.Fatal("open: persistence off")
	}
	p.SetDicts([]*squash.Dict{d})
	for i, o := range objs {
		p.RecordEntry(key(o), d.Encode(nil, enc[i]), "3")
	}
	p.Start()
	p.Stop()
	if file := stateFile(t, dir); bytes.Contains(file, []byte("okapi")) {
		t.Fatal("the file holds the dictionary's text in the clear")
	}
	p2, reports := sealedPersister(t, dir, k)
	items, rv, ok := p2.Open(true, checkKey)
	if !ok || rv != "3" || len(items) != len(objs) {
		t.Fatalf("sealed Open: %d objects at %q (%t), want %d at 3 (reports %v)", len(items), rv, ok, len(objs), reports())
	}
	// One more entry, of another dictionary the file is not told of.
	_, _, other := squashedSet(t, "gnu")
	p2.RecordEntry("ns/stray", other.Encode(nil, enc[0]), "4")
	p2.Start()
	p2.Stop()

	p3, reports := sealedPersister(t, dir, k)
	items, rv, ok = p3.Open(true, checkKey)
	if !ok || rv != "" || len(items) != 0 {
		t.Fatalf("a file with an entry of another dictionary: %d objects at %q (%t), want none", len(items), rv, ok)
	}
	errs := reports()
	if len(errs) != 1 || !strings.Contains(errs[0].Error(), `object "ns/stray"`) || !strings.Contains(errs[0].Error(), "dictionaries") {
		t.Fatalf("reports %v, want one naming ns/stray and the dictionaries", errs)
	}
	if _, err := os.Stat(p3.Path() + ".bad"); err != nil {
		t.Fatalf("not set aside: %v", err)
	}
	p3.Start()
	p3.Stop()
}

// decodeDicts refuses what encodeDicts did not write.
func TestDecodeDicts(t *testing.T) {
	_, _, d := squashedSet(t, "ibex")
	good := encodeDicts([]*squash.Dict{d, d})
	if ds, err := decodeDicts(good); err != nil || len(ds) != 2 || ds[1].ID() != d.ID() {
		t.Fatalf("decodeDicts(encodeDicts) = %v, %v", ds, err)
	}
	flipped := bytes.Clone(good)
	flipped[len(flipped)/2] ^= 0x10
	for name, b := range map[string][]byte{
		"empty":     nil,
		"truncated": good[:len(good)-1],
		"trailing":  append(bytes.Clone(good), 0),
		"flipped":   flipped,
		"count":     {0xff, 0xff, 0x03},
	} {
		if _, err := decodeDicts(b); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}
