package cluster

import (
	"fmt"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Default values applied to a zero Config field.
const (
	DefaultPartitions       = 128
	DefaultTopologyInterval = 30 * time.Second
	DefaultSlotsTimeout     = time.Second
	// DefaultRelayProbeInterval is Conn.ProbeInterval when it is zero and
	// SubscribeOn is not Masters.
	DefaultRelayProbeInterval = shardcast.DefaultRelayProbeInterval
)

// Config configures a cluster Broker. Every zero field except Addrs means
// its default.
type Config struct {
	// Addrs are seed nodes of the cluster, as "host:port" or as redis://
	// or rediss:// URLs (user, password and TLS taken from the URL and
	// used for every node; all URL seeds must agree on them). Any
	// reachable node is enough; the rest is discovered.
	Addrs []string
	// Partitions is the number of partitions channels are spread over
	// (default 128). It must be one of shardcast.SupportedPartitions(), and
	// every node of an application must use the same value and Prefix:
	// compare Broker.Fingerprint across nodes.
	Partitions int
	// Prefix is put in front of every channel name on the wire, after the
	// partition tag: "{tag}." + Prefix + channel.
	Prefix string
	// SubscribeOn says which node of each shard the broker subscribes on:
	// Masters (the default), Replicas or AllNodes. Publishing always goes
	// to masters. A replica delivers what its master relays over the
	// cluster bus, and can go quiet while the master is healthy (cut off
	// from it, or during a failover): with other than Masters, delivery
	// probes are on (Conn.ProbeInterval defaults to
	// DefaultRelayProbeInterval; then only the connections to replicas are
	// probed, one probe per connection per interval), a subscription a
	// replica confirms is reported Restored only once a probe came back
	// through it, and a node whose connection was lost or whose probes
	// stopped is avoided for 10 s while its shard has another.
	SubscribeOn SubscribeOn

	// Options are the settings shared with the sharded engine: the
	// Handler, events, workers, batching and payload limits.
	Options shardcast.Options
	// Conn says how to reach the nodes and keep the connections healthy:
	// credentials, TLS, subscribe connections per master (a master's
	// partitions are spread over them by partition number), timeouts and
	// backoff. Conn.RecoveryInterval is also how often the slot map is
	// polled while some subscriptions are interrupted or a master is slow
	// to answer its health ping.
	Conn shardcast.ConnOptions

	// TopologyInterval is how often the slot map is polled while all is
	// well (default 30s), by every broker, publish-only ones included.
	// Connection errors and server-pushed unsubscribes trigger an immediate
	// poll; a failed or redirected publish triggers one no sooner than
	// Conn.RecoveryInterval after the last.
	TopologyInterval time.Duration
	// SlotsTimeout bounds how long one node may take to answer CLUSTER
	// SLOTS (default 1s). A node that has not answered within 200 ms (or
	// SlotsTimeout, if shorter) is left to answer while the next known
	// node is asked too; the first answer wins.
	SlotsTimeout time.Duration

	// Agreement configures the layout record that keeps brokers with
	// different partition counts or prefixes from running side by side
	// (on by default; see shardcast.Agreement). The record lives in the
	// cluster, in the slot of its hash tag.
	Agreement shardcast.Agreement

	// HandoverLimit bounds the messages the broker holds back during an
	// online re-layout (default 65,536): those of moving channels that
	// arrive under the new layout before the old one drained (see
	// Relayout). Past it, the held messages of the fullest wait are
	// delivered at once and an EventRelayout of phase
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

// settings is a validated Config with defaults applied, and how to reach
// each node.
type settings struct {
	Config
	seeds []string // host:port of each seed
	// node holds the credentials and TLS of every node: those of the
	// URL seeds, or Conn's.
	node subconn.Dialer
	// probeRelaysOnly: SubscribeOn turned probes on, for the replicas'
	// wires only (see engine.Core.StartProbes).
	probeRelaysOnly bool
}

func (c Config) settings() (settings, error) {
	if len(c.Addrs) == 0 {
		return settings{}, fmt.Errorf("%w: cluster.Config.Addrs is empty", shardcast.ErrInvalidConfig)
	}
	if c.HandoverLimit < 0 || c.BarrierTimeout < 0 {
		return settings{}, fmt.Errorf("%w: cluster.Config.HandoverLimit and BarrierTimeout may not be negative", shardcast.ErrInvalidConfig)
	}
	if c.SubscribeOn < Masters || c.SubscribeOn > AllNodes {
		return settings{}, fmt.Errorf("%w: cluster.Config.SubscribeOn = %v, want Masters, Replicas or AllNodes", shardcast.ErrInvalidConfig, c.SubscribeOn)
	}
	if c.TopologyInterval < 0 || c.SlotsTimeout < 0 {
		return settings{}, fmt.Errorf("%w: TopologyInterval = %v, SlotsTimeout = %v, want >= 0", shardcast.ErrInvalidConfig, c.TopologyInterval, c.SlotsTimeout)
	}
	if err := c.Conn.Validate(); err != nil {
		return settings{}, err
	}
	if err := c.Options.Validate(); err != nil {
		return settings{}, err
	}
	if err := c.Agreement.Validate(); err != nil {
		return settings{}, err
	}
	relaysOnly := c.SubscribeOn != Masters && c.Conn.ProbeInterval == 0
	if relaysOnly {
		c.Conn.ProbeInterval = DefaultRelayProbeInterval
	}
	c.Options, c.Conn = c.Options.WithDefaults(), c.Conn.WithDefaults()
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	if c.TopologyInterval == 0 {
		c.TopologyInterval = DefaultTopologyInterval
	}
	if c.SlotsTimeout == 0 {
		c.SlotsTimeout = DefaultSlotsTimeout
	}
	// A seed listed twice is most often a typo for another node.
	if err := redisaddr.Distinct("cluster.Config.Addrs", c.Addrs); err != nil {
		return settings{}, err
	}
	s := settings{Config: c, probeRelaysOnly: relaysOnly}
	for i, a := range c.Addrs {
		d, err := redisaddr.ParseAddr(a, engine.Login(c.Conn))
		if err != nil {
			return settings{}, err
		}
		if i > 0 && (d.Username != s.node.Username || d.Password != s.node.Password || (d.TLS == nil) != (s.node.TLS == nil)) {
			return settings{}, fmt.Errorf("%w: seed %q: every seed must use the same credentials and TLS", shardcast.ErrInvalidConfig, redisaddr.Redact(a))
		}
		s.node = d
		s.seeds = append(s.seeds, d.Addr)
	}
	return s, nil
}

// dialer returns how to reach the node at addr.
func (s settings) dialer(addr string) subconn.Dialer {
	d := s.node
	d.Addr = addr
	return d
}

// subDialer returns how to reach the node at addr to subscribe: READONLY
// when the broker may subscribe on replicas.
func (s settings) subDialer(addr string) subconn.Dialer {
	d := s.dialer(addr)
	d.ReadOnly = s.SubscribeOn != Masters
	return d
}

// avoidFor is how long a node whose subscribe connection was lost, or
// whose probes stopped coming back, is avoided while its shard has
// another (SubscribeOn other than Masters): long enough for a failing
// replica to be marked failed and left out of the slot map.
const avoidFor = 10 * time.Second
