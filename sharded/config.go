package sharded

import (
	"fmt"
	"slices"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/relayout"
)

// DefaultHandoverLimit is Config.HandoverLimit's default.
const DefaultHandoverLimit = relayout.DefaultHandoverLimit

// Config configures a sharded Broker. The zero value of every field except
// Addrs means its default.
type Config struct {
	// Addrs lists the Redis (or Valkey) instances, one per shard, as
	// "host:port" or as redis:// or rediss:// URLs (user, password and TLS
	// taken from the URL; a database number is ignored, Pub/Sub has none).
	// A shard may also be a master that Sentinels monitor, as
	// redis+sentinel://[user:password@]host:port[,host:port…]/master-name
	// (rediss+sentinel:// for TLS to the data nodes; the credentials are
	// the data nodes', the Sentinels are asked without any): the broker
	// asks the Sentinels for the master, checks each connection with ROLE,
	// follows failovers (reported as EventInterrupted then EventRestored
	// for the shard's channels), and names the shard "sentinel/" and the
	// master name in Fingerprint and the layout record, so a failover
	// changes neither.
	// The ORDER is a wire contract: a channel lives on shard
	// jump(xxhash64(channel), len(Addrs)), so every node of an application
	// must list the same addresses in the same order. Compare
	// Broker.Fingerprint across nodes to check.
	Addrs []string

	// Options are the settings shared with the cluster engine: the
	// Handler, events, workers, batching and payload limits.
	Options shardcast.Options
	// Conn says how to reach the instances and keep the connections
	// healthy: credentials, TLS, subscribe connections per instance,
	// timeouts and backoff.
	Conn shardcast.ConnOptions

	// Agreement configures the layout record that keeps brokers with
	// different instance lists from running side by side (on by
	// default; see shardcast.Agreement). Lists are compared by their
	// host:port as configured, so every node must name an instance the
	// same way: not by DNS name on some nodes and by IP, or through a
	// proxy, on others (or turn the record off).
	Agreement shardcast.Agreement
	// ControlAddr is the Redis that holds the layout record, in the form
	// of Addrs (default: Addrs[0]). Brokers are compared only with
	// brokers that keep their record on the same instance under the same
	// Agreement.App, so when instance lists may differ in their first
	// entry, set it to an instance every list shares, or to one outside
	// the lists. It need not be one of Addrs.
	ControlAddr string

	// SubscribeOn says which node of each Sentinel shard the broker
	// subscribes on (default Masters); a host:port shard is always
	// subscribed on itself. With Replicas, delivery probes are on
	// (Conn.ProbeInterval defaults to shardcast.DefaultRelayProbeInterval;
	// then only the connections to replicas are probed) and a
	// subscription a replica confirms is reported Restored only once a
	// probe came back through it.
	SubscribeOn SubscribeOn

	// HandoverLimit bounds the messages the broker holds back during an
	// online re-layout (default DefaultHandoverLimit): those of moving
	// channels that arrive under the new layout before the old one
	// drained (see Relayout). Past it, the held messages of the fullest
	// wait are delivered at once and an EventRelayout of phase
	// shardcast.PhaseHandoverFull names their channels.
	HandoverLimit int
	// BarrierTimeout bounds how long the broker waits for the barriers of
	// a re-layout's drain phase (default 3 Agreement.Heartbeat, at least
	// 2s) before it delivers what it held back and reports an
	// EventRelayout of phase shardcast.PhaseBarrierTimeout, and how long
	// it holds messages back while the re-layout cannot move on at all
	// (shardcast.PhaseStalled).
	BarrierTimeout time.Duration
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: sharded.Config.Addrs is empty", shardcast.ErrInvalidConfig)
	}
	if err := c.Conn.Validate(); err != nil {
		return err
	}
	if err := c.Agreement.Validate(); err != nil {
		return err
	}
	if c.SubscribeOn != Masters && c.SubscribeOn != Replicas {
		return fmt.Errorf("%w: sharded.Config.SubscribeOn %v", shardcast.ErrInvalidConfig, c.SubscribeOn)
	}
	if c.SubscribeOn == Replicas && !slices.ContainsFunc(c.Addrs, redisaddr.IsSentinel) {
		return fmt.Errorf("%w: sharded.Config.SubscribeOn Replicas needs a Sentinel shard (redis+sentinel://); host:port shards are subscribed on themselves", shardcast.ErrInvalidConfig)
	}
	if c.HandoverLimit < 0 || c.BarrierTimeout < 0 {
		return fmt.Errorf("%w: sharded.Config.HandoverLimit and BarrierTimeout may not be negative", shardcast.ErrInvalidConfig)
	}
	// Two entries for one instance would give it two shares of the
	// channels, and make every channel's place depend on how it is
	// written.
	if err := redisaddr.Distinct("sharded.Config.Addrs", c.Addrs); err != nil {
		return err
	}
	if c.ControlAddr != "" {
		if _, err := redisaddr.Parse(c.ControlAddr, engine.Login(c.Conn)); err != nil {
			return fmt.Errorf("%w (sharded.Config.ControlAddr)", err)
		}
	}
	return c.Options.Validate()
}

// SubscribeOn says which node of a Sentinel shard a broker subscribes on.
// Publishing always goes to the master. Spreading subscriptions over the
// replicas spreads the fan-out: the master sends each PUBLISH to its
// replicas once, and each writes it to the subscribers it holds.
type SubscribeOn int

const (
	// Masters subscribes on each shard's master (the default).
	Masters SubscribeOn = iota
	// Replicas subscribes on one of each Sentinel shard's replicas, chosen
	// per broker so that a fleet spreads evenly over them; on the master
	// while the shard has no replica Sentinel counts healthy.
	Replicas
)

// String returns the constant's name.
func (s SubscribeOn) String() string {
	switch s {
	case Masters:
		return "Masters"
	case Replicas:
		return "Replicas"
	}
	return fmt.Sprintf("SubscribeOn(%d)", int(s))
}
