package sharded

import (
	"fmt"

	"github.com/shardcast/shardcast"
)

// Config configures a sharded Broker. The zero value of every field except
// Addrs means its default.
type Config struct {
	// Addrs lists the Redis (or Valkey) instances, one per shard, as
	// "host:port" or as redis:// or rediss:// URLs (user, password and TLS
	// taken from the URL; a database number is ignored, Pub/Sub has none).
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
}

func (c Config) validate() error {
	if len(c.Addrs) == 0 {
		return fmt.Errorf("%w: sharded.Config.Addrs is empty", shardcast.ErrInvalidConfig)
	}
	if err := c.Conn.Validate(); err != nil {
		return err
	}
	return c.Options.Validate()
}
