// Package redisaddr parses the addresses a broker is configured with
// (host:port and redis:// URLs) into how to dial them. The engines and
// the layout generator share it, and the root exports it to tools (the
// operator's command among them) as shardcast.ParseAddr and CheckAddrs,
// so one address means the same everywhere.
package redisaddr

import (
	"crypto/tls"
	"fmt"
	"net"
	"net/url"
	"strconv"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/shardcast/shardcast/internal/badconfig"
	"github.com/shardcast/shardcast/internal/subconn"
)

// Login is what reaching a configured address takes from a broker's
// connection options (shardcast.ConnOptions, whose fields of the same
// names these are; the kit's engine.Login converts): the credentials and
// TLS of host:port addresses, those of the Sentinels, and the dial
// timeout.
type Login struct {
	Username, Password                 string
	TLS                                *tls.Config
	SentinelUsername, SentinelPassword string
	SentinelTLS                        *tls.Config
	DialTimeout                        time.Duration
}

// ParseAddr turns one configured address into how to reach it. An address
// is either "host:port", reached with o's credentials and TLS, or a URL:
// redis://[user[:password]@]host[:port][/db] (rediss:// for TLS; valkey://
// and valkeys:// are the same), without a query or fragment. A URL
// carries its own credentials and TLS
// (o.TLS, if set, supplies the certificates for rediss://); its database
// number is ignored, Pub/Sub has none. Anything else is ErrInvalidConfig,
// and so is a host:port whose host holds a character no host name or IP
// address does (a slash, as in the mistyped "redis//h:6379") or whose
// port is not a number from 1 to 65535.
func ParseAddr(addr string, o Login) (subconn.Dialer, error) {
	d := subconn.Dialer{Timeout: o.DialTimeout}
	if !strings.Contains(addr, "://") {
		host, port, err := net.SplitHostPort(addr)
		if err != nil || addr == "" {
			return d, fmt.Errorf("%w: address %q is not host:port or a redis:// URL", badconfig.Err, addr)
		}
		if err := checkPlain(addr, host, port); err != nil {
			return d, err
		}
		d.Addr, d.Username, d.Password, d.TLS = addr, o.Username, o.Password, o.TLS
		return d, nil
	}
	u, err := url.Parse(addr)
	if err != nil {
		return d, fmt.Errorf("%w: address %q: not a URL", badconfig.Err, Redact(addr))
	}
	switch u.Scheme {
	case "redis", "valkey":
	case "rediss", "valkeys":
		d.TLS = &tls.Config{}
		if o.TLS != nil {
			d.TLS = o.TLS.Clone()
		}
	case "redis+sentinel", "rediss+sentinel", "valkey+sentinel", "valkeys+sentinel":
		return d, fmt.Errorf("%w: address %q names a master through Sentinel, which only sharded.Config.Addrs takes", badconfig.Err, Redact(addr))
	default:
		return d, fmt.Errorf("%w: address %q: scheme %q, want redis:// or rediss://", badconfig.Err, Redact(addr), u.Scheme)
	}
	if u.RawQuery != "" || u.ForceQuery || u.Fragment != "" {
		// Options in a query (timeouts, protocol) would be dropped without
		// a word, and the layout spec's address grammar has none.
		return d, fmt.Errorf("%w: address %q: a query or fragment is not supported; set ConnOptions instead", badconfig.Err, Redact(addr))
	}
	if u.Host == "" || u.Hostname() == "" {
		return d, fmt.Errorf("%w: address %q has no host", badconfig.Err, Redact(addr))
	}
	port := u.Port()
	if port == "" {
		port = "6379"
	} else if err := checkPort(addr, port); err != nil {
		return d, err
	}
	d.Addr = net.JoinHostPort(u.Hostname(), port)
	if u.User != nil {
		d.Username = u.User.Username()
		d.Password, _ = u.User.Password()
	}
	return d, nil
}

// checkPlain refuses a host:port address whose host could not be a host
// name or IP address, or whose port is not a number from 1 to 65535:
// most often a mistyped URL, "redis//h:6379", which net.SplitHostPort
// splits into the host "redis//h". An empty host or port stays accepted,
// as the layout spec's address vectors accept them.
func checkPlain(addr, host, port string) error {
	if i := strings.IndexFunc(host, badHostRune); i >= 0 {
		r, _ := utf8.DecodeRuneInString(host[i:])
		hint := ""
		if r == '/' || r == '\\' {
			hint = "; a URL is written redis://host:port"
		}
		return fmt.Errorf("%w: address %q: host %q holds %q, which no host name or IP address does%s",
			badconfig.Err, addr, host, r, hint)
	}
	if port == "" {
		return nil
	}
	return checkPort(addr, port)
}

// checkPort refuses a port that is not a decimal number from 1 to 65535.
func checkPort(addr, port string) error {
	n, err := strconv.Atoi(port)
	if err != nil || n < 1 || n > 65535 || port[0] < '0' || port[0] > '9' {
		return fmt.Errorf("%w: address %q: port %q is not a number from 1 to 65535", badconfig.Err, Redact(addr), port)
	}
	return nil
}

// badHostRune reports the characters no host name or IP literal holds:
// those of URL syntax (a slash, a backslash, '@', '?', '#'), spaces and
// control characters. '%' stays allowed for an IPv6 zone.
func badHostRune(r rune) bool {
	return strings.ContainsRune("/\\@?#", r) || unicode.IsSpace(r) || unicode.IsControl(r)
}

// URLDefaults returns o with the credentials and TLS of the URL addresses
// among addrs, when there is one, they all agree, and o sets no
// credentials itself: the settings for addresses that come as plain
// host:port from elsewhere (a layout record's instances, which a
// re-layout adds), which would otherwise be dialled without them.
func URLDefaults(addrs []string, o Login) Login {
	var first *subconn.Dialer
	for _, a := range addrs {
		if !strings.Contains(a, "://") {
			continue
		}
		d, err := ParseAddr(a, o)
		if err != nil {
			return o
		}
		if first == nil {
			first = &d
			continue
		}
		if d.Username != first.Username || d.Password != first.Password || (d.TLS == nil) != (first.TLS == nil) {
			return o
		}
	}
	if first == nil || o.Username != "" || o.Password != "" {
		return o
	}
	o.Username, o.Password = first.Username, first.Password
	if o.TLS == nil {
		o.TLS = first.TLS
	}
	return o
}

// Redact hides the password of a URL address in messages.
func Redact(addr string) string {
	at := strings.LastIndex(addr, "@")
	scheme := strings.Index(addr, "://")
	if at < 0 || scheme < 0 || at < scheme {
		return addr
	}
	return addr[:scheme+3] + "…" + addr[at:]
}
