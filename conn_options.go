package shardcast

import (
	"crypto/tls"
	"fmt"
	"time"
)

// ConnOptions say how an engine reaches Redis and keeps its connections
// healthy. Both engines take them as Config.Conn; the zero value is
// usable: every zero field takes its default.
type ConnOptions struct {
	// Username, Password and TLS apply to every "host:port" address (and
	// to every node a cluster broker discovers). An address given as a
	// redis:// or rediss:// URL carries its own. A connection logs in
	// (AUTH) when either is set: a Username alone suits an ACL user with
	// nopass.
	Username, Password string
	TLS                *tls.Config

	// SentinelUsername, SentinelPassword and SentinelTLS are how the
	// sharded engine logs in to the Sentinels of its redis+sentinel://
	// addresses, for Sentinels that require a password (requirepass or
	// an ACL user) or take TLS only; the URL's credentials and scheme are
	// the data nodes'. By default Sentinels are reached in plain text
	// without AUTH. The cluster engine has no Sentinels and ignores them.
	SentinelUsername, SentinelPassword string
	SentinelTLS                        *tls.Config

	// SubscribeConns is the number of subscribe connections a broker holds
	// to each Redis instance or master (default 1, at most
	// MaxSubscribeConns). Channels are spread over them, so that one busy
	// node's messages can be read by several goroutines.
	SubscribeConns int

	// DialTimeout bounds each connection attempt, the TCP and TLS
	// handshakes and the login (default 5s).
	DialTimeout time.Duration
	// ReconnectMin and ReconnectMax bound the exponential backoff between
	// reconnect attempts of a subscribe connection (defaults 50ms and 2s).
	// After a failed dial of a publishing connection, publishes to that
	// node fail fast (or take the cluster engine's redirect path) for
	// ReconnectMin before it is dialled again.
	ReconnectMin, ReconnectMax time.Duration
	// RecoveryInterval is how often interrupted subscriptions are retried,
	// and the cluster slot map polled, while something is interrupted
	// (default 250ms).
	RecoveryInterval time.Duration
	// CommandTimeout bounds each subscribe command a broker sends on its
	// own: the commands of a resubscribe after a reconnect or a move (a
	// resubscribe of many channels may take longer in all; one command
	// that times out ends it, to be retried), and the unsubscribes that
	// finish a call whose ctx ended (default 10s).
	CommandTimeout time.Duration

	// HealthInterval is how often each subscribe connection is pinged
	// (default 1s); HealthTimeout is how long a ping may go unanswered
	// before the connection is treated as dead (default 3s). Together they
	// catch a server that froze, or a path that went silent, without
	// closing the socket.
	HealthInterval, HealthTimeout time.Duration

	// WriteTimeout bounds one write to a publishing connection (default
	// 3s): a write fails after between WriteTimeout and 1.5 × WriteTimeout
	// (one deadline serves many writes). The caller doing that write
	// cannot leave before it ends, so a Publish may outlast its ctx by up
	// to that much when the server stops reading.
	WriteTimeout time.Duration
	// ProbeInterval, when set, turns delivery probes on: a subscribing
	// broker publishes a small probe through every partition (cluster) or
	// subscribe connection (sharded) that holds its subscriptions, once
	// per interval, on a channel of its own, and expects it back on its
	// own subscribe connection within ProbeTimeout (default ProbeInterval).
	// A probe that does not come back marks the path silent: its channels
	// are reported EventInterrupted (Err ErrSilentPath) and resubscribed,
	// and EventRestored follows once a probe returns. Probes catch what
	// health pings cannot: a connection that answers PING while some
	// subscription's messages no longer arrive. Off by default; a
	// SubscribeOn other than Masters turns it on for connections to
	// replicas only. On a connection to a replica, which relays all its
	// paths from one stream, one probe per interval speaks for all of them.
	ProbeInterval, ProbeTimeout time.Duration

	// ReplyTimeout is how long the oldest publish on a publishing
	// connection may go unanswered before the connection is dropped as
	// silent (default 3s). A cluster broker also keeps the publishing
	// connection of a master that lost all its slots open this long, for
	// the replies in flight.
	ReplyTimeout time.Duration
}

// WithDefaults returns a copy of o with every zero field set to its
// default. Negative values are reported by Validate.
func (o ConnOptions) WithDefaults() ConnOptions {
	if o.SubscribeConns == 0 {
		o.SubscribeConns = DefaultSubscribeConns
	}
	for _, d := range []struct {
		field *time.Duration
		def   time.Duration
	}{
		{&o.DialTimeout, DefaultDialTimeout},
		{&o.ReconnectMin, DefaultReconnectMin},
		{&o.ReconnectMax, DefaultReconnectMax},
		{&o.RecoveryInterval, DefaultRecoveryInterval},
		{&o.CommandTimeout, DefaultCommandTimeout},
		{&o.HealthInterval, DefaultHealthInterval},
		{&o.HealthTimeout, DefaultHealthTimeout},
		{&o.WriteTimeout, DefaultWriteTimeout},
		{&o.ReplyTimeout, DefaultReplyTimeout},
	} {
		if *d.field == 0 {
			*d.field = d.def
		}
	}
	if o.ProbeTimeout == 0 {
		o.ProbeTimeout = o.ProbeInterval
	}
	if o.ReconnectMax < o.ReconnectMin {
		o.ReconnectMax = o.ReconnectMin
	}
	return o
}

// Validate reports a setting that cannot work, wrapped in ErrInvalidConfig.
func (o ConnOptions) Validate() error {
	if o.SubscribeConns < 0 || o.SubscribeConns > MaxSubscribeConns {
		return fmt.Errorf("%w: SubscribeConns = %d, want 0..%d", ErrInvalidConfig, o.SubscribeConns, MaxSubscribeConns)
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{
		{"DialTimeout", o.DialTimeout},
		{"ReconnectMin", o.ReconnectMin},
		{"ReconnectMax", o.ReconnectMax},
		{"RecoveryInterval", o.RecoveryInterval},
		{"CommandTimeout", o.CommandTimeout},
		{"HealthInterval", o.HealthInterval},
		{"HealthTimeout", o.HealthTimeout},
		{"WriteTimeout", o.WriteTimeout},
		{"ReplyTimeout", o.ReplyTimeout},
		{"ProbeInterval", o.ProbeInterval},
		{"ProbeTimeout", o.ProbeTimeout},
	} {
		if d.v < 0 {
			return fmt.Errorf("%w: %s = %v, want >= 0", ErrInvalidConfig, d.name, d.v)
		}
	}
	return nil
}
