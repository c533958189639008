// Package shardcast scales Redis (and Valkey) Pub/Sub for real-time
// servers: millions of short-lived channels, hundreds of subscriber nodes,
// at-most-once delivery in per-channel order.
//
// # Using a broker
//
// An application builds a broker with one of the engines, which live in
// sub-packages, and then needs only this package's contract:
//
//   - sharded: client-side sharding over isolated Redis instances.
//   - cluster: node-grouped sharded Pub/Sub (SSUBSCRIBE) on Redis Cluster,
//     one subscribe connection per master however many partitions.
//
// The contract is [Broker] (Publish, Subscribe, Unsubscribe, Close), each
// [Message] it hands to a [Handler], each [Event] it raises, the [Options]
// both engines take, the [Stats] they count, and the sentinel errors to
// branch on with errors.Is: [ErrClosed], [ErrInvalidChannel],
// [ErrPayloadTooLarge], [ErrNoHandler], [ErrInvalidConfig], [ErrNotSent],
// [ErrLayoutMismatch], and the event causes [ErrSlotMoved],
// [ErrPartitionMoved], [ErrHandlerPanic], [ErrSilentPath] and
// [ErrRelayoutOrder]. [Layout] tells which
// partition and wire key a channel gets; nodes that share channels must
// agree on [Layout.Fingerprint], and check that they do as they start:
// each broker compares its layout with a record the running brokers keep
// in Redis, and refuses to start on another ([Agreement]).
//
// A minimal subscriber:
//
//	b, err := sharded.New(sharded.Config{
//		Addrs:   []string{"127.0.0.1:6379"},
//		Options: shardcast.Options{Handler: func(m shardcast.Message) { fmt.Println(m.Channel) }},
//	})
//	if err != nil { ... }
//	defer b.Close()
//	err = b.Subscribe(ctx, "news")
//
// Every loss the library can know about (a full queue, a dropped
// connection, a slot move, a failover) is raised as an [Event] naming the
// channels and the time window, so an application can tell its own clients
// to recover.
//
// # Building blocks
//
// Beside the contract, the package holds the pieces of the design both
// engines are built from, as plain data and pure functions that a tool or
// another engine can use as they are:
//
//   - [Layout]: channel → partition (jump hash of xxhash64) → hash tag and
//     slot, from generated tag tables whose partitions spread evenly over
//     any number of Redis Cluster masters.
//   - Topology: a [SlotMap] (built by [NewSlotMap], or read from CLUSTER
//     SLOTS by cluster.ParseSlots) says which master owns which slots, and
//     [SlotMap.Assign] gives each partition its master ([Assignment]).
//   - Resubscribing: [GroupByPartition] and [Group.Batches] cut channels
//     into batched subscribe commands, and a [Resubscriber] sends whole
//     groups with bounded concurrency.
//   - [WorkerPool]: hash-ordered handler workers with bounded queues that
//     drop (and report) instead of blocking a socket read loop.
//
// The engine kit that drives them (connections, supervision, the publish
// path, re-layout) is internal to this module: it changes with the engines
// and promises no API. Any Broker, an engine's or a wrapper's, can be
// checked against the conformance suite both engines pass, package
// brokertest.
package shardcast
