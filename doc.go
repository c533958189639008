// Package shardcast scales Redis (and Valkey) Pub/Sub for real-time
// servers: millions of short-lived channels, hundreds of subscriber nodes,
// at-most-once delivery in per-channel order.
//
// The root package holds what both engines share:
//
//   - [Broker], [Message], [Handler], [Event] and [Options]: the contract.
//   - [Layout]: channel → partition (jump hash of xxhash64) → hash tag, with
//     generated tag tables whose partitions spread evenly over any number of
//     Redis Cluster masters.
//   - [WorkerPool]: hash-ordered handler workers with bounded queues that
//     drop (and report) instead of blocking a socket read loop.
//   - [Resubscriber]: batched (re)subscribes, whole partitions per worker.
//   - Topology parsing and diffing ([ParseClusterSlots], [Assign],
//     [DiffAssignments]).
//
// The engines live in sub-packages:
//
//   - sharded: client-side sharding over isolated Redis instances.
//   - cluster: node-grouped sharded Pub/Sub (SSUBSCRIBE) on Redis Cluster,
//     one subscribe connection per master however many partitions.
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
package shardcast
