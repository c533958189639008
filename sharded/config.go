package sharded

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
)

// Default values applied to a zero Config field.
const (
	DefaultConnsPerShard  = 1
	MaxConnsPerShard      = 16
	DefaultMaxFlushDelay  = 100 * time.Microsecond
	DefaultDialTimeout    = 5 * time.Second
	DefaultReconnectMin   = 50 * time.Millisecond
	DefaultReconnectMax   = 2 * time.Second
	DefaultCommandTimeout = 10 * time.Second
	DefaultHealthInterval = time.Second
	DefaultHealthTimeout  = 3 * time.Second
)

// Config configures a sharded Broker. The zero value of every field except
// Addrs means its default.
type Config struct {
	// Addrs lists the Redis (or Valkey) instances, one per shard, as
	// "host:port" or as redis:// or rediss:// URLs (user, password, TLS and
	// database taken from the URL). The ORDER is a wire contract: a channel
	// lives on shard jump(xxhash64(channel), len(Addrs)), so every node of
	// an application must list the same addresses in the same order.
	// Compare Broker.Fingerprint across nodes to check.
	Addrs []string

	// Options are the settings shared with the cluster engine.
	shardcast.Options

	// ConnsPerShard is the number of subscribe connections per shard
	// (default 1, at most MaxConnsPerShard). Channels are spread over them
	// by hash.
	ConnsPerShard int
	// MaxFlushDelay is how long a publish may wait for others to share its
	// round trip (rueidis auto-pipelining; default 100µs). Negative means
	// no delay.
	MaxFlushDelay time.Duration
	// BatchThreshold is the number of Publish calls in flight on a shard
	// from which publishes wait up to MaxFlushDelay to share a round trip
	// (default 32). Below it each publish is written at once, on a second
	// connection: with few publishers a flush delay only adds latency.
	BatchThreshold int
	// DialTimeout bounds each connection attempt (default 5s).
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// reconnect attempts of a subscribe connection (defaults 50ms and 2s).
	ReconnectMin, ReconnectMax time.Duration
	// CommandTimeout bounds the subscribe commands the broker sends on its
	// own, such as resubscribes after a reconnect (default 10s).
	CommandTimeout time.Duration
	// HealthInterval is how often each subscribe connection is pinged
	// (default 1s); HealthTimeout is how long a ping may take before the
	// connection is treated as dead (default 3s). They catch an instance
	// that froze, or a path that went silent, without closing the socket.
	HealthInterval, HealthTimeout time.Duration
	// Username, Password and TLS apply to every "host:port" address; URL
	// addresses carry their own.
	Username, Password string
	TLS                *tls.Config
}

func (c Config) withDefaults() Config {
	c.Options = c.Options.WithDefaults()
	if c.ConnsPerShard == 0 {
		c.ConnsPerShard = DefaultConnsPerShard
	}
	if c.MaxFlushDelay == 0 {
		c.MaxFlushDelay = DefaultMaxFlushDelay
	} else if c.MaxFlushDelay < 0 {
		c.MaxFlushDelay = 0
	}
	if c.BatchThreshold == 0 {
		c.BatchThreshold = engine.DefaultBatchThreshold
	}
	if c.DialTimeout == 0 {
		c.DialTimeout = DefaultDialTimeout
	}
	if c.ReconnectMin == 0 {
		c.ReconnectMin = DefaultReconnectMin
	}
	if c.ReconnectMax == 0 {
		c.ReconnectMax = DefaultReconnectMax
	}
	if c.ReconnectMax < c.ReconnectMin {
		c.ReconnectMax = c.ReconnectMin
	}
	if c.HealthInterval == 0 {
		c.HealthInterval = DefaultHealthInterval
	}
	if c.HealthTimeout == 0 {
		c.HealthTimeout = DefaultHealthTimeout
	}
	if c.CommandTimeout == 0 {
		c.CommandTimeout = DefaultCommandTimeout
	}
	return c
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: sharded.Config.Addrs is empty", shardcast.ErrInvalidConfig)
	}
	if c.ConnsPerShard > MaxConnsPerShard {
		return fmt.Errorf("%w: ConnsPerShard = %d, at most %d", shardcast.ErrInvalidConfig, c.ConnsPerShard, MaxConnsPerShard)
	}
	if c.HealthInterval < 0 || c.HealthTimeout < 0 {
		return fmt.Errorf("%w: negative HealthInterval or HealthTimeout", shardcast.ErrInvalidConfig)
	}
	if c.ConnsPerShard < 0 || c.BatchThreshold < 0 || c.DialTimeout < 0 || c.ReconnectMin < 0 || c.CommandTimeout < 0 {
		return fmt.Errorf("%w: negative ConnsPerShard, BatchThreshold, DialTimeout, ReconnectMin or CommandTimeout", shardcast.ErrInvalidConfig)
	}
	return c.Options.Validate()
}

// clientOption turns one address into rueidis options.
func (c Config) clientOption(addr string) (rueidis.ClientOption, error) {
	var opt rueidis.ClientOption
	if strings.Contains(addr, "://") {
		var err error
		if opt, err = rueidis.ParseURL(addr); err != nil {
			return opt, fmt.Errorf("%w: address %q: %v", shardcast.ErrInvalidConfig, redact(addr), err)
		}
	} else {
		if addr == "" || !strings.Contains(addr, ":") {
			return opt, fmt.Errorf("%w: address %q is not host:port or a redis:// URL", shardcast.ErrInvalidConfig, addr)
		}
		opt.InitAddress = []string{addr}
		opt.Username, opt.Password, opt.TLSConfig = c.Username, c.Password, c.TLS
	}
	opt.ForceSingleClient = true // each address is one isolated instance
	opt.DisableCache = true
	opt.MaxFlushDelay = c.MaxFlushDelay
	opt.Dialer.Timeout = c.DialTimeout
	return opt, nil
}

// redact hides a URL's password in error messages.
func redact(addr string) string {
	at := strings.LastIndex(addr, "@")
	scheme := strings.Index(addr, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return addr
	}
	return addr[:scheme+3] + "…" + addr[at:]
}
