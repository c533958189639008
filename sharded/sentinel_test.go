package sharded

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Sentinel tests each own their servers and run in parallel: they spend
// their time waiting for Sentinel's timers.

// sentinelShards starts two masters with one replica each, watched by
// three Sentinels as "a" and "b".
func sentinelShards(t *testing.T) (*redistest.Sentinels, map[string]*redistest.Replicated) {
	groups := map[string]*redistest.Replicated{"a": redistest.StartReplicated(t, 1), "b": redistest.StartReplicated(t, 1)}
	s := redistest.StartSentinels(t, 3,
		redistest.SentinelGroup{Name: "a", Servers: groups["a"]},
		redistest.SentinelGroup{Name: "b", Servers: groups["b"]})
	return s, groups
}

// followKill SIGKILLs the named shard's master under fleet, waits until
// every broker publishes to the new one and delivers again, lets 1000
// more messages be published, and returns the new master's address.
func followKill(ctx context.Context, t *testing.T, s *redistest.Sentinels, fleet *brokertest.FaultFleet, name string) string {
	t.Helper()
	fleet.WaitPublished(fleet.Published() + 1000)
	began := time.Now()
	_, newAddr, err := s.KillMaster(ctx, name)
	require.NoError(t, err)
	waitFor(t, "every broker publishing to "+name+"'s new master", func() bool {
		for _, x := range fleet.Brokers {
			if dialOf(x.(*Broker), "sentinel/"+name) != newAddr {
				return false
			}
		}
		return true
	})
	waitFor(t, "delivering again after the failover", func() bool { return fleet.Delivering(began) })
	fleet.WaitPublished(fleet.Published() + 1000)
	return newAddr
}

// interruptedChannels returns the channels the brokers' EventInterrupted
// named.
func interruptedChannels(f *brokertest.FaultFleet) map[string]bool {
	out := map[string]bool{}
	for _, ev := range f.Events {
		for _, e := range ev.Of(shardcast.EventInterrupted) {
			for _, ch := range e.Channels {
				out[ch] = true
			}
		}
	}
	return out
}

// TestSentinelFailover: two Sentinel shards, three brokers publishing to
// and subscribing every channel; shard a's master fails over, by SIGKILL
// and by SENTINEL FAILOVER. Every loss lies inside a window the
// subscriber reported, nothing is delivered twice or out of order, the
// brokers deliver again within 10 s, shard b is never interrupted, and a
// broker started afterwards with the same URLs joins the layout (same
// fingerprint, no mismatch).
func TestSentinelFailover(t *testing.T) {
	for _, how := range []string{"kill", "sentinel-failover"} {
		t.Run(how, func(t *testing.T) {
			t.Parallel()
			s, groups := sentinelShards(t)
			ctx, cancel := context.WithTimeout(context.Background(), 120*time.Second)
			defer cancel()
			cfg := Config{Addrs: []string{s.URL("a"), s.URL("b")}, Conn: faultConn,
				Agreement: shardcast.Agreement{App: "sentinel." + how + ":"}}
			channels := channelNames("sf."+how+".", 200)
			fleet := newFaultFleet(t, 3, cfg, channels)
			first := fleet.Brokers[0].(*Broker)
			assert.Equal(t, []string{"sentinel/a", "sentinel/b"}, first.Instances())
			fp := first.Fingerprint()
			want, err := Fingerprint(cfg.Addrs)
			require.NoError(t, err)
			assert.Equal(t, want, fp)
			fleet.WaitPublished(2000)

			old := groups["a"].Master().Addr()
			began := time.Now()
			var newAddr string
			switch how {
			case "kill":
				_, newAddr, err = s.KillMaster(ctx, "a")
			default:
				require.NoError(t, s.Failover(ctx, "a"))
				newAddr, err = s.WaitSwitch(ctx, "a", old)
			}
			require.NoError(t, err)
			require.NotEqual(t, old, newAddr)
			waitFor(t, "delivering again after the failover", func() bool { return fleet.Delivering(began) })
			took := time.Since(began)
			assert.Less(t, took, 10*time.Second, "delivering again within 10 s of the fault")
			t.Logf("FIGURE Sentinel %s: %s → %s, delivering again after %v", how, old, newAddr, took.Round(time.Millisecond))
			waitFor(t, "every broker publishing to the new master", func() bool {
				for _, b := range fleet.Brokers {
					if b.(*Broker).slots[0].Load().dial.Addr != newAddr {
						return false
					}
				}
				return true
			})
			if how == "sentinel-failover" {
				// The old master lives on until Sentinel demotes it;
				// publish on through that.
				require.NoError(t, groups["a"].WaitLinked(ctx, groups["a"].Node(newAddr)))
			}
			fleet.WaitPublished(2000)

			// A broker that starts now, with the same URLs, joins the
			// layout the fleet holds.
			late, err := New(cfg)
			require.NoError(t, err, "a broker started after the failover")
			assert.Equal(t, fp, late.Fingerprint())
			require.NoError(t, late.Close())

			fig := fleet.FinishClean(faultTolerance)
			got := interruptedChannels(fleet)
			assert.NotEmpty(t, got, "the failover was reported")
			for ch := range got {
				assert.Equal(t, 0, InstanceOf(ch, 2), "shard b's channel %s was reported interrupted", ch)
			}
			t.Logf("FIGURE Sentinel %s: %v", how, fig)
		})
	}
}

// TestSentinelBadInput: malformed Sentinel URLs fail New with
// ErrInvalidConfig, as does a Sentinel URL where only plain instances go;
// a master no Sentinel knows fails New with the Sentinels' reasons.
func TestSentinelBadInput(t *testing.T) {
	for _, a := range []string{
		"redis+sentinel://127.0.0.1:26379",           // no master name
		"redis+sentinel://127.0.0.1:26379/",          // empty master name
		"redis+sentinel://127.0.0.1:26379/a/b",       // a slash in the name
		"redis+sentinel:///mymaster",                 // no Sentinel
		"redis+sentinel://h/x:1,127.0.0.1:1/m",       // a slash in a host
		"redis+sentinel://127.0.0.1:99999/m",         // bad port
		"redis+sentinel://127.0.0.1:1,127.0.0.1:1/m", // one Sentinel twice
		"foo+sentinel://127.0.0.1:1/m",               // unknown scheme
	} {
		_, err := New(Config{Addrs: []string{a}})
		assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "%q", a)
	}
	_, err := New(Config{Addrs: []string{"redis+sentinel://127.0.0.1:1/m", "redis+sentinel://127.0.0.1:2/m"}})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "one master listed twice")

	// SubscribeOn: a value it does not know, and Replicas with no Sentinel
	// shard to put on a replica.
	_, err = New(Config{Addrs: []string{"127.0.0.1:1"}, SubscribeOn: SubscribeOn(7)})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "an unknown SubscribeOn")
	_, err = New(Config{Addrs: []string{"127.0.0.1:1"}, SubscribeOn: Replicas})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig, "Replicas without a Sentinel shard")

	// No Sentinel answers: New fails, naming the shard.
	_, err = New(Config{Addrs: []string{"redis+sentinel://127.0.0.1:1/m"}, Conn: shardcast.ConnOptions{DialTimeout: time.Second}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "sentinel/m")
}

// TestSentinelUnknownMaster: Sentinels that do not know the master fail
// New with their reason; a connection that must reach a master refuses a
// replica (subconn.Dialer.Master), as a demoted master is refused.
func TestSentinelUnknownMaster(t *testing.T) {
	t.Parallel()
	r := redistest.StartReplicated(t, 1)
	s := redistest.StartSentinels(t, 1, redistest.SentinelGroup{Name: "a", Servers: r})
	_, err := New(Config{Addrs: []string{s.URL("nosuch")}})
	require.Error(t, err)
	assert.Contains(t, err.Error(), "nosuch")

	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	_, err = subconn.Open(ctx, subconn.Dialer{Addr: r.Replicas()[0].Addr(), Master: true}, subconn.Classic, subconn.Hooks{})
	assert.ErrorIs(t, err, subconn.ErrNotMaster)
	c, err := subconn.Open(ctx, subconn.Dialer{Addr: r.Master().Addr(), Master: true}, subconn.Classic, subconn.Hooks{})
	require.NoError(t, err)
	c.Close()

	// The broker works through the one master Sentinel names.
	b := newBroker(t, Config{Addrs: []string{s.URL("a")}})
	got := make(chan string, 1)
	sub := newBroker(t, Config{Addrs: []string{s.URL("a")}, Options: shardcast.Options{Handler: func(m shardcast.Message) {
		select {
		case got <- string(m.Payload):
		default:
		}
	}}})
	require.NoError(t, sub.Subscribe(ctx, "x"))
	require.NoError(t, b.Publish(ctx, "x", []byte("hello")))
	select {
	case p := <-got:
		assert.Equal(t, "hello", p)
	case <-ctx.Done():
		t.Fatal("no delivery through the Sentinel shard")
	}
}
