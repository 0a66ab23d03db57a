package slots

// Share and Subscription are what an informer and a shard group's
// membership say to each other. They are defined here, and named
// kinformer.Share and kinformer.ShareSubscription (aliases), so that
// package sharding implements kinformer.Sharder without importing the
// root package.

// Share is the part of the hash space of metadata.uid (64-bit FNV-1a,
// KEP-5866) a replica serves: the slots Slots of Total equal parts.
type Share struct {
	// Version numbers the shares one subscription publishes, increasing
	// at each change; 0 until the first share is published.
	Version uint64
	// Total is how many equal parts the hash space is cut into: a power
	// of two up to 4096, the same for every replica of a group. Set also
	// before the first share.
	Total int
	// Slots are the parts served, sorted indexes in [0, Total); slot i
	// holds the hashes [i<<(64-log2(Total)), (i+1)<<(64-log2(Total))).
	// Read-only: it may be shared between subscriptions.
	Slots []int
}

// Subscription is one informer's view of its replica's share: an
// informer subscribes at the start of each run and closes at its end.
// Its methods are safe for concurrent use.
type Subscription interface {
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
