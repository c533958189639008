package engine

import (
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/redisaddr"
)

// Login is what the address parser takes from o (see redisaddr.Login),
// which lives below the root package and so cannot read ConnOptions.
func Login(o shardcast.ConnOptions) redisaddr.Login {
	return redisaddr.Login{
		Username: o.Username, Password: o.Password, TLS: o.TLS,
		SentinelUsername: o.SentinelUsername, SentinelPassword: o.SentinelPassword, SentinelTLS: o.SentinelTLS,
		DialTimeout: o.DialTimeout,
	}
}

// URLDefaults is redisaddr.URLDefaults on o: o with the credentials and
// TLS the URL addresses among addrs agree on, when o sets none itself.
func URLDefaults(addrs []string, o shardcast.ConnOptions) shardcast.ConnOptions {
	l := redisaddr.URLDefaults(addrs, Login(o))
	o.Username, o.Password, o.TLS = l.Username, l.Password, l.TLS
	return o
}
