package kinformer

import (
	"context"
	"fmt"
	"reflect"
	"sync/atomic"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime"

	"github.com/kinformer/kinformer/internal/slots"
	"github.com/kinformer/kinformer/internal/store"
)

// Sharder is a replica's membership in a shard group as an informer sees
// it: the share of the resource the replica serves, and when it changes.
// Package sharding implements it on Kubernetes Leases (*sharding.Sharding);
// a program whose replicas know their share without Leases (ordinal i of
// n in a StatefulSet) can implement it itself. See Options.Sharding.
//
// An informer calls Subscribe at the start of each run, and once in
// ShardStatus before it has applied a share; it closes each subscription
// it makes.
type Sharder interface {
	Subscribe() ShareSubscription
}

// ShareSubscription is one informer's view of its replica's share, from
// the start of a run to its end. Its methods are safe for concurrent use.
type ShareSubscription interface {
	// Share returns the share now published and a channel closed at the
	// next change. Version is 0 until the first share is published.
	Share() (Share, <-chan struct{})
	// Ack says the informer has applied Share version v: its handlers
	// have returned from every Deleted of the objects that left. Only
	// then may the replica let another take those objects.
	Ack(v uint64)
	// Valid reports whether handlers may be called now (the Lease cannot
	// yet be counted dead and the replica is not draining a fence).
	Valid() bool
	// Close unsubscribes (the informer's run ended and its handlers
	// returned).
	Close()
}

// ShareSyncer is implemented by a ShareSubscription that wants to know
// when the informer holds every object of the share it applied (package
// sharding says so in its Lease, so that the group can tell a member that
// claims slots but caches nothing). An informer calls Synced(v) once it
// has applied share version v and listed every slot that joined it; it
// does not call it for a version it has not synced.
type ShareSyncer interface {
	Synced(v uint64)
}

// Share is the part of the hash space of metadata.uid (64-bit FNV-1a, the
// hash of Kubernetes' sharded list and watch, KEP-5866) a replica serves:
// the slots Slots of Total equal parts. Slot i of Total holds the hashes
// from i·2⁶⁴/Total up to (i+1)·2⁶⁴/Total.
type Share struct {
	// Version numbers the shares one subscription publishes, increasing
	// at each change; 0 until the first share is published.
	Version uint64
	// Total is how many equal parts the hash space is cut into: a power
	// of two up to 4096, the same for every replica of a group. Set also
	// before the first share.
	Total int
	// Slots are the parts served, sorted indexes in [0, Total).
	// Read-only: it may be shared between subscriptions.
	Slots []int
}

// sameSharder reports whether a and b are the same Sharder: equal
// interface values (the same *sharding.Sharding), both nil, and false for
// values Go cannot compare.
func sameSharder(a, b Sharder) bool {
	if a == nil || b == nil {
		return a == nil && b == nil
	}
	if reflect.TypeOf(a) != reflect.TypeOf(b) || !reflect.ValueOf(a).Comparable() {
		return false
	}
	return a == b
}

// nilSharder reports whether s is nil or holds a nil pointer (a
// *sharding.Sharding variable never set): no sharding.
func nilSharder(s Sharder) bool {
	if s == nil {
		return true
	}
	v := reflect.ValueOf(s)
	return v.Kind() == reflect.Pointer && v.IsNil()
}

// ShardStatus says what share of a sharded informer's resource it holds,
// and who filters it.
type ShardStatus struct {
	// Sharded: the informer has Options.Sharding.
	Sharded bool
	// Mode is "server" when the API server filters lists and watches by
	// the share (it echoed the shard selector: the ShardedListAndWatch
	// feature), "client" when the informer does it alone, "" before the
	// first list tells.
	Mode string
	// Slots of Total are the share; Ranges are its hash ranges.
	Slots, Total int
	Ranges       string
}

// shardLoop is what a sharded informer's loop keeps about its share.
type shardLoop struct {
	sub   ShareSubscription // of the current run; nil between runs
	ver   uint64            // of the share applied in this run; 0 before the first
	probe bool              // the share changed: learn whether the server filters it
	pub   *sharePublished   // what the loop tells other goroutines
	// gained is the part of the share that a re-list (or a list of the
	// joined slots) is adding: their objects are Added with
	// CauseReshard. Kept between runs, until a list has added them.
	gained *slots.Set
	synced uint64 // the last version told synced (ShareSyncer) in this run
}

// reportSynced tells the Sharder, if it wants to know (ShareSyncer), that
// the share applied is synced: the informer has synced, is not catching
// up, and no slot that joined the share is still to be listed.
func (l *loop[T]) reportSynced() {
	sh := l.sh
	if sh == nil || sh.ver == 0 || sh.synced == sh.ver || l.target != "" || !l.w.status.Synced.Load() ||
		(sh.gained != nil && !sh.gained.Empty()) {
		return
	}
	if s, ok := sh.sub.(ShareSyncer); ok {
		s.Synced(sh.ver)
	}
	sh.synced = sh.ver
}

// joining returns the slots whose objects a list is adding to the share
// (shardLoop.gained); nil if none, or not sharded.
func (l *loop[T]) joining() *slots.Set {
	if l.sh == nil {
		return nil
	}
	return l.sh.gained
}

// sharePublished is what a sharded informer's loop publishes to other
// goroutines: the share it has applied in this run, which handler
// goroutines read to admit events (admit), and its status, which anyone
// reads (Informer.ShardStatus). The loop writes it; both are atomics.
type sharePublished struct {
	status atomic.Pointer[ShardStatus]
	// applied is the share the loop has applied in this run (nil before
	// the first, and once the run is over): handlers get object events
	// only for objects in it.
	applied atomic.Pointer[appliedShare]
}

// appliedShare is a share a run has applied, and the subscription it
// came by (whose Valid says whether handlers may be called).
type appliedShare struct {
	set *slots.Set
	sub ShareSubscription
}

// admit decides, on a handler's goroutine, whether the handler may get e
// now: object events only for objects of the share applied in this run,
// while the subscription is valid; held while no share is applied yet (a
// run starting: the share may have moved since the events were queued,
// before a Stop).
func admit[T Object](p *sharePublished, e Event[T]) admission {
	if !ownsEvent(e) {
		return admitDeliver
	}
	a := p.applied.Load()
	switch {
	case a == nil:
		return admitHold
	case !a.sub.Valid() || !a.set.Has(string(e.Object.GetUID())):
		return admitDrop
	}
	return admitDeliver
}

// applyShare applies the Sharder's share if it changed since the last
// call: objects that left are removed and Deleted (CauseReshard), their
// handlers are waited for, and the change is acknowledged so that the
// Sharder may let another replica take them. While the share is empty it
// waits. It reports whether the share grew (objects may have joined:
// re-list), and false for ok once ctx ends.
func (l *loop[T]) applyShare(ctx context.Context) (grew, ok bool) {
	sh := l.sh
	for {
		share, changed := sh.sub.Share()
		if share.Version != 0 && share.Version != sh.ver {
			set := l.shareSet(share)
			old := l.w.shard
			dropped := l.w.reshard(set)
			sh.pub.applied.Store(&appliedShare{set: set, sub: sh.sub})
			l.w.disp.wakeAll()
			// Also with nothing dropped: watch Deleted events of objects
			// already gone from the cache may still be queued.
			if !l.handlersDone(ctx) {
				return false, false
			}
			sh.ver = share.Version
			sh.sub.Ack(share.Version)
			if old != nil {
				if g := joined(old, set); !g.Empty() {
					grew = true
					if sh.gained != nil && sh.gained.Total() == g.Total() {
						g = g.Union(sh.gained) // a growth not listed yet
					}
					sh.gained = g
				}
			}
			sh.probe = true
			st := ShardStatus{Sharded: true, Slots: set.Len(), Total: set.Total(), Ranges: set.String()}
			if prev := sh.pub.status.Load(); prev != nil {
				st.Mode = prev.Mode
			}
			sh.pub.status.Store(&st)
			l.obs.shard(set.Len(), st.Mode)
			l.log.Info("kinformer: share changed", "slots", set.Len(), "of", set.Total(), "dropped", dropped, "grew", grew, "ranges", set.String())
		}
		if sh.ver != 0 && !l.w.shard.Empty() {
			if sh.gained != nil {
				sh.gained = sh.gained.Minus(joined(l.w.shard, sh.gained)) // what is still ours
			}
			return grew, true
		}
		offers, pending := l.offerPending()
		if pending {
			// No share to list yet: the new configuration is taken
			// now, and the list once there is one applies it.
			l.adopt(nil)
			continue
		}
		select {
		case <-ctx.Done():
			return false, false
		case <-changed:
		case <-offers:
		}
	}
}

// shareSet is share as a set of slots. A share that is not one (a Total
// that is not a power of two up to 4096, a slot out of range: a Sharder's
// bug) is logged and served as none.
func (l *loop[T]) shareSet(share Share) *slots.Set {
	set, err := slots.Of(share.Total, share.Slots)
	if err != nil {
		l.log.Error("kinformer: the Sharder published an invalid share; serving none of it", "version", share.Version, "error", err)
		return slots.New(1)
	}
	return set
}

// joined returns the slots of set not in old: all of them if old cuts
// the hash space into another number of slots (nil is empty).
func joined(old, set *slots.Set) *slots.Set {
	if old == nil || set == nil || old.Total() != set.Total() {
		return set.Clone()
	}
	return set.Minus(old)
}

// shareChanged returns a channel closed when the share changes from the
// one applied; nil (never ready) if the informer is not sharded.
func (l *loop[T]) shareChanged() <-chan struct{} {
	if l.sh == nil {
		return nil
	}
	share, changed := l.sh.sub.Share()
	if share.Version != l.sh.ver {
		c := make(chan struct{})
		close(c)
		return c
	}
	return changed
}

// closeShard unsubscribes the informer from its Sharder, once its run has
// ended and its handlers have returned.
func (l *loop[T]) closeShard() {
	if l.sh != nil && l.sh.sub != nil {
		l.sh.pub.applied.Store(nil) // until the next run applies its share
		l.sh.sub.Close()
		l.sh.sub = nil
	}
}

// serverFilters reports whether the server is not known not to filter by
// the share. Where it does not (mode "client"), a list of the joined slots
// would read the whole collection page by page from etcd, at an exact
// resourceVersion: a re-list of the whole share reads the same bytes, in
// one streaming list from the server's cache.
func (l *loop[T]) serverFilters() bool {
	st := l.sh.pub.status.Load()
	return st == nil || st.Mode != "client"
}

// listJoined is the phaseListJoined attempt: it lists the objects of the
// slots that joined the share (shardLoop.gained) as of the resourceVersion the
// cache is at, page by page,
// and adds them to the cache (Added, CauseReshard); the watch then resumes
// from that resourceVersion with the whole share's selector, so nothing is
// missed or replayed. Where the server does not filter, the pages hold
// everything and the informer keeps the joined slots' objects. A failure
// (410 Gone: the resourceVersion is compacted) means: re-list the whole
// share (step).
func (l *loop[T]) listJoined(ctx context.Context) outcome {
	gained := l.sh.gained
	if gained == nil || gained.Empty() {
		return outcome{kind: listed} // they left again before being listed
	}
	rv := l.w.status.ResourceVersion()
	items := l.w.cache.s.NewItems(0)
	opts := l.listOptions()
	opts.ShardSelector = gained.Selector()
	opts.ResourceVersion = rv
	opts.ResourceVersionMatch = metav1.ResourceVersionMatchExact
	opts.Limit = l.opts.PageSize
	at, _, err := l.listPages(ctx, opts, items)
	switch {
	case err != nil:
		return outcome{kind: listFailed, err: fmt.Errorf("list of the joined slots at resourceVersion %s: %w", rv, err)}
	case at != rv:
		// Not a list at that resourceVersion: the watch from it could
		// replay older states over the listed ones.
		return outcome{kind: listFailed, err: fmt.Errorf("list of the joined slots: asked for resourceVersion %s exactly, got %s", rv, at)}
	}
	n := l.w.merge(items, gained)
	l.sh.gained = nil
	l.log.Info("kinformer: listed the slots that joined the share", "objects", n, "resourceVersion", rv, "ranges", gained.String())
	return outcome{kind: listed}
}

// handlersDone waits until every handler has returned from every event
// queued so far.
func (l *loop[T]) handlersDone(ctx context.Context) bool {
	return l.w.disp.waitHandled(ctx, l.w.disp.marks())
}

// cancelOnReshard returns a context that ends when ctx does or when the
// share changes, and its release.
func (l *loop[T]) cancelOnReshard(ctx context.Context) (context.Context, func()) {
	share, changed := l.sh.sub.Share()
	return cancelWhen(ctx, share.Version != l.sh.ver, changed)
}

// probeShardMode asks for one object with the share's selector: a server
// that filters by it echoes it in the list's shardInfo.
func (l *loop[T]) probeShardMode(ctx context.Context) {
	opts := l.listOptions()
	opts.Limit = 1
	list, err := l.listFn(ctx, opts)
	l.obs.request("list", classify(err))
	if err != nil || isNil(list) {
		return // try again at the next change
	}
	l.sh.probe = false
	mode := "client"
	if echo, ok := shardEcho(list); ok && echo != "" {
		mode = "server"
		if echo != opts.ShardSelector {
			l.log.Warn("kinformer: the server echoed another shard selector than sent; filtering by the informer's", "sent", opts.ShardSelector, "echo", echo)
		}
	}
	st := *l.sh.pub.status.Load()
	if st.Mode != mode {
		l.log.Info("kinformer: sharded list and watch", "mode", mode)
	}
	st.Mode = mode
	l.sh.pub.status.Store(&st)
	l.obs.shard(st.Slots, mode)
}

// shardEcho returns the shard selector a list says it was filtered by.
func shardEcho(list runtime.Object) (string, bool) {
	if u, ok := list.(*unstructured.UnstructuredList); ok {
		s, found, _ := unstructured.NestedString(u.Object, "metadata", "shardInfo", "selector")
		return s, found
	}
	lm, err := meta.ListAccessor(list)
	if err != nil {
		return "", false
	}
	if g, ok := lm.(interface{ GetShardInfo() *metav1.ShardInfo }); ok && g.GetShardInfo() != nil {
		return g.GetShardInfo().Selector, true
	}
	return "", false
}

// ShardStatus returns the informer's share and how it is filtered; the
// zero ShardStatus if it is not sharded.
func (inf *Informer[T]) ShardStatus() ShardStatus {
	if inf.shard == nil {
		return ShardStatus{}
	}
	if st := inf.shard.status.Load(); st != nil {
		return *st
	}
	// No share applied yet: the Sharder says how many slots there are.
	sub := inf.sharder.Subscribe()
	share, _ := sub.Share()
	sub.Close()
	return ShardStatus{Sharded: true, Total: share.Total, Ranges: "none"}
}

// The writer's side of a share change: what is outside the share, and
// the objects a share change drops or adds.

// outsideUID reports whether the object of this UID is outside the share
// of a sharded informer.
func (w *writer[T]) outsideUID(uid string) bool {
	return w.shard != nil && !w.shard.Has(uid)
}

// reshard makes set the informer's share: cached objects outside it are
// removed and Deleted (CauseReshard) is queued for each. The state file
// keeps them: a sharded informer restored from it always re-lists, and
// drops what is not its share then; a replica that leaves and comes back
// with the same share starts from its snapshot.
func (w *writer[T]) reshard(set *slots.Set) (dropped int) {
	w.shard = set
	var gone []string
	w.cache.s.PeekAll(func(key string, r store.Ref[T]) {
		if w.outsideUID(r.UID()) {
			gone = append(gone, key)
		}
	})
	if len(gone) == 0 {
		return 0
	}
	w.disp.update(func(p publisher[T]) {
		rv := w.status.ResourceVersion()
		for _, key := range gone {
			if old, existed := w.remove(p, key); existed {
				w.emit(p, Event[T]{Type: Deleted, Key: key, ResourceVersion: rv, Cause: CauseReshard}, old, store.Ref[T]{})
			}
		}
	})
	return len(gone)
}

// merge adds the objects of items that fall in gained (slots that joined
// the share, listed at the cache's resourceVersion) to the cache, and
// queues Added (CauseReshard) for each new one, Modified for one cached at
// another resourceVersion. The resourceVersion stays: the watch resumes
// from it.
func (w *writer[T]) merge(items *store.Items[T], gained *slots.Set) (added int) {
	w.disp.update(func(p publisher[T]) { added = w.mergeLocked(p, items, gained) })
	return added
}

func (w *writer[T]) mergeLocked(p publisher[T], items *store.Items[T], gained *slots.Set) (added int) {
	rv := w.status.ResourceVersion()
	for key, r := range items.All() {
		if !gained.Has(r.UID()) {
			continue // a server that does not filter sent the whole collection
		}
		old, existed := w.cache.s.Peek(key)
		if existed && w.cache.s.SameVersion(old, r) {
			continue
		}
		w.put(p, key, r)
		e := Event[T]{Type: Added, Key: key, ResourceVersion: rv, Cause: CauseReshard}
		eOld := store.Ref[T]{}
		if existed {
			e.Type, eOld = Modified, old
		} else {
			added++
		}
		if w.state != nil {
			w.record(key, r, rv)
		}
		w.emit(p, e, r, eOld)
	}
	return added
}
