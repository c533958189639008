package shardcast

import "time"

// NodeStats are the counters of one Redis instance (sharded engine) or
// master (cluster engine), from a broker's point of view. They let an
// operator see whether every node carries its share and whether any path
// to one went silent: compare Received across nodes, and watch Down and
// Reconnects.
type NodeStats struct {
	// Addr is the node's host:port.
	Addr string
	// Published counts publishes (and scripts, and delivery probes) the
	// node accepted on the broker's publishing connection to it; a publish
	// the cluster engine resent after a redirect counts on the node that
	// took it.
	Published uint64
	// Received counts messages read on the broker's subscribe
	// connections to the node; Dropped those of them a full worker queue
	// dropped, BadFrames those that were not envelopes, Stale the copies
	// dropped after a move (see Stats.Stale).
	Received, Dropped, BadFrames, Stale uint64
	// Reconnects counts subscribe connections to the node re-established
	// after a loss; ResubscribeCommands the subscribe commands sent to
	// restore subscriptions.
	Reconnects, ResubscribeCommands uint64
	// Down is how long the broker's subscribe connections to the node have
	// been down in total, the current outage included.
	Down time.Duration
}

// Add adds o's counters to s's: the counters of several connections to
// one node, or of one node listed twice.
func (s *NodeStats) Add(o NodeStats) {
	s.Published += o.Published
	s.Received += o.Received
	s.Dropped += o.Dropped
	s.BadFrames += o.BadFrames
	s.Stale += o.Stale
	s.Reconnects += o.Reconnects
	s.ResubscribeCommands += o.ResubscribeCommands
	s.Down += o.Down
}

// PartitionStats are the counters of one cluster partition.
type PartitionStats struct {
	// Partition is the partition's number.
	Partition int
	// Master is the master that carries it now ("" while its slot has no
	// master).
	Master string
	// Channels is the number of channels subscribed in it.
	Channels int
	// Received, Dropped, BadFrames and Stale are as in NodeStats, for the
	// partition's messages whichever master delivered them.
	Received, Dropped, BadFrames, Stale uint64
	// Interrupted is how long the partition's subscriptions have been
	// interrupted in total, the current interruption included.
	Interrupted time.Duration
}
