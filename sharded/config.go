package sharded

import (
	"crypto/tls"
	"fmt"
	"strings"
	"time"

	"github.com/redis/rueidis"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Default values applied to a zero Config field.
const (
	DefaultConnsPerShard  = 1
	MaxConnsPerShard      = 16
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
	// "host:port" or as redis:// or rediss:// URLs (user, password and TLS
	// taken from the URL; a database number is ignored, Pub/Sub has none).
	// The ORDER is a wire contract: a channel
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
	// DialTimeout bounds each connection attempt (default 5s).
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// reconnect attempts of a subscribe connection (defaults 50ms and 2s).
	// After a failed dial of the publishing connection, publishes fail at
	// once for ReconnectMin before it is dialled again.
	ReconnectMin, ReconnectMax time.Duration
	// CommandTimeout bounds the subscribe commands the broker sends on its
	// own, such as resubscribes after a reconnect (default 10s).
	CommandTimeout time.Duration
	// HealthInterval is how often each subscribe connection is pinged
	// (default 1s); HealthTimeout is how long a ping may take before the
	// connection is treated as dead (default 3s). They catch an instance
	// that froze, or a path that went silent, without closing the socket.
	// HealthTimeout also bounds the publishing connection: one write to it
	// (a Publish doing that write may outlast its ctx by up to this much),
	// and how long its oldest publish may go unanswered before it is
	// dropped.
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
	if c.ConnsPerShard < 0 || c.DialTimeout < 0 || c.ReconnectMin < 0 || c.CommandTimeout < 0 {
		return fmt.Errorf("%w: negative ConnsPerShard, DialTimeout, ReconnectMin or CommandTimeout", shardcast.ErrInvalidConfig)
	}
	return c.Options.Validate()
}

// dialer turns one address into how to reach it. URLs are parsed by
// rueidis, so they mean what they mean to other rueidis users (the
// database number is irrelevant to Pub/Sub and ignored).
func (c Config) dialer(addr string) (subconn.Dialer, error) {
	if strings.Contains(addr, "://") {
		scheme := addr[:strings.Index(addr, "://")]
		if scheme != "redis" && scheme != "rediss" && scheme != "valkey" && scheme != "valkeys" {
			return subconn.Dialer{}, fmt.Errorf("%w: address %q: scheme %q, want redis:// or rediss://", shardcast.ErrInvalidConfig, redact(addr), scheme)
		}
		opt, err := rueidis.ParseURL(addr)
		if err != nil {
			return subconn.Dialer{}, fmt.Errorf("%w: address %q: %v", shardcast.ErrInvalidConfig, redact(addr), err)
		}
		d := subconn.FromOption(opt.InitAddress[0], opt)
		d.Timeout = c.DialTimeout
		return d, nil
	}
	if addr == "" || !strings.Contains(addr, ":") {
		return subconn.Dialer{}, fmt.Errorf("%w: address %q is not host:port or a redis:// URL", shardcast.ErrInvalidConfig, addr)
	}
	return subconn.Dialer{Addr: addr, Username: c.Username, Password: c.Password, TLS: c.TLS, Timeout: c.DialTimeout}, nil
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
