package sharded

import (
	"context"
	"fmt"
	"net/url"
	"strings"
	"sync"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/redisaddr"
	"github.com/shardcast/shardcast/internal/relayout"
)

// joinLayout checks the broker's instance list against the layout record
// on the control instance and registers the broker there, with a
// heartbeat until Close (see shardcast.Agreement). The record's scripts
// go over a connection of their own, so that they count in no shard's
// NodeStats and never queue behind publishes.
func (b *Broker) joinLayout(cfg Config, conn shardcast.ConnOptions) error {
	a := cfg.Agreement.WithDefaults()
	if a.Off {
		return nil
	}
	control := cfg.ControlAddr
	if control == "" {
		control = cfg.Addrs[0]
	}
	t, err := redisaddr.Parse(control, engine.Login(conn))
	if err != nil {
		return err
	}
	where, d := t.ID, t.Dialer
	if t.Master != "" {
		// The record lives on the master; the connection asks the
		// Sentinels for it at each dial.
		b.controlMaster = sentinelGroup(t, conn)
		d.Addr, d.Master, d.Resolve = t.ID, true, b.controlMaster.Resolve
	}
	pub := pubconn.New(d, engine.PubTimeouts(conn))
	b.control = pub
	r := b.route.Load()
	run := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
		return engine.Eval(ctx, pub, s, keys, args)
	}
	ours := layoutRecord(r.addrs, b.sentinelsOf(r.cur))
	var byAddr []string
	ours.InstanceIDs, byAddr = b.instanceIDs(a, r, conn.CommandTimeout)
	b.member, b.rel, err = relayout.Join(relayout.FollowerConfig{
		Agreement: a, Run: run, Core: b.core, Hand: b.hand, Engine: steps{b},
		BarrierTimeout: cfg.BarrierTimeout, Timeout: conn.CommandTimeout,
	}, agreement.Config{
		Where: where,
		Node:  where,
		Ours:  ours,
	})
	if err == nil && b.member != nil && len(byAddr) > 0 {
		b.core.Log.Info("shardcast: instances without an instance id are compared with other brokers' by address",
			"instances", strings.Join(byAddr, "; "))
	}
	return err
}

// instanceIDs reads (and, where missing, writes) the id of every instance
// of route r, on its publishing connection, all at once, each bounded by
// timeout (see agreement.InstanceID). It also returns, for people, the
// instances that could not keep one and are named by address instead,
// with the reason.
func (b *Broker) instanceIDs(a shardcast.Agreement, r *route, timeout time.Duration) (ids, byAddr []string) {
	ids = make([]string, len(r.cur))
	errs := make([]error, len(r.cur))
	var wg sync.WaitGroup
	for i, at := range r.cur {
		sh := b.slots[at].Load()
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(b.core.Ctx(), timeout)
			defer cancel()
			run := func(ctx context.Context, s *shardcast.Script, keys, args []string) (any, error) {
				return engine.EvalUncounted(ctx, sh.pub, false, s, keys, args)
			}
			ids[i], errs[i] = agreement.InstanceID(ctx, run, a, sh.addr)
		})
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			byAddr = append(byAddr, err.Error())
		}
	}
	return ids, byAddr
}

// layoutRecord describes the instance list hosts (host:port or
// "sentinel/name", in routing order) as the layout record holds it, with
// the Sentinels of its Sentinel shards that sentinels gives.
func layoutRecord(hosts []string, sentinels map[string][]string) shardcast.LayoutRecord {
	r := shardcast.LayoutRecord{
		Fingerprint: fingerprint(hosts),
		Description: fmt.Sprintf("sharded: %d instances: %s", len(hosts), strings.Join(hosts, ", ")),
		Engine:      "sharded",
		Instances:   hosts,
	}
	for _, h := range hosts {
		if s := sentinels[h]; len(s) > 0 {
			if r.Sentinels == nil {
				r.Sentinels = make(map[string][]string)
			}
			r.Sentinels[h] = s
		}
	}
	return r
}

// sentinelsOf returns the Sentinels of the Sentinel shards among slots.
func (b *Broker) sentinelsOf(slots []int) map[string][]string {
	out := make(map[string][]string)
	for _, i := range slots {
		if sh := b.slots[i].Load(); sh != nil && len(sh.sentinels) > 0 {
			out[sh.addr] = sh.sentinels
		}
	}
	return out
}

// leaveLayout leaves the registry and closes the control connection. It
// runs after the broker closed, so that Close cuts calls short first.
func (b *Broker) leaveLayout() {
	b.member.Leave()
	if b.control != nil {
		b.control.Close()
	}
	if b.controlMaster != nil {
		b.controlMaster.Close()
	}
}

// follow returns c with the instance list of record r, which a running
// fleet uses (shardcast.Agreement.Follow). The record names instances by
// host:port or "sentinel/name" (with its Sentinels); one that c.Addrs
// names keeps c's entry, so that a URL's
// credentials and TLS still apply, and any other gets those of c's URLs
// where they agree (engine.URLDefaults), or else is dialled with c.Conn's.
// The control instance stays where c found the record.
func (c Config) follow(r shardcast.LayoutRecord) (Config, error) {
	if r.Engine != "sharded" || len(r.Instances) == 0 {
		return c, fmt.Errorf("the record is the %s engine's, not an instance list", r.Engine)
	}
	conn := c.Conn.WithDefaults()
	mine := make(map[string]string, len(c.Addrs))
	for _, a := range c.Addrs {
		if t, err := redisaddr.Parse(a, engine.Login(conn)); err == nil {
			mine[t.ID] = a
		}
	}
	if c.ControlAddr == "" {
		c.ControlAddr = c.Addrs[0]
	}
	// An instance of the record that c does not name gets the
	// credentials and TLS of c's URLs, where those agree (see
	// engine.URLDefaults), as a re-layout's new instances do.
	urls := engine.URLDefaults(c.Addrs, shardcast.ConnOptions{})
	var user *url.Userinfo
	if urls.Password != "" {
		user = url.UserPassword(urls.Username, urls.Password)
	}
	addrs := make([]string, len(r.Instances))
	for i, in := range r.Instances {
		addrs[i] = in
		if a, ok := mine[in]; ok {
			addrs[i] = a
		} else if s := r.Sentinels[in]; len(s) > 0 {
			addrs[i] = redisaddr.SentinelURL(in, s, urls.TLS != nil, user)
		} else if strings.HasPrefix(in, redisaddr.SentinelPrefix) {
			return c, fmt.Errorf("the record names the Sentinel master %s, which Config.Addrs does not, without its Sentinels (written by an older version)", in)
		} else if user != nil || urls.TLS != nil {
			u := url.URL{Scheme: "redis", Host: in, User: user}
			if urls.TLS != nil {
				u.Scheme = "rediss"
			}
			addrs[i] = u.String()
		}
	}
	c.Addrs = addrs
	return c, nil
}
