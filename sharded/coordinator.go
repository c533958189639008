package sharded

import (
	"cmp"
	"context"
	"fmt"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/relayout"
	"github.com/shardcast/shardcast/internal/sentinel"
)

// RelayoutConfig configures Relayout.
type RelayoutConfig struct {
	// ControlAddr is the Redis that holds the application's layout record
	// (the brokers' Config.ControlAddr, or their first address), in the
	// form of Config.Addrs.
	ControlAddr string
	// Agreement names the application (App); its Heartbeat is the
	// brokers' (default shardcast.DefaultHeartbeat) and paces the
	// coordinator's polls.
	Agreement shardcast.Agreement
	// Conn says how to reach the instances (credentials, TLS, timeouts).
	Conn shardcast.ConnOptions
	// To is the new instance list, in routing order, in the form of
	// Config.Addrs: host:port, redis:// URLs, or redis+sentinel:// for a
	// master reached through Sentinel (its Sentinels go into the layout
	// record, so that the brokers can reach a shard they do not know).
	To []string
	// OnPhase, if set, is called as each phase completes.
	OnPhase func(PhaseReport)
}

// PhaseReport is one completed phase of a re-layout.
type PhaseReport = shardcast.RelayoutPhaseReport

// RelayoutReport is what Relayout did.
type RelayoutReport = shardcast.RelayoutReport

// Relayout moves the running brokers of an application from the instance
// list in its layout record to cfg.To, without stopping them, and returns
// once the record holds the new list (docs/RELAYOUT.md gives the
// protocol). Only the channels whose instance changes take part: every
// live broker subscribes them under the new list too (prepare), then
// publishes them there (switch); the coordinator then sends a barrier
// through each old instance that loses channels, after which every
// subscriber has all their old messages and delivers the new ones it held
// back (drain); finally the record takes the new list and brokers drop
// the old subscriptions (finish). Brokers that start meanwhile follow
// the phase they find; a broker whose registration expires is not waited
// for. No message is lost, duplicated or reordered by the move, short of
// an instance or broker failing during it, which the brokers report.
//
// It fails before changing anything when cfg.To is empty, malformed or
// lists an instance twice,
// names an instance it cannot reach, the record is not a sharded
// application's, cfg.To is the recorded list
// (shardcast.ErrSameLayout), or when another re-layout is under way
// (shardcast.ErrRelayoutInProgress); one to the same list is resumed. The
// old list's instances need not answer: a re-layout away from one that
// died or froze finishes, its channels handed over after the brokers'
// BarrierTimeout (their messages lost with it are reported). If
// ctx ends before the finish, it aborts: every broker returns to the old
// list, and the error wraps shardcast.ErrRelayoutAborted.
// If the transition vanishes from the control instance (it lost its
// data), it returns at once with an error wrapping
// shardcast.ErrRelayoutVanished; the brokers follow the record they find.
func Relayout(ctx context.Context, cfg RelayoutConfig) (RelayoutReport, error) {
	return relayout.Relayout(ctx, cfg.Agreement, cfg.OnPhase, func(ctx context.Context) (relayout.Mover, error) {
		return openMover(ctx, cfg)
	})
}

// openMover checks cfg.To, connects to the control instance and to every
// instance of cfg.To, and returns the coordinator of a Relayout run.
func openMover(ctx context.Context, cfg RelayoutConfig) (*coordinator, error) {
	if err := redisaddr.Distinct("sharded.RelayoutConfig.To", cfg.To); err != nil {
		return nil, err
	}
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return nil, err
	}
	if c.to, err = c.dialAll(ctx, cfg.To); err != nil {
		c.Close()
		return nil, err
	}
	return c, nil
}

// AbortRelayout returns the brokers of a re-layout under way to the old
// instance list and waits until all acknowledged, bounded by ctx. It
// fails when none is under way (an error wrapping shardcast.ErrNoRelayout)
// or it began to finish.
func AbortRelayout(ctx context.Context, cfg RelayoutConfig) error {
	return relayout.AbortRelayout(ctx, cfg.Agreement, func(ctx context.Context) (relayout.Mover, error) {
		return openCoordinator(ctx, cfg)
	})
}

// coordinator is the sharded engine's side of a Relayout or
// AbortRelayout run (relayout.Mover): the control instance's connection
// runs the agreement's scripts, and the instances' publishing connections
// send the barriers. ReadLayout uses its control connection only.
type coordinator struct {
	conn    shardcast.ConnOptions
	control *pubconn.Pub
	// pubs publishes to each instance, by its entry in the layout
	// (host:port, or "sentinel/name": then to the master its Sentinels
	// name, asked at each dial through groups).
	pubs   map[string]*pubconn.Pub
	groups []*sentinel.Group
	// to is the new instance list, as the layout names it (Relayout
	// only), and sentinels the Sentinels of its Sentinel shards.
	to        []string
	sentinels map[string][]string
}

var _ relayout.Mover = (*coordinator)(nil)

// openCoordinator connects to cfg's control instance; cfg.Agreement was
// checked.
func openCoordinator(ctx context.Context, cfg RelayoutConfig) (*coordinator, error) {
	if err := cfg.Conn.Validate(); err != nil {
		return nil, err
	}
	if cfg.ControlAddr == "" {
		return nil, fmt.Errorf("%w: RelayoutConfig.ControlAddr is empty", shardcast.ErrInvalidConfig)
	}
	// The old list comes from the record, as host:port: it is dialled
	// with the credentials and TLS of the URLs among ControlAddr and To,
	// where those agree.
	conn := engine.URLDefaults(append([]string{cfg.ControlAddr}, cfg.To...), cfg.Conn.WithDefaults())
	t, err := redisaddr.Parse(cfg.ControlAddr, engine.Login(conn))
	if err != nil {
		return nil, fmt.Errorf("%w (RelayoutConfig.ControlAddr)", err)
	}
	c := &coordinator{conn: conn, pubs: map[string]*pubconn.Pub{}, sentinels: map[string][]string{}}
	c.control = c.dial(t)
	pctx, cancel := context.WithTimeout(ctx, conn.DialTimeout)
	defer cancel()
	if err := c.control.Ping(pctx); err != nil {
		c.Close()
		return nil, fmt.Errorf("shardcast: control instance %s: %w", t.ID, err)
	}
	return c, nil
}

// dial returns a publishing connection to t; one to a Sentinel shard asks
// its Sentinels for the master at each dial.
func (c *coordinator) dial(t redisaddr.Target) *pubconn.Pub {
	d := t.Dialer
	if t.Master != "" {
		g := sentinelGroup(t, c.conn)
		c.groups = append(c.groups, g)
		d.Addr, d.Master, d.Resolve = t.ID, true, g.Resolve
	}
	return pubconn.New(d, engine.PubTimeouts(c.conn))
}

// Run runs an agreement script on the control instance, bounded by
// Conn.CommandTimeout.
func (c *coordinator) Run(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
	ctx, cancel := context.WithTimeout(ctx, c.conn.CommandTimeout)
	defer cancel()
	return engine.Eval(ctx, c.control, s, keys, args)
}

// Target returns the record of the new instance list; it refuses a move
// from a record that is not a sharded application's, or that would need
// more instances at once than a broker has slots for.
func (c *coordinator) Target(from shardcast.LayoutRecord) (shardcast.LayoutRecord, error) {
	to := layoutRecord(c.to, c.sentinels)
	if from.Fingerprint == to.Fingerprint {
		return to, nil // resumed, or refused as the same layout by Begin
	}
	if from.Engine != "sharded" || len(from.Instances) == 0 {
		return to, fmt.Errorf("%w: the layout record is not a sharded application's (engine %q, %d instances): %s",
			shardcast.ErrInvalidConfig, from.Engine, len(from.Instances), from.Description)
	}
	if n := len(union(from.Instances, c.to)); n > minSlots {
		return to, fmt.Errorf("%w: the old and new lists name %d instances; at most %d at once", shardcast.ErrInvalidConfig, n, minSlots)
	}
	return to, nil
}

// Barriers returns a PUBLISH of t's barrier through each old instance
// that loses channels. The old instances are not required to answer:
// dropping one that died is a reason to re-layout. Its barrier fails, and
// the brokers hand its channels over after BarrierTimeout.
func (c *coordinator) Barriers(from shardcast.LayoutRecord, t *agreement.Transition) ([]relayout.Barrier, error) {
	old := make([]string, len(from.Instances))
	for i, in := range from.Instances {
		a := in
		if s := from.Sentinels[in]; len(s) > 0 {
			a = redisaddr.SentinelURL(in, s, c.conn.TLS != nil, nil)
		}
		id, err := c.connect(a)
		if err != nil && !strings.HasPrefix(in, redisaddr.SentinelPrefix) {
			return nil, err
		}
		// A Sentinel shard the record gives no Sentinels for (written by an
		// older version) and To does not name gets no barrier: the brokers
		// hand its channels over after BarrierTimeout, as for a dead one.
		old[i] = cmp.Or(id, in)
	}
	var out []relayout.Barrier
	for _, i := range losing(old, c.to) {
		p, ok := c.pubs[old[i]]
		if !ok {
			out = append(out, func(context.Context) error {
				return fmt.Errorf("shardcast: relayout: no barrier through %s: the layout record does not name its Sentinels", old[i])
			})
			continue
		}
		out = append(out, func(ctx context.Context) error {
			return p.Publish(ctx, t.Barrier, []byte(t.ID), true, time.Now())
		})
	}
	return out, nil
}

// dialAll connects to every address and returns their host:port.
func (c *coordinator) dialAll(ctx context.Context, addrs []string) ([]string, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: the new instance list is empty", shardcast.ErrInvalidConfig)
	}
	out := make([]string, len(addrs))
	for i, a := range addrs {
		id, err := c.connect(a)
		if err != nil {
			return nil, err
		}
		out[i] = id
	}
	for _, a := range out {
		pctx, cancel := context.WithTimeout(ctx, c.conn.DialTimeout)
		err := c.pubs[a].Ping(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("shardcast: relayout: instance %s unreachable: %w", a, err)
		}
	}
	return out, nil
}

// connect makes (without dialling: a connection dials on first use) the
// publishing connection to addr unless there is one, and returns addr's
// entry in the layout; it keeps a Sentinel shard's Sentinels for the
// record.
func (c *coordinator) connect(addr string) (string, error) {
	t, err := redisaddr.Parse(addr, engine.Login(c.conn))
	if err != nil {
		return "", err
	}
	if _, ok := c.pubs[t.ID]; !ok {
		c.pubs[t.ID] = c.dial(t)
	}
	if t.Master != "" {
		c.sentinels[t.ID] = t.Sentinels
	}
	return t.ID, nil
}

// Close closes every connection the run opened.
func (c *coordinator) Close() {
	c.control.Close()
	for _, p := range c.pubs {
		p.Close()
	}
	for _, g := range c.groups {
		g.Close()
	}
}

func union(a, b []string) []string {
	seen := map[string]bool{}
	var out []string
	for _, s := range append(append([]string(nil), a...), b...) {
		if !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
