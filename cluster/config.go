package cluster

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
)

// Default values applied to a zero Config field.
const (
	DefaultPartitions       = 128
	DefaultConnsPerMaster   = 1
	MaxConnsPerMaster       = 16
	DefaultTopologyInterval = 30 * time.Second
	DefaultRecoveryInterval = 250 * time.Millisecond
	DefaultHealthInterval   = time.Second
	DefaultHealthTimeout    = 3 * time.Second
	DefaultDialTimeout      = 5 * time.Second
	DefaultReconnectMin     = 50 * time.Millisecond
	DefaultReconnectMax     = 2 * time.Second
	DefaultCommandTimeout   = 10 * time.Second
)

// Config configures a cluster Broker. Every zero field except Addrs means
// its default.
type Config struct {
	// Addrs are seed nodes of the cluster, "host:port". Any reachable node
	// is enough; the rest is discovered.
	Addrs []string
	// Partitions is the number of partitions channels are spread over
	// (default 128). It must be one of shardcast.SupportedPartitions, and
	// every node of an application must use the same value and Prefix:
	// compare Broker.Fingerprint across nodes.
	Partitions int
	// Prefix is put in front of every channel name on the wire, after the
	// partition tag: "{tag}." + Prefix + channel.
	Prefix string

	// Options are the settings shared with the sharded engine.
	shardcast.Options

	// ConnsPerMaster is the number of subscribe connections the broker
	// holds to each master (default 1, at most MaxConnsPerMaster). A
	// master's partitions are spread over them by partition number, so one
	// busy master's messages can be read by several goroutines.
	ConnsPerMaster int

	// TopologyInterval is how often the slot map is polled while all is
	// well (default 30s), by every broker, publish-only ones included.
	// Connection errors and server-pushed unsubscribes trigger an immediate
	// poll; a failed or redirected publish triggers one no sooner than
	// RecoveryInterval after the last.
	TopologyInterval time.Duration
	// RecoveryInterval is how often the slot map is polled while some
	// subscriptions are interrupted (default 250ms).
	RecoveryInterval time.Duration
	// HealthInterval is how often each subscribe connection is pinged
	// (default 1s); HealthTimeout is how long a ping may take before the
	// connection is treated as dead (default 3s). They catch a master that
	// froze without closing its sockets: a ping still unanswered after one
	// HealthInterval makes the broker poll the slot map every
	// RecoveryInterval, so a frozen master's partitions follow its promoted
	// replica as soon as the cluster shows it, usually before HealthTimeout.
	// HealthTimeout also bounds a master's publishing connection: one write
	// to it (a Publish doing that write may outlast its ctx by up to this
	// much), and how long its oldest publish may go unanswered before the
	// connection is dropped; and it is how long the publishing connection
	// of a master that lost all its slots stays open for replies in flight.
	HealthInterval, HealthTimeout time.Duration
	// DialTimeout bounds each connection attempt (default 5s).
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the backoff between reconnect
	// attempts of a subscribe connection (defaults 50ms and 2s). After a
	// failed dial of a publishing connection, publishes to that master go
	// through the fallback path for ReconnectMin before it is dialled again.
	ReconnectMin, ReconnectMax time.Duration
	// CommandTimeout bounds subscribe commands the broker sends on its own
	// (default 10s).
	CommandTimeout time.Duration
	// Username, Password and TLS are used for every node.
	Username, Password string
	TLS                *tls.Config
}

func (c Config) withDefaults() Config {
	c.Options = c.Options.WithDefaults()
	def := func(d *time.Duration, v time.Duration) {
		if *d == 0 {
			*d = v
		}
	}
	if c.ConnsPerMaster == 0 {
		c.ConnsPerMaster = DefaultConnsPerMaster
	}
	if c.Partitions == 0 {
		c.Partitions = DefaultPartitions
	}
	def(&c.TopologyInterval, DefaultTopologyInterval)
	def(&c.RecoveryInterval, DefaultRecoveryInterval)
	def(&c.HealthInterval, DefaultHealthInterval)
	def(&c.HealthTimeout, DefaultHealthTimeout)
	def(&c.DialTimeout, DefaultDialTimeout)
	def(&c.ReconnectMin, DefaultReconnectMin)
	def(&c.ReconnectMax, DefaultReconnectMax)
	def(&c.CommandTimeout, DefaultCommandTimeout)
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	return c
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: cluster.Config.Addrs is empty", shardcast.ErrInvalidConfig)
	}
	for _, a := range c.Addrs {
		if !strings.Contains(a, ":") || strings.Contains(a, "://") {
			return fmt.Errorf("%w: seed address %q is not host:port", shardcast.ErrInvalidConfig, a)
		}
	}
	for _, d := range []time.Duration{c.TopologyInterval, c.RecoveryInterval, c.HealthInterval,
		c.HealthTimeout, c.DialTimeout, c.ReconnectMin, c.CommandTimeout} {
		if d < 0 {
			return fmt.Errorf("%w: negative interval or timeout", shardcast.ErrInvalidConfig)
		}
	}
	if c.ConnsPerMaster < 0 || c.ConnsPerMaster > MaxConnsPerMaster {
		return fmt.Errorf("%w: ConnsPerMaster = %d, want 0..%d", shardcast.ErrInvalidConfig, c.ConnsPerMaster, MaxConnsPerMaster)
	}
	return c.Options.Validate()
}

func (c Config) clientOption() rueidis.ClientOption {
	opt := rueidis.ClientOption{
		InitAddress:  c.Addrs,
		Username:     c.Username,
		Password:     c.Password,
		TLSConfig:    c.TLS,
		DisableCache: true,
		// rueidis carries only the publishes shardcast's own connections
		// cannot (a redirect, a master that is gone); it refreshes its map
		// on MOVED and on connection errors by itself, so a slow periodic
		// scan is enough (each asks several nodes for CLUSTER SLOTS).
		ClusterOption: rueidis.ClusterOption{ShardsRefreshInterval: c.TopologyInterval},
	}
	opt.Dialer.Timeout = c.DialTimeout
	return opt
}
