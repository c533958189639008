package shardcast

import (
	"crypto/tls"

	"github.com/shardcast/shardcast/internal/redisaddr"
)

// Endpoint is one configured address as a broker dials it: where to
// connect and how to log in.
type Endpoint struct {
	// Addr is the host:port to dial; a URL without a port gets 6379.
	Addr string
	// Username and Password are sent with AUTH when either is set.
	Username, Password string
	// TLS, when set, wraps the connection: a rediss:// URL always sets
	// it, a host:port address when ConnOptions.TLS does. An empty
	// ServerName is the host of Addr.
	TLS *tls.Config
}

// ParseAddr parses one address in the form both engines' Config.Addrs
// take: "host:port", reached with conn's Username, Password and TLS, or
// a URL, redis://[user[:password]@]host[:port][/db] (rediss:// for TLS;
// valkey:// and valkeys:// are the same), which carries its own
// credentials (a rediss:// URL takes a copy of conn.TLS, when set, for
// its certificates). It is the
// engines' own parser, so that a tool reaching the same nodes as the
// brokers (an operator's command, a health check) reaches them the same
// way, and refuses what they refuse: anything else, a query in the URL,
// or a redis+sentinel:// address (only sharded.Config.Addrs takes one),
// with an error wrapping ErrInvalidConfig that does not show the
// password.
func ParseAddr(addr string, conn ConnOptions) (Endpoint, error) {
	d, err := redisaddr.ParseAddr(addr, redisaddr.Login{Username: conn.Username, Password: conn.Password, TLS: conn.TLS})
	if err != nil {
		return Endpoint{}, err
	}
	return Endpoint{Addr: d.Addr, Username: d.Username, Password: d.Password, TLS: d.TLS}, nil
}

// CheckAddrs checks a list of addresses as the engines check their
// Config.Addrs, before anything is dialled: it returns an error wrapping
// ErrInvalidConfig for the first entry that does not parse (see
// ParseAddr; redis+sentinel:// URLs are taken, as sharded.Config.Addrs
// takes them) and for two entries that reach the same instance, however
// each is written (host:port or URL, a host name in any case, an IP
// address in any of its spellings). Names only DNS could equate
// (localhost and 127.0.0.1) stay distinct. field names the list in the
// message, such as "-shards" for a command-line flag.
func CheckAddrs(field string, addrs []string) error {
	return redisaddr.Distinct(field, addrs)
}
