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
// # Building an engine
//
// The rest of the package is for engine implementers, the way
// database/sql/driver is for database drivers: applications do not need it.
// These building blocks are what both engines share, and a third engine
// would use them the same way:
//
//   - [Layout]: channel → partition (jump hash of xxhash64) → hash tag and
//     slot, from generated tag tables whose partitions spread evenly over
//     any number of Redis Cluster masters.
//   - Topology, as pure functions over plain data: [ParseClusterSlotsFrom]
//     reads CLUSTER SLOTS into a [SlotMap], [Assign] gives each partition
//     its master ([Assignment]), and [DiffAssignments] says which
//     partitions moved ([AssignmentDiff]).
//   - Resubscribing: [GroupByPartition] and [PlanCommands] cut channels
//     into batched subscribe commands ([Command]), and a [Resubscriber]
//     sends whole groups ([Group]) with bounded concurrency.
//   - [WorkerPool]: hash-ordered handler workers with bounded queues that
//     drop (and report) instead of blocking a socket read loop.
//   - [Emitter]: delivers Events to Options.OnEvent in order, without ever
//     blocking the engine.
//
// An engine validates input with [ValidateChannel], [Options.Validate] and
// [ConnOptions.Validate], and fills defaults with [Options.WithDefaults] and
// [ConnOptions.WithDefaults]. Both engines are checked by one Broker
// conformance suite (internal/brokertest in this repository); a third
// engine should pass it too.
package shardcast
