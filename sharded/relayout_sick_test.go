package sharded

import (
	"context"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// sickSetup starts instances A, B and C and a broker on A,B that records
// what it receives and the events it reports.
func sickSetup(t *testing.T) ([]*redistest.Server, *Broker, *recorder, *events) {
	servers := startServers(t, 3)
	rec, evs := newRecorder(), &events{}
	b := newBroker(t, Config{Addrs: addrs(servers[0], servers[1]), Conn: faultConn, BarrierTimeout: 300 * time.Millisecond,
		Options:   shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	return servers, b, rec, evs
}

// sickRelayout starts a broker on A,B subscribing 50 channels, lets sick
// make B unwell (at start, or at the switch), re-layouts to A,C, and
// checks that the re-layout finishes, the broker is on A,C, every channel
// delivers there, and every channel reported interrupted is reported
// restored: the re-layout ends the loss of those it moves off B.
func sickRelayout(t *testing.T, atStart, atSwitch func(b *redistest.Server)) {
	servers, b, rec, evs := sickSetup(t)
	ac := addrs(servers[0], servers[2])
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	channels := channelNames("sick-", 50)
	require.NoError(t, b.Subscribe(ctx, channels...))
	if atStart != nil {
		atStart(servers[1])
	}
	cfg := relayoutConfig(servers[0].Addr(), ac)
	cfg.Conn = faultConn
	cfg.OnPhase = func(p PhaseReport) {
		t.Logf("phase %s done in %v", p.Phase, p.Took)
		if p.Phase == shardcast.PhaseSwitch && atSwitch != nil {
			atSwitch(servers[1])
		}
	}
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	rep, err := Relayout(rctx, cfg)
	require.NoError(t, err)
	assert.False(t, rep.Aborted)
	fp, err := Fingerprint(ac)
	require.NoError(t, err)
	assert.Equal(t, fp, b.Fingerprint())
	publishAll(t, b, channels, func(ch string) []byte { return []byte("after") })
	waitFor(t, "every channel delivering on A,C", func() bool {
		for _, ch := range channels {
			if rec.count(ch) < 1 {
				return false
			}
		}
		return true
	})
	assert.Empty(t, evs.Unrestored(), "channels reported interrupted and never restored: %v", evs.All())
}

// TestRelayoutAwayFromFrozenInstance: the instance a re-layout drops
// freezes at the switch and stays frozen. The brokers hand its channels
// over after BarrierTimeout; the coordinator's barrier to it is bounded
// and sent beside the drain's polls, so the drain ends. (Sent in turn and
// waiting ReplyTimeout, it once made every poll look like an outage of
// the control instance, and the re-layout never finished.)
func TestRelayoutAwayFromFrozenInstance(t *testing.T) {
	sickRelayout(t, nil, func(s *redistest.Server) {
		require.NoError(t, s.Pause())
		t.Cleanup(func() { _ = s.Resume() })
	})
}

// TestRelayoutAwayFromDeadInstance: replacing an instance that died is a
// re-layout away from it; the coordinator does not require the old
// instances to answer (it once aborted the begun re-layout).
func TestRelayoutAwayFromDeadInstance(t *testing.T) {
	sickRelayout(t, func(s *redistest.Server) { require.NoError(t, s.Kill()) }, nil)
}

// TestRelayoutWhileSubscribeWaitsOnDeadInstance: a Subscribe with no
// deadline, waiting for channels of an instance that died, does not hold
// the re-layout that replaces the instance back: the re-layout finishes,
// and the Subscribe, started again under the new layout, returns with
// its channels delivering there. (It once held the gate every re-layout
// step takes for as long as the instance stayed down.)
func TestRelayoutWhileSubscribeWaitsOnDeadInstance(t *testing.T) {
	servers, b, rec, _ := sickSetup(t)
	ac := addrs(servers[0], servers[2])
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	require.NoError(t, servers[1].Kill())
	late := onShard(b, channelNames("late-", 60), 1)
	require.NotEmpty(t, late)
	done := make(chan error, 1)
	go func() { done <- b.Subscribe(context.Background(), late...) }()
	select {
	case err := <-done:
		t.Fatalf("a Subscribe to a dead instance's channels returned %v; it should wait", err)
	case <-time.After(300 * time.Millisecond):
	}

	cfg := relayoutConfig(servers[0].Addr(), ac)
	cfg.Conn = faultConn
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	_, err := Relayout(rctx, cfg)
	require.NoError(t, err, "the waiting Subscribe held the re-layout back")
	select {
	case err := <-done:
		require.NoError(t, err, "the Subscribe started again under the new layout")
	case <-ctx.Done():
		t.Fatal("the Subscribe still waits after the re-layout dropped the dead instance")
	}
	fp, err := Fingerprint(ac)
	require.NoError(t, err)
	assert.Equal(t, fp, b.Fingerprint())
	publishAll(t, b, late, func(string) []byte { return []byte("after") })
	waitFor(t, "every late channel delivering on A,C", func() bool { return len(rec.missing(late, 1)) == 0 })
}

// TestRelayoutRefusesOtherEngineRecord: a record the cluster engine wrote
// is refused before anything changes, with an error that says what the
// record is.
func TestRelayoutRefusesOtherEngineRecord(t *testing.T) {
	servers := startServers(t, 2)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	_, err := servers[0].Do(ctx, "HSET", defaultAgreement.RecordKey(), "version", "1", "fingerprint", "128-741322ee8310",
		"engine", "cluster", "partitions", "128", "prefix", "", "description", "cluster: 128 partitions")
	require.NoError(t, err)
	rep, err := Relayout(ctx, relayoutConfig(servers[0].Addr(), addrs(servers...)))
	require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	assert.ErrorContains(t, err, `engine "cluster"`)
	assert.False(t, rep.Aborted, "refused before anything changed")
	assert.Empty(t, rep.Phases)
}

// TestRelayoutURLCredentials: a fleet whose instances need a password
// given in redis:// URLs re-layouts to a new instance (the record names
// it by host:port only): the brokers and the coordinator dial it with
// the URLs' credentials. A broker that starts mid-way and follows the
// record gets them too. (Dialled without, the prepare failed with NOAUTH
// on every heartbeat, and the re-layout aborted.)
func TestRelayoutURLCredentials(t *testing.T) {
	servers := startServers(t, 3)
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	for _, s := range servers {
		_, err := s.Do(ctx, "CONFIG", "SET", "requirepass", "pw")
		require.NoError(t, err)
	}
	url := func(i int) string { return "redis://:pw@" + servers[i].Addr() }
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: []string{url(0), url(1)}, Conn: faultConn,
		Options: shardcast.Options{Handler: rec.handle}, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	channels := channelNames("url-", 30)
	require.NoError(t, b.Subscribe(ctx, channels...))
	cfg := relayoutConfig(url(0), []string{url(0), url(1), url(2)})
	cfg.Conn = faultConn
	rctx, rcancel := context.WithTimeout(ctx, 15*time.Second)
	defer rcancel()
	_, err := Relayout(rctx, cfg)
	require.NoError(t, err)
	fp, err := Fingerprint([]string{url(0), url(1), url(2)})
	require.NoError(t, err)
	assert.Equal(t, fp, b.Fingerprint())
	publishAll(t, b, channels, func(string) []byte { return []byte("1") })
	waitFor(t, "every channel delivering on three instances", func() bool {
		for _, ch := range channels {
			if rec.count(ch) < 1 {
				return false
			}
		}
		return true
	})

	late, err := Config{Addrs: []string{url(0), url(1)}}.follow(shardcast.LayoutRecord{Engine: "sharded",
		Instances: []string{servers[0].Addr(), servers[1].Addr(), servers[2].Addr()}})
	require.NoError(t, err)
	assert.Equal(t, []string{url(0), url(1), url(2)}, late.Addrs, "a follower gets the URLs' credentials for the new instance")
}
