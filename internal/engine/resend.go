package engine

import (
	"context"
	"errors"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
)

// A command Resend sends again follows at most MaxRedirects redirections
// in a row, and is resent at most MaxResends times after it could not be
// sent (or was refused for now), with backoff (Conn.ReconnectMin,
// doubling up to Conn.ReconnectMax) between attempts.
const (
	MaxRedirects = 5
	MaxResends   = 5
)

// Redirects is an engine's part of resending one command: how it reads a
// refusal and where the command goes next.
type Redirects interface {
	// Redirection returns the node err redirects the command to, and
	// whether with ASK; ok is false when err redirects nothing of it.
	Redirection(err error) (addr string, ask, ok bool)
	// PubFor returns the broker's publishing connection to the node at
	// addr, named in a reply on from (nil before any attempt), or nil once
	// Close has begun.
	PubFor(addr string, from *pubconn.Pub) *pubconn.Pub
	// RefusedForNow reports whether err refused the command without
	// running it, for a while.
	RefusedForNow(err error) bool
	// Reroute returns the connection a command that did not leave goes to
	// now, or, when there is none, the error to report.
	Reroute() (*pubconn.Pub, error)
}

// Resend sends a command again with send after a first attempt on pub
// failed with err without running; a nil pub means there was no route to
// try. A redirection sends it on to the node named (ASKING first for an
// ASK); a command that did not leave, or was refused for now, goes after
// a backoff to wherever r.Reroute says by then. Nothing that may have run
// is sent again. It returns the last attempt's error.
func (c *Core) Resend(ctx context.Context, r Redirects, pub *pubconn.Pub, err error, send func(ctx context.Context, pub *pubconn.Pub, asking bool) error) error {
	redirects, resends := 0, 0
	for {
		asking := false
		if addr, ask, ok := r.Redirection(err); ok {
			if redirects == MaxRedirects {
				return err
			}
			redirects++
			if pub = r.PubFor(addr, pub); pub == nil {
				return err // closing
			}
			asking = ask
		} else {
			if err != nil && !errors.Is(err, pubconn.ErrNotSent) && !r.RefusedForNow(err) {
				return err
			}
			if resends == MaxResends {
				return err
			}
			if resends > 0 {
				if serr := c.sleep(ctx, Backoff(resends-1, c.Conn.ReconnectMin, c.Conn.ReconnectMax)); serr != nil {
					return errors.Join(err, serr)
				}
			}
			resends, redirects = resends+1, 0
			var rerr error
			if pub, rerr = r.Reroute(); pub == nil {
				err = rerr
				continue
			}
		}
		if err = send(ctx, pub, asking); err == nil || c.Closed() || ctx.Err() != nil {
			return err
		}
	}
}

// sleep waits for d, bounded by ctx and by Close.
func (c *Core) sleep(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	case <-c.Closing():
		return shardcast.ErrClosed
	}
}
