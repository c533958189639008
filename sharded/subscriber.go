package sharded

import (
	"context"
	"errors"
	"fmt"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/subconn"
)

// subscriber owns one subscribe connection to one shard: the set of
// channels wanted on it, the live wire, and the goroutine that reconnects
// and resubscribes after a loss.
type subscriber struct {
	b     *Broker
	shard int
	addr  string
	dial  subconn.Dialer

	turn engine.Turn // serialises this connection's subscribe commands

	mu        sync.Mutex
	wanted    engine.ChannelSet
	conn      *subconn.Conn // nil while down
	up        chan struct{} // closed while conn != nil
	downSince time.Time
}

func newSubscriber(b *Broker, shard int, addr string, dial subconn.Dialer) *subscriber {
	return &subscriber{
		b:      b,
		shard:  shard,
		addr:   addr,
		dial:   dial,
		turn:   engine.NewTurn(),
		wanted: engine.ChannelSet{},
		up:     make(chan struct{}),
	}
}

func (s *subscriber) lock(ctx context.Context) error { return s.turn.Lock(ctx, s.b.closing) }

func (s *subscriber) unlock() { s.turn.Unlock() }

// current returns the live connection, or nil and a channel that closes
// when one is up.
func (s *subscriber) current() (*subconn.Conn, <-chan struct{}) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.conn, s.up
}

// waitUp waits until the connection is up, bounded by ctx.
func (s *subscriber) waitUp(ctx context.Context, up <-chan struct{}) error {
	select {
	case <-up:
		return nil
	case <-ctx.Done():
		return fmt.Errorf("shard %s is down: %w", s.addr, ctx.Err())
	case <-s.b.closing:
		return shardcast.ErrClosed
	}
}

// subscribe subscribes the channels not yet wanted and returns once Redis
// confirmed them, with the channels this call added. While the shard is
// down it waits, bounded by ctx.
func (s *subscriber) subscribe(ctx context.Context, channels []string, token uint64) (added []string, err error) {
	for {
		if err := s.lock(ctx); err != nil {
			return nil, err
		}
		conn, up := s.current()
		if conn == nil {
			s.unlock()
			if err := s.waitUp(ctx, up); err != nil {
				return nil, err
			}
			continue
		}
		fresh := s.missing(channels)
		var err error
		if len(fresh) > 0 {
			err = engine.FirstError(conn.Subscribe(ctx, s.b.batches(fresh)...))
		}
		if len(fresh) == 0 || err == nil {
			// This call is now the last to have asked for every one of
			// its channels here, so an older call's undo leaves them.
			s.mu.Lock()
			s.wanted.Add(channels, token)
			s.mu.Unlock()
			s.unlock()
			return fresh, nil
		}
		if engine.WireFailed(ctx, conn, err, s.b.closing) {
			// The wire died under us: nothing it confirmed survives. Wait
			// for the reconnect and try again.
			up := s.markDown(conn)
			s.unlock()
			if err := s.waitUp(ctx, up); err != nil {
				return nil, err
			}
			continue
		}
		// Redis refused, or ctx ended with commands possibly in flight:
		// undo whatever part went through so nothing is half-applied. The
		// undo must not hold the caller past its ctx (the instance may have
		// stopped answering), so it runs behind the caller's back.
		s.finish(ctx, func(ctx context.Context) error {
			if err := engine.FirstError(conn.Unsubscribe(ctx, s.b.batches(fresh)...)); err != nil && conn.Alive() {
				s.dropConn(conn, err)
			}
			return nil
		})
		return nil, fmt.Errorf("subscribe on shard %s: %w", s.addr, err)
	}
}

// markDown records that conn is gone, unless that is already known, and
// returns the channel that closes when the next connection is up.
func (s *subscriber) markDown(conn *subconn.Conn) <-chan struct{} {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.conn == conn {
		s.conn = nil
		s.up = make(chan struct{})
		s.downSince = time.Now()
	}
	return s.up
}

// finish hands op, which sends commands on this connection, to the
// broker's background group; see engine.Turn.Finish.
func (s *subscriber) finish(ctx context.Context, op func(context.Context) error) error {
	return s.turn.Finish(ctx, &s.b.background, s.b.ctx, s.b.cfg.CommandTimeout, op)
}

// unsubscribe removes channels from the wanted set and, when the
// connection is up, from Redis. With a non-zero token it is the undo of
// that Subscribe call: it removes only the channels no later call has
// asked for.
func (s *subscriber) unsubscribe(ctx context.Context, channels []string, token uint64) error {
	if err := s.lock(ctx); err != nil {
		return err
	}
	s.mu.Lock()
	var gone []string
	if token != 0 {
		gone = s.wanted.RemoveClaimed(channels, token)
	} else {
		gone = s.wanted.Remove(channels)
	}
	conn := s.conn
	s.mu.Unlock()
	if len(gone) == 0 || conn == nil {
		s.unlock()
		return nil // a down connection holds no subscriptions
	}
	// Once started, finish the commands even if the caller's ctx ends, so
	// Redis is not left subscribed to channels the broker no longer wants.
	return s.finish(ctx, func(ctx context.Context) error {
		err := engine.FirstError(conn.Unsubscribe(ctx, s.b.batches(gone)...))
		if err != nil && conn.Alive() {
			s.dropConn(conn, err)
		}
		return nil
	})
}

// dropConn closes a live connection on which an unsubscribe failed: Redis
// may still hold channels the broker no longer wants, and only a new
// connection, resubscribed from the wanted set, is sure not to deliver
// them. The connection's goroutine reports the interruption and
// reconnects.
func (s *subscriber) dropConn(conn *subconn.Conn, err error) {
	s.b.log.Warn("shardcast: unsubscribe failed; reconnecting", "shard", s.addr, "err", err)
	conn.Close()
}

// missing returns the channels not in the wanted set, without duplicates.
func (s *subscriber) missing(channels []string) []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.wanted.Missing(channels)
}

func (s *subscriber) wantedCount() int {
	s.mu.Lock()
	defer s.mu.Unlock()
	return len(s.wanted)
}

// snapshot lists the wanted channels; the caller holds s.mu.
func (s *subscriber) snapshot() []string { return s.wanted.Slice() }

// run keeps the connection up until the broker closes: connect,
// resubscribe everything wanted, wait for the wire to die, report, repeat.
func (s *subscriber) run() {
	defer s.b.wg.Done()
	for attempt := 0; ; attempt++ {
		if attempt > 0 {
			select {
			case <-time.After(engine.Backoff(attempt-1, s.b.cfg.ReconnectMin, s.b.cfg.ReconnectMax)):
			case <-s.b.closing:
				return
			}
		}
		conn, restored, err := s.connect()
		if err != nil {
			if errors.Is(err, shardcast.ErrClosed) {
				return
			}
			s.b.log.Debug("shardcast: shard connect failed", "shard", s.addr, "attempt", attempt, "err", err)
			if attempt%10 == 0 {
				s.b.emitter.Emit(shardcast.Event{Kind: shardcast.EventError, Shard: s.addr, Since: time.Now(), Err: err})
			}
			continue
		}
		connectedAt := time.Now()
		if restored != nil {
			s.b.emitter.Emit(*restored)
		}
		since, closing := s.watch(conn)
		if closing {
			s.drop(conn)
			return
		}
		s.lost(conn, since)
		// Backoff starts over only after a connection that stayed up a
		// while: one the server drops right away (an output buffer limit,
		// a proxy) must not turn into a hot loop of full resubscribes.
		if time.Since(connectedAt) >= s.b.cfg.ReconnectMax {
			attempt = -1
		}
	}
}

// connect opens a wire and resubscribes every wanted channel on it. It
// returns the Restored event to raise when this ends an outage.
func (s *subscriber) connect() (*subconn.Conn, *shardcast.Event, error) {
	ctx, cancel := context.WithTimeout(s.b.ctx, s.b.cfg.DialTimeout)
	defer cancel()
	conn, err := subconn.Open(ctx, s.dial, subconn.Classic, subconn.Hooks{OnMessage: s.b.inbox.Deliver})
	if err != nil {
		return nil, nil, err
	}
	if err := s.lock(context.Background()); err != nil {
		conn.Close()
		return nil, nil, err
	}
	defer s.unlock()
	s.mu.Lock()
	channels := s.snapshot()
	since := s.downSince
	s.mu.Unlock()

	if len(channels) > 0 {
		rctx, rcancel := context.WithTimeout(s.b.ctx, s.b.cfg.CommandTimeout)
		report := s.b.resub.Run(rctx, []shardcast.Group{{Key: s.shard, Channels: channels}},
			func(ctx context.Context, cmd shardcast.Command) error {
				return engine.FirstError(conn.Subscribe(ctx, cmd.Channels))
			})
		rcancel()
		if report.Err != nil {
			conn.Close()
			return nil, nil, fmt.Errorf("resubscribe %d channels: %w", len(channels), report.Err)
		}
	}
	s.mu.Lock()
	s.conn = conn
	close(s.up)
	s.downSince = time.Time{}
	s.mu.Unlock()

	if since.IsZero() {
		return conn, nil, nil
	}
	s.b.reconnects.Add(1)
	if len(channels) == 0 {
		return conn, nil, nil // nothing was interrupted, so nothing is restored
	}
	return conn, &shardcast.Event{
		Kind: shardcast.EventRestored, Shard: s.addr, Channels: channels,
		Since: since, Until: time.Now(),
	}, nil
}

// watch pings conn every HealthInterval until it dies (it returns when the
// loss began) or the broker closes (closing is true). A ping unanswered for
// HealthTimeout closes the connection: the instance froze or the path went
// silent, and messages have been lost since the last answered ping.
func (s *subscriber) watch(conn *subconn.Conn) (since time.Time, closing bool) {
	tick := time.NewTicker(s.b.cfg.HealthInterval)
	defer tick.Stop()
	var silentSince time.Time
	lastGood := time.Now()
	for {
		select {
		case <-conn.Done():
			if !silentSince.IsZero() {
				return silentSince, false
			}
			return time.Now(), false
		case <-s.b.closing:
			return time.Time{}, true
		case <-tick.C:
			sent := time.Now()
			ctx, cancel := context.WithTimeout(s.b.ctx, s.b.cfg.HealthTimeout)
			err := conn.Ping(ctx)
			cancel()
			switch {
			case err == nil:
				lastGood = sent
			case conn.Alive() && s.b.ctx.Err() == nil:
				s.b.log.Warn("shardcast: shard did not answer ping; dropping its connection", "shard", s.addr, "err", err)
				silentSince = lastGood
				conn.Close()
			}
		}
	}
}

// lost marks the connection down and reports the channels it carried,
// lost from since on.
func (s *subscriber) lost(conn *subconn.Conn, since time.Time) {
	s.markDown(conn)
	s.mu.Lock()
	if !s.downSince.IsZero() && s.downSince.Before(since) {
		since = s.downSince // a call saw the wire fail first
	}
	s.downSince = since
	channels := s.snapshot()
	s.mu.Unlock()
	err := conn.Err()
	conn.Close()
	s.b.log.Warn("shardcast: shard connection lost", "shard", s.addr, "channels", len(channels), "err", err)
	if len(channels) > 0 {
		s.b.emitter.Emit(shardcast.Event{
			Kind: shardcast.EventInterrupted, Shard: s.addr, Channels: channels, Since: since, Err: err,
		})
	}
}

func (s *subscriber) drop(conn *subconn.Conn) {
	s.mu.Lock()
	s.conn = nil
	s.mu.Unlock()
	conn.Close()
}
