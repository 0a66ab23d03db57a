// Package sharding splits the objects of a resource between the replicas
// of a program, on Kubernetes Leases: each replica's informers cache and
// handle only its share. A [Sharding] is a replica's membership in a shard
// group; it is a kinformer.Sharder, given to informers through
// kinformer.Options.Sharding or kinformer.FactoryOptions.Sharding.
//
// The shortest correct use:
//
//	sh := sharding.New(cfg, sharding.Options{
//		Group: "widget-controller", Namespace: "ops", Identity: podName,
//	})
//	go sh.Run(ctx) // on ctx's end: gives the share up, deletes its Lease
//	inf := kinformer.New[*corev1.Pod](pods, &kinformer.Options[*corev1.Pod]{Sharding: sh})
//
// Ownership is a part of the hash space of metadata.uid (64-bit FNV-1a,
// the hash of Kubernetes' server-side sharded list and watch, KEP-5866),
// cut into [Options.Slots] equal slots. Live members are the holders of
// unexpired Leases labelled [GroupLabel] with the group; the slots are
// split between them so that a membership change moves as few as possible.
// No slot is served by two live replicas at once: a replica claims a slot
// in its Lease ([ClaimsAnnotation]) and serves it only once a read of the
// group made after that write shows no other live claim; it gives a slot
// up through its informers (Deleted, kinformer.CauseReshard) before
// dropping the claim; and one that cannot renew its Lease stops serving a
// margin before the others may count it dead. docs/sharding.md has the
// protocol and its failure cases.
//
// A Sharding needs to get, list, create, update and delete Leases
// (coordination.k8s.io/v1) in [Options.Namespace]; whoever else may write
// Leases there decides what the group serves, so keep that to the
// replicas ([Options.Members] narrows it; members that serve nothing are
// reported in [Status.NotServing]). [NewMetrics] exports its
// Prometheus metrics; [Sharding.Status] tells its members and share.
package sharding
