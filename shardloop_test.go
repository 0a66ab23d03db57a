package kinformer

import (
	"bytes"
	"fmt"
	"net/http/httptest"
	"slices"
	"sync"
	"testing"
	"time"

	corev1 "k8s.io/api/core/v1"
	apierrors "k8s.io/apimachinery/pkg/api/errors"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/types"
	"k8s.io/apimachinery/pkg/watch"
	"k8s.io/client-go/kubernetes"
	"k8s.io/client-go/rest"

	"github.com/kinformer/kinformer/internal/projection"
	"github.com/kinformer/kinformer/internal/slots"
	"github.com/kinformer/kinformer/internal/wiretest"
)

// fixedSharder is a Sharder without Leases: a test publishes its shares,
// and handlers are always valid. It records the versions acknowledged.
type fixedSharder struct {
	mu      sync.Mutex // guards all below
	share   Share
	changed chan struct{}
	acks    []uint64
	// onSynced, if set, is called (without mu) as the informer says a
	// version is synced (ShareSyncer).
	onSynced func(v uint64)
}

// fixedSharding returns a fixedSharder of total slots that serves set.
func fixedSharding(t *testing.T, total int, set ...int) *fixedSharder {
	t.Helper()
	sh := &fixedSharder{share: Share{Total: total}, changed: make(chan struct{})}
	publish(sh, set...)
	return sh
}

// publish makes set the share, as a new version.
func publish(sh *fixedSharder, set ...int) {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	sh.share = Share{Version: sh.share.Version + 1, Total: sh.share.Total, Slots: slices.Sorted(slices.Values(set))}
	close(sh.changed)
	sh.changed = make(chan struct{})
}

func (sh *fixedSharder) acked() []uint64 {
	sh.mu.Lock()
	defer sh.mu.Unlock()
	return slices.Clone(sh.acks)
}

func (sh *fixedSharder) Subscribe() ShareSubscription { return fixedSub{sh} }

type fixedSub struct{ sh *fixedSharder }

func (s fixedSub) Share() (Share, <-chan struct{}) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	return s.sh.share, s.sh.changed
}

func (s fixedSub) Ack(v uint64) {
	s.sh.mu.Lock()
	defer s.sh.mu.Unlock()
	s.sh.acks = append(s.sh.acks, v)
}

func (s fixedSub) Synced(v uint64) {
	s.sh.mu.Lock()
	f := s.sh.onSynced
	s.sh.mu.Unlock()
	if f != nil {
		f(v)
	}
}

func (fixedSub) Valid() bool { return true }
func (fixedSub) Close()      {}

// gated returns a handler that waits for gate to close before passing
// each event to next, and a channel that receives once it is first
// called.
func gated(gate <-chan struct{}, next func(cmEvent)) (func(cmEvent), <-chan struct{}) {
	called := make(chan struct{}, 1)
	return func(e cmEvent) {
		select {
		case called <- struct{}{}:
		default:
		}
		<-gate
		next(e)
	}, called
}

// shardedObjects puts n ConfigMaps on s and returns their names by slot
// (of slots).
func shardedObjects(t testing.TB, s *fakeServer, n, total int) map[int][]string {
	t.Helper()
	set := slots.New(total)
	out := map[int][]string{}
	for i := range n {
		c := cm("ns", fmt.Sprint("o", i))
		// The number first: FNV-1a's top bits, which pick the slot,
		// barely depend on the last bytes ("uid-0"… all fell in one slot
		// of two, and the tests checked less than they said).
		c.UID = types.UID(fmt.Sprintf("%d-uid", i))
		s.apply(watch.Added, c)
		slot := set.SlotOf(slots.Hash(string(c.UID)))
		out[slot] = append(out[slot], "ns/"+c.Name)
	}
	for slot := range total {
		if len(out[slot]) == 0 {
			t.Fatalf("no object of %d in slot %d of %d: the test would show nothing there", n, slot, total)
		}
	}
	return out
}

// The share grows while the informer is stopped: the next run lists,
// rather than watching from the kept resourceVersion, which would never
// bring the objects of the new slot.
func TestShardRestartWithGrownShare(t *testing.T) {
	s := newFakeServer()
	bySlot := shardedObjects(t, s, 20, 2)
	sh := fixedSharding(t, 2, 0)
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh})
	if got := inf.Cache().Len(); got != len(bySlot[0]) {
		t.Fatalf("slot 0 alone: %d cached, want %d", got, len(bySlot[0]))
	}
	inf.Stop()
	publish(sh, 0, 1)
	inf.Start()
	eventually(t, "the grown share listed", func() bool { return inf.Cache().Len() == 20 })
	eventually(t, "Added (reshard) for the new slot", func() bool {
		n := 0
		for _, e := range rec.all() {
			if e.Type == Added && e.Cause == CauseReshard {
				n++
			}
		}
		return n == len(bySlot[1])
	})
}

// Events queued for a handler when the informer stopped are not delivered
// for objects that left the share meanwhile (another replica may own them
// now); the handler gets their Deleted (reshard) instead. Objects still in
// the share keep their events.
func TestShardRestartDropsQueuedEventsOfLostSlots(t *testing.T) {
	s := newFakeServer()
	bySlot := shardedObjects(t, s, 30, 2)
	sh := fixedSharding(t, 2, 0, 1)
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh})
	gate := make(chan struct{})
	var late recorder
	slow, inCall := gated(gate, late.handle)
	inf.AddHandler(slow)
	// The slow handler is in its first call, the rest of its replay is
	// queued: the informer stops once that call returns, before the share
	// changes; the queue waits for the next run.
	<-inCall
	stopped := inf.RequestStop()
	close(gate)
	<-stopped
	publish(sh, 0) // slot 1 goes to another replica while this one is stopped
	inf.Start()
	eventually(t, "slot 1 dropped", func() bool { return inf.Cache().Len() == len(bySlot[0]) })
	lost := map[string]bool{}
	for _, k := range bySlot[1] {
		lost[k] = true
	}
	eventually(t, "the slow handler's Deleted (reshard) for slot 1", func() bool {
		n := 0
		for _, e := range late.all() {
			if e.Type == Deleted && e.Cause == CauseReshard && lost[e.Key] {
				n++
			}
		}
		return n == len(bySlot[1])
	})
	for i, e := range late.all() {
		if i > 0 && lost[e.Key] && (e.Type == Added || e.Type == Modified) { // the first was handled before the change
			t.Fatalf("%s %s delivered after its slot left the share", e.Type, e.Key)
		}
	}
	kept := 0
	for _, e := range late.all() {
		if e.Type == Added && !lost[e.Key] {
			kept++
		}
	}
	if kept != len(bySlot[0]) {
		t.Fatalf("the slow handler got %d Added of the kept slot, want %d (its queued replay)", kept, len(bySlot[0]))
	}
	_ = rec
}

// A share is acknowledged once the handlers have returned from the
// Deleted of every object that left it, and not before: until then the
// Sharder must not let another replica take those objects.
func TestShardAckAfterHandlersReturn(t *testing.T) {
	s := newFakeServer()
	bySlot := shardedObjects(t, s, 20, 2)
	sh := fixedSharding(t, 2, 0, 1)
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh})
	gate := make(chan struct{})
	slow, deleted := gated(gate, func(cmEvent) {})
	if _, err := inf.AddEventHandler(Deleted, slow); err != nil {
		t.Fatal(err)
	}
	eventually(t, "the first share acknowledged", func() bool { return slices.Contains(sh.acked(), 1) })
	publish(sh, 0)
	<-deleted // the handler is in the Deleted of a slot-1 object
	time.Sleep(50 * time.Millisecond)
	if slices.Contains(sh.acked(), 2) {
		t.Fatal("the shrunk share acknowledged while a handler is still in a Deleted of it")
	}
	close(gate)
	eventually(t, "the shrunk share acknowledged", func() bool { return slices.Contains(sh.acked(), 2) })
	if got := inf.Cache().Len(); got != len(bySlot[0]) {
		t.Fatalf("%d cached, want slot 0's %d", got, len(bySlot[0]))
	}
}

// A share that grows while the informer watches is filled by a list of
// the joined slots alone, at the watch's resourceVersion; a share that
// shrinks is dropped from the cache, without a request.
func TestShardGrowAndShrinkWhileRunning(t *testing.T) {
	s := newFakeServer()
	s.shardFilter = true
	bySlot := shardedObjects(t, s, 40, 2)
	sh := fixedSharding(t, 2, 0)
	inf, rec := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh, PageSize: 7}) // the joined slot takes pages
	if inf.Cache().Len() != len(bySlot[0]) {
		t.Fatalf("cached %d, want %d", inf.Cache().Len(), len(bySlot[0]))
	}
	count := func(typ EventType) int {
		n := 0
		for _, e := range rec.all() {
			if e.Type == typ && e.Cause == CauseReshard {
				n++
			}
		}
		return n
	}
	s.mu.Lock()
	before := len(s.lists)
	s.mu.Unlock()
	publish(sh, 0, 1)
	eventually(t, "the joined slot listed", func() bool { return inf.Cache().Len() == 40 && count(Added) == len(bySlot[1]) })
	s.mu.Lock()
	lists := append([]metav1.ListOptions(nil), s.lists[before:]...)
	s.mu.Unlock()
	one := slots.New(2)
	one.Add(1)
	exact := 0
	for _, o := range lists {
		switch {
		case o.ShardSelector == one.Selector() && o.ResourceVersionMatch == metav1.ResourceVersionMatchExact && o.ResourceVersion != "":
			exact++
		case o.ShardSelector == one.Selector() && o.Continue != "":
			// the next pages of that list
		case o.Limit != 1: // the mode probe is a one-object list
			t.Errorf("a list other than of the joined slot: %+v", o)
		}
	}
	if exact == 0 {
		t.Fatalf("no list of the joined slot at the watch's resourceVersion among %+v", lists)
	}
	s.mu.Lock()
	before = len(s.lists)
	s.mu.Unlock()
	publish(sh, 1)
	eventually(t, "slot 0 dropped", func() bool { return inf.Cache().Len() == len(bySlot[1]) && count(Deleted) == len(bySlot[0]) })
	s.mu.Lock()
	for _, o := range s.lists[before:] {
		if o.Limit != 1 {
			t.Errorf("a shrink listed: %+v", o)
		}
	}
	s.mu.Unlock()
	eventually(t, "the status to say one slot, filtered by the informer", func() bool {
		st := inf.ShardStatus()
		return st.Slots == 1 && st.Mode == "server"
	})
}

// Where the server does not filter, a share that grows is re-listed whole
// (one list of everything either way), not paged at an exact
// resourceVersion.
func TestShardGrowWithoutServerFilter(t *testing.T) {
	s := newFakeServer()
	bySlot := shardedObjects(t, s, 40, 2)
	sh := fixedSharding(t, 2, 0)
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh, PageSize: 7})
	eventually(t, "the mode known", func() bool { return inf.ShardStatus().Mode == "client" })
	s.mu.Lock()
	before := len(s.lists)
	s.mu.Unlock()
	publish(sh, 0, 1)
	eventually(t, "the share re-listed", func() bool { return inf.Cache().Len() == len(bySlot[0])+len(bySlot[1]) })
	s.mu.Lock()
	defer s.mu.Unlock()
	for _, o := range s.lists[before:] {
		if o.ResourceVersionMatch != "" {
			t.Errorf("a list at an exact resourceVersion from a server that does not filter: %+v", o)
		}
	}
}

// The consumers of a shared informer must give the same Sharder: the same
// pointer (a *sharding.Sharding), or equal values. One Go cannot compare
// is the same as no other, without a panic; a nil pointer is no Sharder.
func TestSameSharder(t *testing.T) {
	type tagged struct {
		*fixedSharder
		tags []string // not comparable
	}
	a, b := fixedSharding(t, 2, 0), fixedSharding(t, 2, 0)
	for _, c := range []struct {
		x, y Sharder
		same bool
	}{
		{a, a, true},
		{a, b, false},
		{nil, nil, true},
		{a, nil, false},
		{tagged{a, nil}, tagged{a, nil}, false},
		{tagged{a, nil}, a, false},
	} {
		if got := sameSharder(c.x, c.y); got != c.same {
			t.Errorf("sameSharder(%T, %T) = %v, want %v", c.x, c.y, got, c.same)
		}
	}
	var none *fixedSharder
	if o := (&Options[*corev1.ConfigMap]{Sharding: none}).withDefaults(); o.Sharding != nil {
		t.Errorf("a nil *fixedSharder is the Sharder %v, want none", o.Sharding)
	}
}

// A sharded compact informer on a protobuf stream keeps the bytes of the
// objects it lists and watches undecoded (protowatch.Format.Lazy): it
// still keeps only its own share's objects, from the streaming list and
// from the watch, when the server does not filter by the shard selector.
func TestShardCompactProtobufStreamKeepsOwnShare(t *testing.T) {
	set := slots.New(2)
	obj := func(i int, rv string) *corev1.ConfigMap {
		o := cm("ns", fmt.Sprint("o", i))
		o.UID, o.ResourceVersion = types.UID(fmt.Sprintf("%d-uid", i)), rv
		return o
	}
	mine := func(i int) bool { return set.SlotOf(slots.Hash(fmt.Sprintf("%d-uid", i))) == 0 }
	end := func(rv string) *corev1.ConfigMap {
		return &corev1.ConfigMap{ObjectMeta: metav1.ObjectMeta{ResourceVersion: rv,
			Annotations: map[string]string{metav1.InitialEventsAnnotationKey: "true"}}}
	}
	// (UIDs that differ in their first bytes: FNV-1a's top bit, the slot
	// of 2, hardly depends on the last ones.)
	// The streaming list has objects 0-19, the watch adds 20-39 (new
	// ones only: an event of an object outside the share removes it, which
	// would hide one the list kept).
	const n = 20
	var list, watch [][]byte
	want := map[string]string{}
	last := -1 // the watch's last object of the share
	for i := range 2 * n {
		rv, frames := "5", &list
		if i >= n {
			rv, frames = fmt.Sprint(10+i), &watch
		}
		*frames = append(*frames, wiretest.Event(t, "ADDED", obj(i, rv)))
		if mine(i) {
			want["ns/"+obj(i, rv).Name] = rv
			last = i
		}
	}
	list = append(list, wiretest.Event(t, "BOOKMARK", end("10")))
	if len(want) == 0 || len(want) == 2*n || last < n {
		t.Fatalf("objects of slot 0: %v; the test needs some in it and some out, from the list and the watch", want)
	}
	srv := &contractProtoServer{scripts: [][]byte{bytes.Join(list, nil), bytes.Join(watch, nil), {}}}
	hs := httptest.NewServer(srv)
	t.Cleanup(hs.Close)
	cs, err := kubernetes.NewForConfig(&rest.Config{Host: hs.URL})
	if err != nil {
		t.Fatal(err)
	}
	inf := New[*corev1.ConfigMap](cs.CoreV1().ConfigMaps("ns"),
		&Options[*corev1.ConfigMap]{Backoff: fastBackoff, Compact: true, Sharding: fixedSharding(t, 2, 0)})
	inf.Start()
	t.Cleanup(inf.Stop)
	contractSync(t, inf)
	eventually(t, "the watch's last object of the share", func() bool {
		_, ok := inf.Cache().GetByKey("ns/" + obj(last, "").Name)
		return ok
	})
	if got := cacheState(inf.Cache()); !equalMaps(got, want) {
		t.Fatalf("the cache is not the share's objects (got vs want): %s", diffMaps(got, want))
	}
	if watches, _ := srv.seen(); len(watches) < 2 || watches[0].URL.Query().Get("sendInitialEvents") != "true" {
		t.Fatalf("%d watches, the first %v; want a streaming list, then a watch", len(watches), watches)
	}
}

// An informer tells a ShareSyncer a share is synced once it holds every
// object of it: the first after the first list, a grown one only after
// the slots that joined are listed, a shrunk one at once.
func TestShardSyncedAfterListing(t *testing.T) {
	s := newFakeServer()
	s.shardFilter = true
	bySlot := shardedObjects(t, s, 40, 2)
	sh := fixedSharding(t, 2, 0)
	var mu sync.Mutex
	var inf *Informer[*corev1.ConfigMap]
	synced := map[uint64]int{} // version -> objects cached when said synced
	sh.onSynced = func(v uint64) {
		mu.Lock()
		defer mu.Unlock()
		synced[v] = inf.Cache().Len()
	}
	mu.Lock()
	inf, _ = startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: sh, PageSize: 7})
	mu.Unlock()
	said := func(v uint64) (int, bool) {
		mu.Lock()
		defer mu.Unlock()
		n, ok := synced[v]
		return n, ok
	}
	eventually(t, "version 1 said synced", func() bool { _, ok := said(1); return ok })
	if n, _ := said(1); n != len(bySlot[0]) {
		t.Errorf("version 1 said synced with %d objects cached, want %d", n, len(bySlot[0]))
	}
	publish(sh, 0, 1)
	eventually(t, "version 2 said synced", func() bool { _, ok := said(2); return ok })
	if n, _ := said(2); n != 40 {
		t.Errorf("version 2 (grown) said synced with %d objects cached, want all 40", n)
	}
	publish(sh, 1)
	eventually(t, "version 3 said synced", func() bool { _, ok := said(3); return ok })
	if n, _ := said(3); n != len(bySlot[1]) {
		t.Errorf("version 3 (shrunk) said synced with %d objects cached, want %d", n, len(bySlot[1]))
	}
}

// A sharded informer's watch that fails is a failure like any other
// informer's (here: 504 too large resourceVersion, a re-list), not a
// change of share: only a change of share ends a watch as one.
func TestShardWatchErrorRelists(t *testing.T) {
	s := newFakeServer()
	shardedObjects(t, s, 20, 2)
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: fixedSharding(t, 2, 0, 1)})
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	eventually(t, "watch open", func() bool { return s.openWatches() == 1 })
	lists, _ := s.counts()
	tooLarge := apierrors.NewTimeoutError("Too large resource version: 100, current: 5", 1)
	tooLarge.ErrStatus.Details.Causes = []metav1.StatusCause{{Type: metav1.CauseTypeResourceVersionTooLarge, Message: "Too large resource version"}}
	s.sendRaw(watch.Event{Type: watch.Error, Object: &tooLarge.ErrStatus})
	eventually(t, "re-list after the watch's 504", func() bool { l, _ := s.counts(); return l == lists+1 })
}

// A sharded informer takes a wider projection while it runs, by a list
// of its share.
func TestShardWidenedWhileRunning(t *testing.T) {
	s := newFakeServer()
	s.shardFilter = true
	bySlot := shardedObjects(t, s, 20, 2)
	c := cm("ns", "o0")
	c.UID = "0-uid"
	c.Data["k"] = "v"
	s.apply(watch.Modified, c)
	inf, _ := startInformer(t, s, &Options[*corev1.ConfigMap]{Sharding: fixedSharding(t, 2, 0, 1), Fields: []string{"metadata.labels"}})
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().GetNamespaced("ns", "o0"); got == nil || got.Data != nil {
		t.Fatalf("narrow: %+v", got)
	}
	wide, err := projection.Union(inf.configuration().fields, mustFields(t, "data"))
	if err != nil {
		t.Fatal(err)
	}
	if err := inf.reconfigure("the fields it keeps", true, func(c *config[*corev1.ConfigMap]) { c.fields = wide }); err != nil {
		t.Fatal(err)
	}
	if err := inf.WaitForSync(bounded(t)); err != nil {
		t.Fatal(err)
	}
	if got, _ := inf.Cache().GetNamespaced("ns", "o0"); got == nil || got.Data["k"] != "v" {
		t.Fatalf("after the wider fields were taken: %+v", got)
	}
	if n := inf.Cache().Len(); n != len(bySlot[0])+len(bySlot[1]) {
		t.Fatalf("%d objects cached after the re-list, want the share's %d", n, len(bySlot[0])+len(bySlot[1]))
	}
}
