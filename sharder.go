package kinformer

import (
	"reflect"
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
