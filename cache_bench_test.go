package kinformer

// Micro-benchmarks of Cache next to client-go's thread-safe store
// (cache.NewIndexer over cache.NewThreadSafeStore, what SharedIndexInformer
// uses), same data, same operations. Sub-benchmark names carry
// impl=kinformer|client-go so that `benchstat -col /impl` puts them side by
// side:
//
//	go test -run '^$' -bench BenchmarkCache -benchmem -count 5 . > cache.txt
//	benchstat -col /impl cache.txt

import (
	"fmt"
	"math/rand/v2"
	"reflect"
	"runtime"
	"strconv"
	"sync"
	"sync/atomic"
	"testing"

	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/client-go/tools/cache"

	"github.com/kinformer/kinformer/internal/store"
)

const (
	benchObjects    = 10000
	benchNamespaces = 100 // 100 objects per namespace
)

var benchCMs = func() []*corev1.ConfigMap {
	out := make([]*corev1.ConfigMap, benchObjects)
	for i := range out {
		out[i] = &corev1.ConfigMap{
			ObjectMeta: metav1.ObjectMeta{
				Name:            fmt.Sprintf("cm-%05d", i),
				Namespace:       fmt.Sprintf("ns-%03d", i%benchNamespaces),
				ResourceVersion: strconv.Itoa(1000 + i),
				Labels:          map[string]string{"app": "bench", "shard": strconv.Itoa(i % 32)},
			},
			Data: map[string]string{"k": strconv.Itoa(i)},
		}
	}
	return out
}()

// benchStore is the common shape of the two contenders.
type benchStore interface {
	get(key string) bool
	list() int
	byNamespace(ns string) int
	update(obj *corev1.ConfigMap)
	replace(objs []*corev1.ConfigMap) func() // returns the timed part
}

type kinformerStore struct{ c *Cache[*corev1.ConfigMap] }

func (s kinformerStore) get(key string) bool { _, ok := s.c.GetByKey(key); return ok }
func (s kinformerStore) list() int           { return len(s.c.List()) }
func (s kinformerStore) byNamespace(ns string) int {
	l, _ := s.c.ByIndex(IndexNamespace, ns)
	return len(l)
}
func (s kinformerStore) update(obj *corev1.ConfigMap) { s.c.s.Put(s.c.Key(obj), s.pack(obj)) }
func (s kinformerStore) replace(objs []*corev1.ConfigMap) func() {
	// The informer builds this map while decoding the list (a compact
	// one packs each object then); build it here untimed, as client-go's
	// list below.
	m := s.c.s.NewItems(len(objs))
	for _, o := range objs {
		m.Set(s.c.Key(o), s.pack(o))
	}
	w, _ := newTestWriter(s.c)
	return func() { w.replace(m, "1", nil) }
}

func (s kinformerStore) pack(obj *corev1.ConfigMap) store.Ref[*corev1.ConfigMap] {
	r, err := s.c.s.Hold(arrivalOf(obj))
	if err != nil {
		panic(err)
	}
	return r
}

type clientGoStore struct{ s cache.Indexer }

func (s clientGoStore) get(key string) bool { _, ok, _ := s.s.GetByKey(key); return ok }
func (s clientGoStore) list() int           { return len(s.s.List()) }
func (s clientGoStore) byNamespace(ns string) int {
	l, _ := s.s.ByIndex(cache.NamespaceIndex, ns)
	return len(l)
}
func (s clientGoStore) update(obj *corev1.ConfigMap) { s.s.Update(obj) }
func (s clientGoStore) replace(objs []*corev1.ConfigMap) func() {
	l := make([]any, len(objs))
	for i, o := range objs {
		l[i] = o
	}
	return func() { s.s.Replace(l, "1") }
}

func newBenchStores() map[string]func() benchStore {
	return map[string]func() benchStore{
		"kinformer": func() benchStore {
			c := newCache[*corev1.ConfigMap](nil, nil)
			for _, o := range benchCMs {
				c.s.Put(c.Key(o), plain(o))
			}
			return kinformerStore{c}
		},
		"kinformer-compact": func() benchStore {
			c := newCache[*corev1.ConfigMap](nil, nil)
			c.s.SetCompact(reflect.TypeFor[*corev1.ConfigMap](), true, false)
			s := kinformerStore{c}
			for _, o := range benchCMs {
				s.update(o)
			}
			return s
		},
		"client-go": func() benchStore {
			s := cache.NewIndexer(cache.MetaNamespaceKeyFunc, cache.Indexers{cache.NamespaceIndex: cache.MetaNamespaceIndexFunc})
			for _, o := range benchCMs {
				s.Add(o)
			}
			return clientGoStore{s}
		},
	}
}

// withWriters runs n goroutines updating random objects (a new copy with a
// new resourceVersion each time, as a watch would) until the returned stop
// is called.
func withWriters(s benchStore, n int) (stop func()) {
	var quit atomic.Bool
	var wg sync.WaitGroup
	for w := range n {
		wg.Go(func() {
			r := rand.New(rand.NewPCG(uint64(w), 42))
			for rv := 0; !quit.Load(); rv++ {
				o := *benchCMs[r.IntN(benchObjects)]
				o.ResourceVersion = strconv.Itoa(100000 + rv)
				s.update(&o)
			}
		})
	}
	return func() { quit.Store(true); wg.Wait() }
}

var benchSink atomic.Int64

func BenchmarkCache(b *testing.B) {
	keys := make([]string, benchObjects)
	for i, o := range benchCMs {
		keys[i] = o.Namespace + "/" + o.Name
	}
	ops := []struct {
		name     string
		parallel bool
		run      func(s benchStore, r *rand.Rand)
	}{
		{"GetByKey", true, func(s benchStore, r *rand.Rand) {
			if !s.get(keys[r.IntN(benchObjects)]) {
				panic("missing key")
			}
		}},
		{"ByIndex", true, func(s benchStore, r *rand.Rand) {
			if n := s.byNamespace(fmt.Sprintf("ns-%03d", r.IntN(benchNamespaces))); n != benchObjects/benchNamespaces {
				panic(fmt.Sprint("ByIndex: ", n))
			}
		}},
		{"List", false, func(s benchStore, r *rand.Rand) { benchSink.Add(int64(s.list())) }},
		{"Update", false, func(s benchStore, r *rand.Rand) {
			o := benchCMs[r.IntN(benchObjects)]
			s.update(o)
		}},
	}
	impls := newBenchStores()
	for _, op := range ops {
		for _, writers := range []int{0, 1} {
			for _, impl := range []string{"kinformer", "kinformer-compact", "client-go"} {
				b.Run(fmt.Sprintf("op=%s/writers=%d/impl=%s", op.name, writers, impl), func(b *testing.B) {
					s := impls[impl]()
					stop := withWriters(s, writers)
					defer stop()
					b.ReportAllocs()
					b.ResetTimer()
					if op.parallel {
						var seed atomic.Uint64
						b.RunParallel(func(pb *testing.PB) {
							r := rand.New(rand.NewPCG(seed.Add(1), 7))
							for pb.Next() {
								op.run(s, r)
							}
						})
						return
					}
					r := rand.New(rand.NewPCG(1, 7))
					for b.Loop() {
						op.run(s, r)
					}
				})
			}
		}
	}
	// Replace: the atomic swap of a re-list (10,000 objects, all with a
	// changed resourceVersion for client-go's purposes; kinformer diffs).
	for _, impl := range []string{"kinformer", "kinformer-compact", "client-go"} {
		b.Run(fmt.Sprintf("op=Replace/writers=0/impl=%s", impl), func(b *testing.B) {
			s := impls[impl]()
			b.ReportAllocs()
			for i := 0; i < b.N; i++ {
				b.StopTimer()
				f := s.replace(benchCMs)
				b.StartTimer()
				f()
			}
		})
	}
}

// BenchmarkCacheRetained reports the heap each store holds per object
// beyond the objects themselves (made before): its maps, keys and indexes,
// after a GC, filled by updates as a watch fills it. "queried": after a
// namespace query, which makes kinformer build its namespace index (see
// Cache); "idle": never asked for a namespace.
//
//	go test -run '^$' -bench BenchmarkCacheRetained -count 3 .
func BenchmarkCacheRetained(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	for _, queried := range []bool{false, true} {
		for _, impl := range []string{"kinformer", "kinformer-compact", "client-go"} {
			name := map[bool]string{false: "idle", true: "queried"}[queried]
			b.Run(fmt.Sprintf("ns=%s/impl=%s", name, impl), func(b *testing.B) {
				var perObject float64
				for b.Loop() {
					before := heap()
					s := newBenchStores()[impl]()
					if queried {
						s.byNamespace("ns-000")
					}
					perObject = float64(heap()-before) / benchObjects
					runtime.KeepAlive(s)
				}
				b.ReportMetric(perObject, "B/object")
			})
		}
	}
}

// BenchmarkWriter times the informer's writer (writer.go) applying what a
// watch and a re-list bring to a cache of 10,000 ConfigMaps: Apply is one
// Modified event (a new instance, as decoded), Relist the swap and diff of
// a re-list in which every object changed. Events are queued for one
// registration, drained untimed.
//
//	go test -run '^$' -bench BenchmarkWriter -benchmem -count 5 .
func BenchmarkWriter(b *testing.B) {
	// Two generations of every object, so that each apply replaces the
	// cached instance with another one.
	var gens [2][]*corev1.ConfigMap
	for g := range gens {
		gens[g] = make([]*corev1.ConfigMap, benchObjects)
		for i, o := range benchCMs {
			o = o.DeepCopy()
			o.ResourceVersion = strconv.Itoa(100000*(g+1) + i)
			gens[g][i] = o
		}
	}
	fill := func() (*writer[*corev1.ConfigMap], func() []Event[*corev1.ConfigMap]) {
		c := newCache[*corev1.ConfigMap](nil, nil)
		w, events := newTestWriter(c)
		for _, o := range benchCMs {
			w.apply(Added, arrivalOf(o), prepared)
		}
		events()
		return w, events
	}
	b.Run("op=Apply", func(b *testing.B) {
		w, events := fill()
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			w.apply(Modified, arrivalOf(gens[(i/benchObjects)%2][i%benchObjects]), prepared)
			if i++; i%4096 == 0 {
				b.StopTimer()
				events()
				b.StartTimer()
			}
		}
	})
	b.Run("op=Relist", func(b *testing.B) {
		w, events := fill()
		b.ReportAllocs()
		for i := 0; i < b.N; i++ {
			b.StopTimer()
			items := w.cache.s.NewItems(benchObjects)
			for _, o := range gens[i%2] {
				w.collect(items, arrivalOf(o), prepared)
			}
			events()
			b.StartTimer()
			w.replace(items, strconv.Itoa(i+2), nil)
		}
	})
}

// BenchmarkMutationDetector measures what Options.DetectMutations costs
// on 10,000 ConfigMaps, cached through the writer (prepared and shared as
// a watch's are): the heap the informer holds per object, objects
// included, with the detector off and on; the writer's Apply; and one
// periodic check of every object.
//
//	go test -run '^$' -bench BenchmarkMutationDetector -benchmem -count 5 .
func BenchmarkMutationDetector(b *testing.B) {
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var m runtime.MemStats
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}
	fill := func(detect bool) (*writer[*corev1.ConfigMap], func() []Event[*corev1.ConfigMap]) {
		c := newCache[*corev1.ConfigMap](nil, nil)
		w, events := newTestWriter(c)
		if detect {
			det, hook := newDetector[*corev1.ConfigMap](w.log, nil, false, w.status.ResourceVersion, w.disp.emit, w.disp.fence)
			w.detect = hook
			w.share.Stale = &det.Found
		}
		for _, o := range benchCMs {
			w.apply(Added, arrivalOf(o.DeepCopy()), w.prepare)
		}
		events()
		return w, events
	}
	for _, detect := range []bool{false, true} {
		name := map[bool]string{false: "off", true: "on"}[detect]
		b.Run("op=Retained/detector="+name, func(b *testing.B) {
			var perObject float64
			for b.Loop() {
				before := heap()
				w, _ := fill(detect)
				perObject = float64(heap()-before) / benchObjects
				runtime.KeepAlive(w)
			}
			b.ReportMetric(perObject, "B/object")
		})
		b.Run("op=Apply/detector="+name, func(b *testing.B) {
			w, events := fill(detect)
			b.ReportAllocs()
			i := 0
			for b.Loop() {
				o := benchCMs[i%benchObjects].DeepCopy()
				o.ResourceVersion = strconv.Itoa(200000 + i)
				w.apply(Modified, arrivalOf(o), w.prepare)
				if i++; i%4096 == 0 {
					b.StopTimer()
					events()
					b.StartTimer()
				}
			}
		})
	}
	b.Run("op=Check/detector=on", func(b *testing.B) {
		w, _ := fill(true)
		det := w.detect.(detectorHook[*corev1.ConfigMap]).d
		b.ReportAllocs()
		for b.Loop() {
			det.Check(b.Context())
		}
	})
}
