// Package centrifugebroker runs the Pub/Sub of a Centrifuge server
// (github.com/centrifugal/centrifuge v0.40.1) on shardcast: one Broker is
// the node's centrifuge.Broker, its centrifuge.Controller and a
// centrifuge.Closer.
//
//	node, _ := centrifuge.New(centrifuge.Config{})
//	b, err := centrifugebroker.New(node, centrifugebroker.Config{
//		Cluster: &cluster.Config{Addrs: []string{"10.0.0.1:7000"}}, // or Sharded: &sharded.Config{Addrs: ...}
//	})
//	if err != nil { ... }
//	node.SetBroker(b) // also the node's Controller
//	err = node.Run()
//
// The adapter builds the shardcast broker itself and owns its
// Options.Handler and Options.OnEvent; Config rejects them. Everything else
// of the engine's Config is the user's.
//
// # What it carries
//
// Publications, join and leave messages go on the channel they belong to;
// Centrifuge's node-to-node control messages (node discovery, server-side
// disconnects, unsubscribes, subscribes, surveys) go on one control channel,
// Config.ControlChannel, that every node subscribes to. A control message
// for one node carries that node's ID and the others drop it. Control
// commands run in the order received on a goroutine of their own, so that
// one that blocks (a server-side subscribe, the application's survey
// handler) does not hold up publications. Centrifuge calls carry no
// context, so each is bounded by Config.CallTimeout.
//
// # Losses reach the clients
//
// shardcast reports the channels whose messages may have been lost:
// EventInterrupted (a connection dropped, a master failed, a slot moved)
// and EventDropped (a worker queue overflowed). The Broker then
// unsubscribes the local clients of exactly those channels with
// Centrifuge's insufficient-state code (centrifuge.UnsubscribeCodeInsufficient),
// on which client SDKs resubscribe at once; the node's Broker.Subscribe for
// a resubscribing channel waits until Redis holds the channel again. Clients
// that subscribed while the channel was interrupted, without such a wait,
// are unsubscribed once more at the EventRestored. Stats.Resubscribes counts
// these unsubscribes. A client SDK does not resubscribe a server-side
// subscription by itself, so a client with one among those channels is
// disconnected with centrifuge.DisconnectInsufficientState instead, as
// Centrifuge itself does, and reconnects (Stats.Reconnects). An
// EventDropped whose channel list was cut short (Truncated) reaches the
// clients of every channel with local subscribers. Until a channel is restored, its join and leave
// messages from this node are not sent (PublishJoin and PublishLeave fail
// at once, and Centrifuge ignores that): they would wait for Redis and
// hold up every client being resubscribed.
//
// # History and recovery
//
// A publish with history (HistorySize and HistoryTTL both set) or with an
// IdempotencyKey runs one Lua script on the Redis node that carries the
// channel (its slot's master on a cluster). Atomically, it assigns the
// next offset, appends the publication to the channel's stream (at most
// HistorySize entries, expiring HistoryTTL after the last publish, its
// position and epoch HistoryMetaTTL after, default the node's
// Config.HistoryMetaTTL), and publishes it with its position, so that
// Centrifuge's recovery and position checks work. IdempotencyKey (result
// kept IdempotentResultTTL, default 5 minutes), Version with
// VersionEpoch, and UseDelta behave as in Centrifuge's Redis broker. The
// keys are named after Config.KeyPrefix and the channel, and on a cluster
// carry the channel's partition tag: they live in the channel's slot and
// move with it. A stream whose position is gone (expired, or lost in a
// restart without persistence) starts over at offset 1 in a new random
// epoch, which tells recovering clients that their position is gone.
//
// Redis replicates asynchronously: a master that fails can take its last
// writes with it, publications its clients may have received already.
// The replica that takes over keeps the streams' epochs, so that clients
// recover what it holds. A client whose position is past the new
// master's top fails its recovery and is told (Recovered false) if it
// resubscribes before new publications bring the top back up to its
// position; after that the lost offsets have been reused and, as with
// Centrifuge's Redis broker, it is not told. Only synchronous replication
// (WAIT), which this broker does not do, would close that window.
//
// # Presence
//
// NewPresenceManager returns the Broker's centrifuge.PresenceManager, for
// node.SetPresenceManager: presence kept in Redis beside each channel, on
// the same engine and connections, one Lua script per call on the
// channel's node (keys in the channel's partition slot on a cluster, as
// history's). Entries expire PresenceConfig.TTL after their last update
// (default 60 s, by the Redis server's clock); PresenceConfig.UserMapping
// keeps exact per-user counts for the channels it names, so that
// PresenceStats reads the unique users in one step. Without it, a node's
// presence stays in memory, per node (Centrifuge's default).
//
// # Map channels
//
// NewMapBroker returns the Broker's centrifuge.MapBroker, for
// node.SetMapBroker: Centrifuge's map subscriptions on the same engine and
// connections. A map channel's state (key → publication), stream, epoch,
// per-key versions and idempotent results live beside it, each call one
// Lua script on its node: Publish (KeyMode, KeyTTL, IdempotencyKey,
// Version and VersionEpoch, RefreshTTLOnSuppress, ExpectedPosition,
// UseDelta), Remove, ReadState (cursor pages, Key, a Revision of another
// epoch gives centrifuge.ErrorUnrecoverablePosition), ReadStream, Stats
// and Clear. Its publications travel on MapConfig.ChannelPrefix + the
// channel, a namespace the Broker then reserves, in frames of their own
// kinds, to the MapBroker's handler; Subscribe and Unsubscribe are the
// engine's, node-grouped on a cluster, with the losses it reports sent to
// the map channels' clients as for any channel. Expired entries are
// removed, with their removal appended and published, by every call
// (a bounded number) and every MapConfig.ExpiryInterval for the channels
// the node is subscribed to. Ordered maps are out of reach: Centrifuge
// v0.40.1 keeps their option and score unexported.
//
// # FORMAT
//
// Every message is one frame, carried as the payload of a shardcast
// message (so inside shardcast's envelope, unless the engine's
// Options.Raw is set):
//
//	frame       = kind body
//	kind        = 0x01 publication | 0x02 join | 0x03 leave | 0x04 control
//	            | 0x05 positioned | 0x06 positioned delta
//	            | 0x07 map | 0x08 map delta                            (one byte)
//	publication = protobuf centrifugal/protocol Publication
//	join, leave = protobuf centrifugal/protocol ClientInfo
//	control     = uvarint(len(target)) target command
//	positioned  = offset ":" epoch ":" publication
//	positioned delta = offset ":" epoch ":" prevlen ":" prev publication
//	map, map delta   = as positioned, positioned delta
//
// Positioned frames carry publications kept in history; the publish
// script writes them, so their numbers are decimal text: offset is the
// publication's stream offset, epoch the stream's epoch (no ':'), prev
// the stream's previous Publication (prevlen bytes, 0 when there is
// none) for a delta. The Publication inside is the one the stream keeps,
// with Time set; its Offset, Epoch, PrevData and Delta are not used.
//
// Publication and ClientInfo are Centrifuge's own client-protocol messages,
// in their Protobuf encoding (MarshalCF), as Centrifuge's Redis broker
// publishes them. A publication carries Data, Info, Tags, Key, Removed,
// Version, and for map-broker fan-out Offset, Epoch and PrevData; Delta is
// set when the publisher asked for delta encoding. Time is not sent: the
// receiver sets Publication.Time from the envelope's publish time
// (Message.PublishedAt), which is what Centrifuge's pub/sub lag measures.
// target is the node ID a control command is for, empty for every node;
// command is Centrifuge's encoded control command, opaque here. Control
// frames appear only on the control channel, map frames only on map
// channels' (MapConfig.ChannelPrefix), the other kinds only on other
// channels. A map frame's position is its channel's stream's (offset 0
// and no epoch on an ephemeral channel) and the previous publication of a
// map delta is the key's previous value; the Publication is the one the
// stream keeps (Key, Removed; a removal carries the removed entry's tags
// unless given its own).
//
// A message that is not such a frame (corrupt, from a foreign publisher, or
// of a kind that does not belong on its channel) is dropped, counted in
// Stats.BadFrames and logged at most once a second; it never reaches
// Centrifuge.
package centrifugebroker
