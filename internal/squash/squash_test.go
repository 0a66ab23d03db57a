package squash

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"sync"
	"testing"
)

var testData struct {
	once sync.Once
	c    *corpus
}

// testCorpus is 600 Pods, made once for the tests.
func testCorpus(t testing.TB) *corpus {
	testData.once.Do(func() { testData.c = makeCorpus(t, 1, 600) })
	return testData.c
}

func mustDict(t testing.TB, samples [][]byte) *Dict {
	t.Helper()
	d, err := NewDict(samples)
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func TestRoundTrip(t *testing.T) {
	c := testCorpus(t)
	for _, kind := range []struct {
		name string
		objs [][]byte
		max  float64 // the ratio the objects must reach at least
	}{
		{"proto", c.proto, 0.4},
		{"json", c.json, 0.3},
	} {
		t.Run(kind.name, func(t *testing.T) {
			d := mustDict(t, kind.objs)
			var r Ratio
			var buf, out []byte
			for i, o := range kind.objs {
				buf = d.Encode(buf[:0], o)
				r.Add(len(o), len(buf))
				if n, err := Len(buf); err != nil || n != len(o) {
					t.Fatalf("object %d: Len = %d, %v, want %d", i, n, err, len(o))
				}
				var err error
				if out, err = d.Decode(out[:0], buf); err != nil || !bytes.Equal(out, o) {
					t.Fatalf("object %d: Decode = %v, %v bytes, want its %d bytes", i, err, len(out), len(o))
				}
				// Into a dst with bytes already: they are kept.
				prefix := []byte("prefix")
				entry := d.Encode(prefix, o)
				if !bytes.HasPrefix(entry, []byte("prefix")) {
					t.Fatal("Encode changed dst's bytes")
				}
				got, err := d.Decode([]byte("before"), entry[len("prefix"):])
				if err != nil || string(got[:6]) != "before" || !bytes.Equal(got[6:], o) {
					t.Fatalf("object %d: Decode after a prefix = %v", i, err)
				}
			}
			t.Logf("%d objects: ratio %.3f", len(kind.objs), r.Ratio())
			if r.Ratio() > kind.max {
				t.Errorf("ratio %.3f, want at most %.2f", r.Ratio(), kind.max)
			}
		})
	}
}

// Len refuses what is not an entry, and what says it holds too much.
func TestLenOfDamaged(t *testing.T) {
	huge := append([]byte{kindS2, 0, 0, 0, 0}, 0xff, 0xff, 0xff, 0xff, 0x0f) // a uvarint of 4 GiB
	for name, e := range map[string][]byte{"empty": nil, "unknown kind": {0x17, 1, 2}, "short": {kindS2, 1}, "too long": huge} {
		if n, err := Len(e); !errors.Is(err, ErrCorrupt) {
			t.Errorf("%s: Len = %d, %v, want ErrCorrupt", name, n, err)
		}
	}
	if n, err := Len(Wrap(nil, []byte("abc"))); err != nil || n != 3 {
		t.Errorf("Len of a raw entry = %d, %v, want 3", n, err)
	}
}

func TestSmallAndEmpty(t *testing.T) {
	d := mustDict(t, testCorpus(t).proto)
	for _, o := range [][]byte{nil, {}, {0}, []byte("a"), []byte("fifteen bytes!!"), bytes.Repeat([]byte("a"), 16)} {
		e := d.Encode(nil, o)
		if len(e) > len(o)+1 {
			t.Errorf("%q: entry of %d bytes", o, len(e))
		}
		got, err := d.Decode(nil, e)
		if err != nil || !bytes.Equal(got, o) {
			t.Errorf("%q: Decode = %q, %v", o, got, err)
		}
	}
}

func TestIncompressibleKeptAsIs(t *testing.T) {
	d := mustDict(t, testCorpus(t).proto)
	r := rand.New(rand.NewPCG(1, 2))
	for _, n := range []int{16, 100, 2000, 100 << 10} {
		o := make([]byte, n)
		for i := range o {
			o[i] = byte(r.Uint32())
		}
		e := d.Encode(nil, o)
		if len(e) != n+1 || e[0] != kindRaw || !bytes.Equal(e[1:], o) {
			t.Errorf("%d random bytes: entry of %d bytes, header %#x; want them as they are after one byte", n, len(e), e[0])
		}
		if got, err := d.Decode(nil, e); err != nil || !bytes.Equal(got, o) {
			t.Errorf("%d random bytes: Decode: %v", n, err)
		}
	}
	// Compressible, but not to 7/8: kept as is too.
	o := make([]byte, 1600)
	for i := range o {
		o[i] = byte(r.Uint32())
	}
	copy(o[1400:], o[:200]) // about 1/8 repeated
	if e := d.Encode(nil, o); len(e) != len(o)+1 {
		t.Errorf("an object that compresses to more than 7/8: entry of %d bytes, want %d", len(e), len(o)+1)
	}
}

func TestDamagedIsAnError(t *testing.T) {
	c := testCorpus(t)
	d := mustDict(t, c.proto)
	for i, o := range c.proto[100:140] {
		e := d.Encode(nil, o)
		if e[0] != kindS2 {
			t.Fatalf("object %d was not compressed", i)
		}
		// Every single bit flipped, in each byte.
		for at := range e {
			for bit := range 8 {
				bad := bytes.Clone(e)
				bad[at] ^= 1 << bit
				if out, err := d.Decode(nil, bad); err == nil {
					t.Fatalf("object %d, bit %d of byte %d flipped: Decode gave %d bytes and no error", i, bit, at, len(out))
				}
			}
		}
		// Truncated at every length, and longer.
		for n := range len(e) {
			if _, err := d.Decode(nil, e[:n]); !errors.Is(err, ErrCorrupt) {
				t.Fatalf("object %d truncated to %d of %d bytes: Decode error %v", i, n, len(e), err)
			}
		}
		if _, err := d.Decode(nil, append(bytes.Clone(e), 0)); err == nil {
			t.Fatalf("object %d with a byte more: no error", i)
		}
	}
	for _, h := range []byte{2, 0x7f, 0xff} {
		if _, err := d.Decode(nil, []byte{h, 1, 2, 3, 4, 5, 6}); !errors.Is(err, ErrCorrupt) {
			t.Errorf("header %#x: Decode error %v", h, err)
		}
	}
}

func TestAnotherDictionarysEntryIsAnError(t *testing.T) {
	c := testCorpus(t)
	a := mustDict(t, c.proto)
	b := mustDict(t, c.proto[300:])
	same := mustDict(t, c.proto)
	if a.ID() == b.ID() || a.ID() != same.ID() {
		t.Fatalf("IDs: %x, %x, %x: want the first and the last the same, and only them", a.ID(), b.ID(), same.ID())
	}
	for i, o := range c.proto[:100] {
		e := a.Encode(nil, o)
		if _, err := b.Decode(nil, e); !errors.Is(err, ErrCorrupt) {
			t.Fatalf("object %d, another dictionary: Decode error %v", i, err)
		}
		if got, err := same.Decode(nil, e); err != nil || !bytes.Equal(got, o) {
			t.Fatalf("object %d, a dictionary of the same samples: %v", i, err)
		}
	}
}

func TestDictCap(t *testing.T) {
	big := bytes.Repeat([]byte("0123456789abcdef"), 1<<16) // 1 MiB
	for _, samples := range [][][]byte{
		{big},
		{big, big, big},
		{[]byte("a short one, more than sixteen bytes"), big},
		testCorpus(t).json,
		testCorpus(t).proto,
	} {
		d := mustDict(t, samples)
		if d.Len() > MaxDictLen+8 || len(d.Bytes()) > MaxDictLen+16 {
			t.Errorf("a dictionary of %d samples: %d bytes, %d serialised; want at most %d", len(samples), d.Len(), len(d.Bytes()), MaxDictLen)
		}
		for _, o := range [][]byte{big[:5000], samples[0][:min(len(samples[0]), 3000)]} {
			if got, err := d.Decode(nil, d.Encode(nil, o)); err != nil || !bytes.Equal(got, o) {
				t.Errorf("round trip: %v", err)
			}
		}
	}
	for _, samples := range [][][]byte{nil, {}, {nil}, {[]byte("fifteen bytes!!")}} {
		if _, err := NewDict(samples); !errors.Is(err, ErrFewSamples) {
			t.Errorf("NewDict(%q) error %v, want ErrFewSamples", samples, err)
		}
	}
	// Sixteen bytes in two samples are enough.
	d := mustDict(t, [][]byte{[]byte("eight by"), []byte("tes more")})
	if got, err := d.Decode(nil, d.Encode(nil, []byte("eight bytes more, eight bytes more"))); err != nil || string(got) != "eight bytes more, eight bytes more" {
		t.Errorf("a 16-byte dictionary: %q, %v", got, err)
	}
}

func TestLoadDict(t *testing.T) {
	c := testCorpus(t)
	d := mustDict(t, c.proto)
	b := d.Bytes()
	l, err := LoadDict(b)
	if err != nil {
		t.Fatal(err)
	}
	if l.ID() != d.ID() || l.Len() != d.Len() || !bytes.Equal(l.Bytes(), b) {
		t.Fatalf("LoadDict(Bytes()) = %v, want %v", l, d)
	}
	b[len(b)/2] ^= 0xff // LoadDict copied what it keeps
	for _, o := range c.proto[:50] {
		if got, err := l.Decode(nil, d.Encode(nil, o)); err != nil || !bytes.Equal(got, o) {
			t.Fatalf("an entry of the dictionary, decoded by the loaded one: %v", err)
		}
	}
	b[len(b)/2] ^= 0xff

	garbage := [][]byte{
		nil, {}, []byte("sqd"), []byte("sqd\x01"), []byte("sqd\x01\x00\x00\x00\x00"),
		[]byte("not a dictionary at all, but long enough to be one"),
		b[:len(b)-1], b[1:], append(bytes.Clone(b), 0),
	}
	for i := range 20 {
		bad := bytes.Clone(b)
		bad[i*len(b)/20] ^= 0x10
		garbage = append(garbage, bad)
	}
	// A valid checksum over an invalid dictionary: a repeat offset past
	// its end, content too short or too long.
	withSum := func(body []byte) []byte {
		x := append([]byte("sqd\x01"), body...)
		return (&Dict{ser: body}).Bytes()[:len(x)+4]
	}
	garbage = append(garbage,
		withSum(append([]byte{0xff, 0x7f}, bytes.Repeat([]byte("x"), 100)...)),
		withSum(append([]byte{96}, bytes.Repeat([]byte("x"), 100)...)),
		withSum([]byte{0, 'x', 'y'}),
		withSum(append([]byte{0}, make([]byte, MaxDictLen+1)...)),
	)
	for i, g := range garbage {
		if l, err := LoadDict(g); err == nil {
			t.Errorf("garbage %d (%d bytes): LoadDict = %v and no error", i, len(g), l)
		}
	}
}

func TestConcurrent(t *testing.T) {
	c := testCorpus(t)
	d := mustDict(t, c.proto)
	var r Ratio
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Go(func() {
			var e, out []byte
			for _, o := range c.proto[g*50 : g*50+100] {
				e = d.Encode(e[:0], o)
				r.Add(len(o), len(e))
				var err error
				if out, err = d.Decode(out[:0], e); err != nil || !bytes.Equal(out, o) {
					t.Error("round trip failed:", err)
					return
				}
			}
		})
	}
	wg.Wait()
	if in, _ := r.Bytes(); in == 0 {
		t.Fatal("Ratio counted nothing")
	}
}

// TestRatioDegrades measures the ratios DegradedFactor is chosen from: a
// dictionary of the cluster's own Pods, of another cluster's (other
// workloads, namespaces, images), of the same Pods' JSON; and no
// dictionary that fits (random bytes).
func TestRatioDegrades(t *testing.T) {
	own := testCorpus(t)
	other := makeCorpus(t, 2, 600)
	r := rand.New(rand.NewPCG(3, 4))
	noise := make([]byte, 4096)
	for i := range noise {
		noise[i] = byte(r.Uint32())
	}
	ratio := func(samples [][]byte) float64 {
		d := mustDict(t, samples)
		var r Ratio
		for _, o := range own.proto[100:] {
			r.Add(len(o), len(d.Encode(nil, o)))
		}
		return r.Ratio()
	}
	base := ratio(own.proto)
	others := ratio(other.proto)
	jsons := ratio(own.json)
	none := ratio([][]byte{noise})
	t.Logf("ratios of Pods: own dictionary %.3f, another cluster's %.3f (%.2fx), their JSON's %.3f (%.2fx), random bytes' %.3f (%.2fx)",
		base, others, others/base, jsons, jsons/base, none, none/base)
	var tr Ratio
	if tr.Ratio() != 1 || tr.Degraded(base, 0) {
		t.Error("an empty Ratio is not 1, or is degraded")
	}
	tr.Add(1000, int(1000*base*1.1))
	if tr.Degraded(base, 0) {
		t.Errorf("10%% worse is degraded")
	}
	for _, c := range []struct {
		name     string
		ratio    float64
		degraded bool
	}{
		{"another cluster's dictionary", others, false},
		{"the JSON's dictionary", jsons, true},
		{"random bytes' dictionary", none, true},
	} {
		tr.Reset()
		tr.Add(1000, int(1000*c.ratio))
		if tr.Degraded(base, 1000) != c.degraded || tr.Degraded(base, 1001) {
			t.Errorf("%s (%.3f against %.3f): Degraded is not %v, or is below minBytes", c.name, c.ratio, base, c.degraded)
		}
	}
}

// Wrap makes a raw entry any dictionary decodes, and Raw reads it back
// without copying; an s2 entry is not raw.
func TestWrapAndRaw(t *testing.T) {
	src := []byte("an object held before there was a dictionary")
	e := Wrap(nil, src)
	if got, ok := Raw(e); !ok || string(got) != string(src) || &got[0] != &e[1] {
		t.Fatalf("Raw(Wrap(src)) = %q, %v (or a copy)", got, ok)
	}
	if _, ok := Raw(nil); ok {
		t.Fatal("Raw of an empty entry")
	}
	pods := testCorpus(t).proto
	d := mustDict(t, pods[:DictSamples])
	if got, err := d.Decode(nil, e); err != nil || string(got) != string(src) {
		t.Fatalf("Decode(Wrap(src)) = %q, %v", got, err)
	}
	if _, ok := Raw(d.Encode(nil, pods[30])); ok {
		t.Fatal("a compressed entry read as raw")
	}
}
