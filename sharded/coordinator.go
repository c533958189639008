package sharded

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/relayout"
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
	// To is the new instance list, in routing order.
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
// It fails before changing anything when cfg.To is empty or malformed,
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
	var rep RelayoutReport
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return rep, err
	}
	defer c.close()
	to, err := c.dialAll(ctx, cfg.To)
	if err != nil {
		return rep, err
	}
	toRec := shardcast.LayoutRecord{Fingerprint: fingerprint(to), Engine: "sharded", Instances: to,
		Description: fmt.Sprintf("sharded: %d instances: %s", len(to), strings.Join(to, ", "))}
	t, rep, err := c.Begin(ctx, toRec, func(from shardcast.LayoutRecord) error {
		if from.Engine != "sharded" || len(from.Instances) == 0 {
			return fmt.Errorf("%w: the layout record is not a sharded application's (engine %q, %d instances): %s",
				shardcast.ErrInvalidConfig, from.Engine, len(from.Instances), from.Description)
		}
		if n := len(union(from.Instances, to)); n > minSlots {
			return fmt.Errorf("%w: the old and new lists name %d instances; at most %d at once", shardcast.ErrInvalidConfig, n, minSlots)
		}
		return nil
	})
	if err != nil {
		return rep, err
	}
	// The old instances are not required to answer: dropping one that
	// died is a reason to re-layout. Its barrier fails, and the brokers
	// hand its channels over after BarrierTimeout.
	from, err := c.connectAll(rep.From.Instances)
	if err != nil {
		abortErr := c.Abort(context.WithoutCancel(ctx), t, &rep)
		return rep, errors.Join(err, abortErr)
	}
	var barriers []*pubconn.Pub
	for _, i := range losing(from, to) {
		barriers = append(barriers, c.pubs[from[i]])
	}
	sendBarriers := func(ctx context.Context) int {
		// In parallel, within the quarter heartbeat the coordinator
		// gives them (see relayout.Coordinator): sent in turn, one to a
		// frozen old instance used it all up before the next was sent.
		var n atomic.Int64
		var wg sync.WaitGroup
		for _, p := range barriers {
			wg.Go(func() {
				if p.Publish(ctx, t.Barrier, []byte(t.ID), true, time.Now()) == nil {
					n.Add(1)
				}
			})
		}
		wg.Wait()
		return int(n.Load())
	}
	return rep, c.Drive(ctx, t, &rep, sendBarriers)
}

// AbortRelayout returns the brokers of a re-layout under way to the old
// instance list and waits until all acknowledged, bounded by ctx. It
// fails when none is under way (an error wrapping shardcast.ErrNoRelayout)
// or it began to finish.
func AbortRelayout(ctx context.Context, cfg RelayoutConfig) error {
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.close()
	return c.AbortCurrent(ctx)
}

// coordinator is one run of Relayout or AbortRelayout.
type coordinator struct {
	relayout.Coordinator
	conn    shardcast.ConnOptions
	control *pubconn.Pub
	pubs    map[string]*pubconn.Pub
}

func openCoordinator(ctx context.Context, cfg RelayoutConfig) (*coordinator, error) {
	if err := relayout.CheckAgreement(cfg.Agreement); err != nil {
		return nil, err
	}
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
	d, err := engine.ParseAddr(cfg.ControlAddr, conn)
	if err != nil {
		return nil, fmt.Errorf("%w (RelayoutConfig.ControlAddr)", err)
	}
	c := &coordinator{conn: conn, pubs: map[string]*pubconn.Pub{}, Coordinator: relayout.Coordinator{
		Agreement: cfg.Agreement.WithDefaults(), Name: relayout.NewName(), OnPhase: cfg.OnPhase,
	}}
	c.control = pubconn.New(d, engine.PubTimeouts(conn))
	c.Run = func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		ctx, cancel := context.WithTimeout(ctx, conn.CommandTimeout)
		defer cancel()
		return engine.Eval(ctx, c.control, s, keys, args)
	}
	pctx, cancel := context.WithTimeout(ctx, conn.DialTimeout)
	defer cancel()
	if err := c.control.Ping(pctx); err != nil {
		c.close()
		return nil, fmt.Errorf("shardcast: relayout: control instance %s: %w", d.Addr, err)
	}
	return c, nil
}

// dialAll connects to every address and returns their host:port.
func (c *coordinator) dialAll(ctx context.Context, addrs []string) ([]string, error) {
	if len(addrs) == 0 {
		return nil, fmt.Errorf("%w: the new instance list is empty", shardcast.ErrInvalidConfig)
	}
	out, err := c.connectAll(addrs)
	if err != nil {
		return nil, err
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

// connectAll is dialAll without the check that each instance answers:
// the publishing connections dial on first use.
func (c *coordinator) connectAll(addrs []string) ([]string, error) {
	out := make([]string, len(addrs))
	for i, a := range addrs {
		d, err := engine.ParseAddr(a, c.conn)
		if err != nil {
			return nil, err
		}
		out[i] = d.Addr
		if _, ok := c.pubs[d.Addr]; !ok {
			c.pubs[d.Addr] = pubconn.New(d, engine.PubTimeouts(c.conn))
		}
	}
	return out, nil
}

func (c *coordinator) close() {
	c.control.Close()
	for _, p := range c.pubs {
		p.Close()
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
