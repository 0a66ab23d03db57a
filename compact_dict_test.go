package kinformer

import (
	"bytes"
	"encoding/base64"
	"errors"
	"fmt"
	"math/rand/v2"
	"strings"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	"k8s.io/apimachinery/pkg/watch"

	"github.com/kinformer/kinformer/internal/squash"
	"github.com/kinformer/kinformer/internal/store"
)

// A compact cache holds its objects compressed against a dictionary of
// its own first objects: near copies take a fraction of their bytes and
// read back as they were. With CompactUncompressed, or fewer objects
// than a dictionary needs, they are held as they came.
func TestCompactCompresses(t *testing.T) {
	s := newFakeServer()
	nearCopies(s, 300)
	for _, tc := range []struct {
		name         string
		uncompressed bool
	}{{"compressed", false}, {"CompactUncompressed", true}} {
		opts := compactOpts(nil)
		opts.CompactUncompressed = tc.uncompressed
		inf, _ := contractStart(t, s, opts)
		c := inf.Cache().s
		var held, plain, compressed int
		c.Each(func(key string, r store.Ref[*corev1.ConfigMap]) {
			b, err := c.Plain(r)
			if err != nil {
				t.Fatalf("%s: %s: %v", tc.name, key, err)
			}
			held, plain = held+len(r.Entry()), plain+len(b)
			if _, ok := squash.Raw(r.Entry()); !ok && !tc.uncompressed {
				compressed++
			}
		})
		t.Logf("%s: %d objects, %d bytes as they came, %d held (%d compressed)", tc.name, inf.Cache().Len(), plain, held, compressed)
		if tc.uncompressed {
			if held != plain || c.Dict() != nil {
				t.Fatalf("%s: %d bytes held for %d (dictionary %v)", tc.name, held, plain, c.Dict())
			}
		} else if c.Dict() == nil || compressed < 250 || held > plain/3 {
			t.Fatalf("%s: %d bytes held for %d, %d of %d compressed", tc.name, held, plain, compressed, inf.Cache().Len())
		}
		if want := s.state(); !equalMaps(valuesOf(inf.Cache()), want) {
			t.Fatalf("%s: the cache does not read back what the server has", tc.name)
		}
		for _, o := range inf.Cache().List() {
			s.mu.Lock()
			want := s.objs[o.Namespace+"/"+o.Name]
			s.mu.Unlock()
			if o.Data["config.yaml"] != want.Data["config.yaml"] || o.Labels["release"] != want.Labels["release"] {
				t.Fatalf("%s: %s read back as %v, want %v", tc.name, o.Name, o.Data, want.Data)
			}
		}
		inf.Stop()
	}
	// Fewer objects than a dictionary needs, updated again and again:
	// each object is one sample however often it changes.
	few := newFakeServer()
	nearCopies(few, squash.DictSamples-1)
	inf, rec := contractStart(t, few, compactOpts(nil))
	for range 3 {
		nearCopies(few, squash.DictSamples-1)
	}
	eventually(t, "the updates", func() bool { return len(rec.lines(false, Modified)) == 3*(squash.DictSamples-1) })
	if d := inf.Cache().s.Dict(); d != nil {
		t.Fatalf("an informer of %d objects made a dictionary", inf.Cache().Len())
	}
}

// An entry that no longer decompresses (damaged) is never served as an
// object: a read does not find it, an event of it is an Error naming its
// key, and the failure is counted; the informer goes on.
func TestCompactDamagedEntry(t *testing.T) {
	s := newFakeServer()
	nearCopies(s, 60)
	inf, _ := contractStart(t, s, compactOpts(nil))
	var victim string
	inf.Cache().s.Each(func(key string, r store.Ref[*corev1.ConfigMap]) {
		if e := r.Entry(); victim == "" {
			if _, ok := squash.Raw(e); !ok {
				victim = key
				e[len(e)/2] ^= 0x5a // the cache's own bytes, damaged in place
			}
		}
	})
	if victim == "" {
		t.Fatal("no compressed entry")
	}
	if _, ok := inf.Cache().GetByKey(victim); ok {
		t.Fatal("a damaged entry was read as an object")
	}
	if n := len(inf.Cache().List()); n != 59 {
		t.Fatalf("List returned %d objects, want the 59 undamaged", n)
	}
	var mu sync.Mutex
	var errs []error
	added := 0
	inf.AddHandlerFuncs(HandlerFuncs[*corev1.ConfigMap]{
		Added: func(cmEvent) { mu.Lock(); added++; mu.Unlock() },
		Error: func(e cmEvent) { mu.Lock(); errs = append(errs, e.Err); mu.Unlock() },
	})
	eventually(t, "the replay", func() bool { mu.Lock(); defer mu.Unlock(); return added+len(errs) == 60 })
	mu.Lock()
	defer mu.Unlock()
	if len(errs) != 1 || !errors.Is(errs[0], ErrUnexpectedObject) || !strings.Contains(errs[0].Error(), victim) {
		t.Fatalf("errors %v, want one naming %s", errs, victim)
	}
	if n := inf.Cache().s.DecodeFailures(); n < 3 {
		t.Fatalf("%d failures counted", n)
	}
}

// shaped returns n ConfigMaps that share common, a blob no object
// compresses alone: only a dictionary holding it makes them small.
func shaped(n int, common string) []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, n)
	for i := range out {
		o := cm("ns", fmt.Sprintf("cm-%03d", i))
		o.Data["blob"] = common + fmt.Sprint(i)
		out[i] = o
	}
	return out
}

func randomBlob(seed uint64, n int) string {
	r := rand.New(rand.NewPCG(seed, seed))
	b := make([]byte, n)
	for i := range b {
		b[i] = byte(r.IntN(256))
	}
	return base64.StdEncoding.EncodeToString(b)
}

// The dictionary is made again when a re-list finds the objects no longer
// fit it (their shape changed): the first list measures the ratio (and
// compresses the objects held before there was a dictionary); a re-list of
// objects of another shape, which the old dictionary leaves as they came,
// makes a new one from them and compresses them all; what was encoded
// with the old one (a queued event's entry) still decodes; a re-list of
// the same objects changes nothing.
func TestCompactDictionaryRemade(t *testing.T) {
	s := newFakeServer()
	for _, o := range shaped(200, randomBlob(1, 600)) {
		s.put(o)
	}
	inf, _ := contractStart(t, s, compactOpts(nil))
	c := inf.Cache()
	k := c.s
	ratio := func() float64 { return ratioOf(t, k) }
	first := k.Dict()
	var before store.Ref[*corev1.ConfigMap]
	raw := 0
	k.Each(func(key string, r store.Ref[*corev1.ConfigMap]) {
		if key == "ns/cm-007" {
			before = r
		}
		if _, ok := squash.Raw(r.Entry()); ok {
			raw++
		}
	})
	if first == nil || raw != 0 || ratio() > 0.3 {
		t.Fatalf("after the first list: dictionary %v, %d objects held as they came, ratio %.2f; want a dictionary, none, at most 0.3", first, raw, ratio())
	}
	relist := func() { relistOn(t, s, inf) }
	relist()
	if k.Dict() != first || k.DictsRemade() != 0 {
		t.Fatal("a re-list of the same objects made the dictionary again")
	}

	for _, o := range shaped(200, randomBlob(2, 600)) {
		s.put(o)
	}
	eventually(t, "the new shape cached", func() bool {
		o, _ := c.GetByKey("ns/cm-199")
		return o != nil && o.Data["blob"] == randomBlob(2, 600)+"199"
	})
	if r := ratio(); r < 0.9 {
		t.Fatalf("the new shape's ratio under the old dictionary is %.2f: the test's objects do not change shape", r)
	}
	relist()
	// The re-list's objects are swapped in just after fit made the
	// dictionary: wait for both.
	eventually(t, "the dictionary made again, and the objects compressed against it", func() bool {
		return k.DictsRemade() == 1 && ratio() <= 0.3
	})
	if k.Dict() == first || k.DictsRemade() != 1 {
		t.Fatalf("after the re-list: dictionary the first: %v, made again %d times", k.Dict() == first, k.DictsRemade())
	}
	want := randomBlob(2, 600)
	for i, o := range c.List() {
		if !strings.HasPrefix(o.Data["blob"], want) {
			t.Fatalf("object %d (%s) read wrong after the dictionary was made again", i, o.Name)
		}
	}
	if o, ok := k.Load(before); !ok || o.Data["blob"] != randomBlob(1, 600)+"7" {
		t.Fatal("an entry of the first dictionary does not decode after it was made again")
	}
}

// ratioOf returns the ratio of the bytes c's entries take to the bytes
// of their objects.
func ratioOf(t *testing.T, c *store.Cache[*corev1.ConfigMap]) float64 {
	t.Helper()
	var in, out int
	c.Each(func(key string, r store.Ref[*corev1.ConfigMap]) {
		n, err := squash.Len(r.Entry())
		if err != nil {
			t.Fatalf("%s: %v", key, err)
		}
		in, out = in+n, out+len(r.Entry())
	})
	return float64(out) / float64(in)
}

// relistOn makes inf list again: a 410 on its watch (sent until the list
// starts: a 410 reaches only an open watch), and waits for the sync.
func relistOn(t *testing.T, s *fakeServer, inf *Informer[*corev1.ConfigMap]) {
	t.Helper()
	lists, _ := s.counts()
	eventually(t, "a re-list", func() bool {
		if l, _ := s.counts(); l > lists {
			return inf.HasSynced()
		}
		if s.openWatches() > 0 {
			s.sendRaw(watch.Event{Type: watch.Error, Object: &apierrors.NewResourceExpired("too old").ErrStatus})
		}
		return false
	})
	contractSync(t, inf)
}

// The state file holds a compact cache's entries as they are, and its
// dictionary beside them: a restart restores every object from the same
// bytes, against the same dictionary, compressing none again, with only
// the probe listed. After a re-list made the dictionary again, the file
// holds every object under the new one, and the next restart restores
// them.
func TestCompactStateFileKeepsTheDictionary(t *testing.T) {
	s := newFakeServer()
	for _, o := range shaped(200, randomBlob(1, 600)) {
		s.put(o)
	}
	dir := t.TempDir()
	run := func() (*Informer[*corev1.ConfigMap], *recorder) {
		inf, rec := contractStart(t, s, &Options[*corev1.ConfigMap]{
			Compact: true, StateDir: dir, StateKey: "compact configmaps", StateInterval: 5 * time.Millisecond,
		})
		contractSync(t, inf)
		return inf, rec
	}
	entries := func(c *Cache[*corev1.ConfigMap]) map[string][]byte {
		out := map[string][]byte{}
		c.s.Each(func(key string, r store.Ref[*corev1.ConfigMap]) { out[key] = r.Entry() })
		return out
	}
	restored := func(inf *Informer[*corev1.ConfigMap], rec *recorder, dict *squash.Dict, want map[string][]byte, blob string) {
		t.Helper()
		if d := inf.Cache().s.Dict(); d == nil || d.ID() != dict.ID() {
			t.Fatalf("restored with dictionary %v, want the file's %v", d, dict)
		}
		got := entries(inf.Cache())
		if len(got) != len(want) {
			t.Fatalf("restored %d objects, want %d", len(got), len(want))
		}
		for key, b := range want {
			if !bytes.Equal(got[key], b) {
				t.Fatalf("%s restored as %d bytes, not the %d the cache held", key, len(got[key]), len(b))
			}
		}
		for _, o := range inf.Cache().List() {
			if !strings.HasPrefix(o.Data["blob"], blob) {
				t.Fatalf("%s restored wrong", o.Name)
			}
		}
		for _, e := range rec.all() {
			if e.Type == Error {
				t.Fatalf("an error: %v", e.Err)
			}
		}
	}

	first, _ := run()
	k := first.Cache().s
	dict, want := k.Dict(), entries(first.Cache())
	if dict == nil {
		t.Fatal("no dictionary after the first list")
	}
	first.Stop()

	lists, _ := s.counts()
	second, rec := run()
	restored(second, rec, dict, want, randomBlob(1, 600))
	if l, _ := s.counts(); l != lists+1 {
		t.Fatalf("%d lists on the restart, want the probe alone", l-lists)
	}

	// Objects of another shape: the re-list makes the dictionary again.
	for _, o := range shaped(200, randomBlob(2, 600)) {
		s.put(o)
	}
	eventually(t, "the new shape cached", func() bool {
		o, _ := second.Cache().GetByKey("ns/cm-199")
		return o != nil && o.Data["blob"] == randomBlob(2, 600)+"199"
	})
	relistOn(t, s, second)
	k = second.Cache().s
	eventually(t, "the dictionary made again", func() bool { return k.DictsRemade() == 1 })
	// Read once stopped: the re-list's swap puts the entries compressed
	// anew in the cache after the dictionary is made (remade), and Stop
	// waits for the loop, and the last commit, to end.
	second.Stop()
	dict, want = k.Dict(), entries(second.Cache())

	third, rec := run()
	restored(third, rec, dict, want, randomBlob(2, 600))
}

// Reads decompress into pooled buffers (protobuf's decode copies what it
// keeps): objects read one after another, on goroutines at once, each
// keep their own content.
func TestCompactReadsShareNoBuffer(t *testing.T) {
	s := newFakeServer()
	objs := shaped(100, randomBlob(3, 600))
	for _, o := range objs {
		s.put(o)
	}
	inf, _ := contractStart(t, s, compactOpts(nil))
	c := inf.Cache()
	if !c.s.PoolsBuffers() {
		t.Fatal("a compact cache of ConfigMaps reads without pooled buffers")
	}
	var wg sync.WaitGroup
	errs := make(chan error, 4)
	for range 4 {
		wg.Go(func() {
			var held []*corev1.ConfigMap
			for range 5 {
				for _, o := range objs {
					got, ok := c.GetByKey("ns/" + o.Name)
					if !ok {
						errs <- fmt.Errorf("%s not found", o.Name)
						return
					}
					held = append(held, got)
				}
			}
			for i, got := range held {
				if want := objs[i%len(objs)]; got.Name != want.Name || got.Data["blob"] != want.Data["blob"] {
					errs <- fmt.Errorf("read %d: %s holds another object's bytes", i, want.Name)
					return
				}
			}
		})
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
}
