package sharded

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"os"
	"strings"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
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
type PhaseReport struct {
	// Phase is a shardcast.Phase constant.
	Phase string
	// Took is how long the fleet took to acknowledge it.
	Took time.Duration
	// Brokers counts the live brokers that acknowledged.
	Brokers int
	// Barriers counts the barriers sent (PhaseDrain).
	Barriers int
}

// RelayoutReport is what Relayout did.
type RelayoutReport struct {
	// ID names the re-layout.
	ID string
	// From and To are the layouts it moved between.
	From, To shardcast.LayoutRecord
	// Phases lists the phases completed, in order.
	Phases []PhaseReport
	// Aborted is set when the fleet returned to From.
	Aborted bool
}

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
// names an instance it cannot reach, is the recorded list
// (shardcast.ErrSameLayout), or when another re-layout is under way
// (shardcast.ErrRelayoutInProgress); one to the same list is resumed. If
// ctx ends before the finish, it aborts: every broker returns to the old
// list, and the error wraps shardcast.ErrRelayoutAborted.
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
	res, err := agreement.Begin(ctx, c.run, c.a, newRelayoutID(), c.name, toRec)
	rep.From, rep.To = res.From, toRec
	if err != nil {
		return rep, err
	}
	t := res.Current
	if !res.Begun {
		if t == nil || t.To != toRec.Fingerprint {
			desc := ""
			if t != nil {
				desc = fmt.Sprintf(" (%s, to %s, phase %s)", t.ID, t.ToRecord.Description, t.Phase)
			}
			return rep, fmt.Errorf("%w%s", shardcast.ErrRelayoutInProgress, desc)
		}
	} else {
		st, err := agreement.ReadTransition(ctx, c.run, c.a)
		if err != nil {
			return rep, err
		}
		t = st.T
		if t == nil {
			return rep, errors.New("shardcast: the re-layout vanished as it began")
		}
	}
	rep.ID = t.ID
	if n := len(union(res.From.Instances, to)); n > minSlots {
		_, _ = agreement.Abort(context.WithoutCancel(ctx), c.run, c.a, t.ID)
		return rep, fmt.Errorf("%w: the old and new lists name %d instances; at most %d at once", shardcast.ErrInvalidConfig, n, minSlots)
	}
	from, err := c.dialAll(ctx, res.From.Instances)
	if err != nil {
		abortErr := c.abort(context.WithoutCancel(ctx), t, &rep)
		return rep, errors.Join(err, abortErr)
	}
	var barriers []*pubconn.Pub
	for _, i := range losing(from, to) {
		barriers = append(barriers, c.pubs[from[i]])
	}
	steps := []struct{ from, to string }{
		{shardcast.PhasePrepare, shardcast.PhaseSwitch},
		{shardcast.PhaseSwitch, shardcast.PhaseDrain},
		{shardcast.PhaseDrain, shardcast.PhaseFinish},
		{shardcast.PhaseFinish, "done"},
	}
	// Resume where the transition is.
	for len(steps) > 0 && steps[0].from != t.Phase {
		steps = steps[1:]
	}
	if t.Phase == shardcast.PhaseAbort {
		err := c.abort(ctx, t, &rep)
		return rep, errors.Join(shardcast.ErrRelayoutAborted, err)
	}
	for _, s := range steps {
		var sendBarriers func(context.Context) int
		if s.from == shardcast.PhaseDrain {
			sendBarriers = func(ctx context.Context) int {
				n := 0
				for _, p := range barriers {
					if p.Publish(ctx, t.Barrier, []byte(t.ID), true, time.Now()) == nil {
						n++
					}
				}
				return n
			}
		}
		pr, err := c.await(ctx, t, s.from, s.to, sendBarriers)
		if err != nil {
			if errors.Is(err, shardcast.ErrRelayoutAborted) || (ctx.Err() != nil && s.from != shardcast.PhaseFinish) {
				abortErr := c.abort(context.WithoutCancel(ctx), t, &rep)
				return rep, errors.Join(shardcast.ErrRelayoutAborted, err, abortErr)
			}
			return rep, err
		}
		rep.Phases = append(rep.Phases, pr)
		if cfg.OnPhase != nil {
			cfg.OnPhase(pr)
		}
	}
	return rep, nil
}

// AbortRelayout returns the brokers of a re-layout under way to the old
// instance list and waits until all acknowledged, bounded by ctx. It
// fails when none is under way or it began to finish.
func AbortRelayout(ctx context.Context, cfg RelayoutConfig) error {
	c, err := openCoordinator(ctx, cfg)
	if err != nil {
		return err
	}
	defer c.close()
	st, err := agreement.ReadTransition(ctx, c.run, c.a)
	if err != nil {
		return err
	}
	if st.T == nil {
		return fmt.Errorf("shardcast: no re-layout under way in %s", c.a.TransitionKey())
	}
	var rep RelayoutReport
	return c.abort(ctx, st.T, &rep)
}

// coordinator is one run of Relayout or AbortRelayout.
type coordinator struct {
	a       shardcast.Agreement
	conn    shardcast.ConnOptions
	control *pubconn.Pub
	run     agreement.Runner
	name    string
	pubs    map[string]*pubconn.Pub
}

func openCoordinator(ctx context.Context, cfg RelayoutConfig) (*coordinator, error) {
	if err := cfg.Agreement.Validate(); err != nil {
		return nil, err
	}
	if cfg.Agreement.Off {
		return nil, fmt.Errorf("%w: a re-layout needs the agreement (Agreement.Off is set)", shardcast.ErrInvalidConfig)
	}
	if err := cfg.Conn.Validate(); err != nil {
		return nil, err
	}
	if cfg.ControlAddr == "" {
		return nil, fmt.Errorf("%w: RelayoutConfig.ControlAddr is empty", shardcast.ErrInvalidConfig)
	}
	conn := cfg.Conn.WithDefaults()
	d, err := engine.ParseAddr(cfg.ControlAddr, conn)
	if err != nil {
		return nil, fmt.Errorf("%w (RelayoutConfig.ControlAddr)", err)
	}
	host, _ := os.Hostname()
	c := &coordinator{a: cfg.Agreement.WithDefaults(), conn: conn, pubs: map[string]*pubconn.Pub{},
		name: fmt.Sprintf("relayout:%s/%d", host, os.Getpid())}
	c.control = pubconn.New(d, engine.PubTimeouts(conn))
	c.run = func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
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
	out := make([]string, len(addrs))
	for i, a := range addrs {
		d, err := engine.ParseAddr(a, c.conn)
		if err != nil {
			return nil, err
		}
		out[i] = d.Addr
		if _, ok := c.pubs[d.Addr]; ok {
			continue
		}
		p := pubconn.New(d, engine.PubTimeouts(c.conn))
		c.pubs[d.Addr] = p
		pctx, cancel := context.WithTimeout(ctx, c.conn.DialTimeout)
		err = p.Ping(pctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("shardcast: relayout: instance %s unreachable: %w", d.Addr, err)
		}
	}
	return out, nil
}

// await polls, every heartbeat, until every live broker acknowledged
// phase from, then moves the transition to phase to. each, if set, runs
// before every poll (the drain's barriers).
func (c *coordinator) await(ctx context.Context, t *agreement.Transition, from, to string, each func(context.Context) int) (PhaseReport, error) {
	start := time.Now()
	pr := PhaseReport{Phase: from}
	tick := time.NewTicker(max(c.a.Heartbeat/2, time.Millisecond))
	defer tick.Stop()
	for {
		if each != nil {
			pr.Barriers += each(ctx)
		}
		st, err := agreement.ReadTransition(ctx, c.run, c.a)
		if err == nil {
			pr.Brokers = len(st.Live)
			var waiting []string
			waiting, err = agreement.Advance(ctx, c.run, c.a, t, from, to, c.name)
			if err == nil && waiting == nil {
				pr.Took = time.Since(start)
				return pr, nil
			}
		}
		if err != nil && (errors.Is(err, shardcast.ErrRelayoutAborted) || ctx.Err() != nil) {
			return pr, err
		}
		select {
		case <-ctx.Done():
			return pr, ctx.Err()
		case <-tick.C:
		}
	}
}

// abort turns t into an abort and waits until every live broker
// acknowledged it, then ends the transition.
func (c *coordinator) abort(ctx context.Context, t *agreement.Transition, rep *RelayoutReport) error {
	rep.Aborted = true
	if _, err := agreement.Abort(ctx, c.run, c.a, t.ID); err != nil {
		return err
	}
	pr, err := c.await(ctx, t, shardcast.PhaseAbort, "done", nil)
	if err == nil {
		rep.Phases = append(rep.Phases, pr)
	}
	return err
}

func (c *coordinator) close() {
	c.control.Close()
	for _, p := range c.pubs {
		p.Close()
	}
}

func newRelayoutID() string {
	var b [6]byte
	_, _ = rand.Read(b[:])
	return time.Now().UTC().Format("20060102T150405Z") + "-" + hex.EncodeToString(b[:])
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
