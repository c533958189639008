package sharded

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/agreement"
	"github.com/shardcast/shardcast/internal/layoutkey"
	"github.com/shardcast/shardcast/internal/relayout"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// movingChannel returns a channel that lives on instance 2 of a
// three-instance list (so it moves in a 2 -> 3 re-layout).
func movingChannel(t *testing.T, prefix string) string {
	for _, ch := range channelNames(prefix, 1000) {
		if jumpIndex(ch, 3) == 2 {
			return ch
		}
	}
	t.Fatal("no moving channel")
	return ""
}

func jumpIndex(ch string, n int) int {
	r := &route{cur: make([]int, n)}
	for i := range r.cur {
		r.cur[i] = i
	}
	c, _ := r.slots(ch)
	return c
}

func joinBroker(t *testing.T, addrs []string, rec *recorder, ev *events) *Broker {
	opts := shardcast.Options{}
	if rec != nil {
		opts.Handler = rec.handle
	}
	if ev != nil {
		opts.OnEvent = ev.Add
	}
	return newBroker(t, Config{Addrs: addrs, Options: opts,
		Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
}

// TestRelayoutJoinWithNewListThenAbort: a broker started with the new
// list while a re-layout is under way is taken along (its routing becomes
// the old list); when the re-layout aborts it routes by the old list and
// registers with it too, so that once it is the only live broker its
// heartbeat keeps the record on the old list, and a broker started with
// the new list is refused (or, if accepted, reaches it).
func TestRelayoutJoinWithNewListThenAbort(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	abFP, _ := Fingerprint(ab)
	abcFP, _ := Fingerprint(abc)
	b0 := joinBroker(t, ab, nil, nil) // the fleet: one broker on ab

	var joined *Broker
	joinedRec, joinedEv := newRecorder(), &events{}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhasePrepare {
			joined = joinBroker(t, abc, joinedRec, joinedEv) // joins in switch
			cancel()                                         // then the re-layout aborts
		}
	}
	_, err := Relayout(ctx, cfg)
	require.ErrorIs(t, err, shardcast.ErrRelayoutAborted)
	waitFor(t, "the joined broker to return to the old list", func() bool { return joined.Fingerprint() == abFP })

	ch := movingChannel(t, "rv-")
	require.NoError(t, joined.Subscribe(context.Background(), ch))
	waitRenewals(t, servers[0], joined.member.ID(), 3)
	t.Logf("joined broker: routes %s, registers %s", joined.Fingerprint(), joined.member.Layout().Fingerprint)
	// A heartbeat that read the registration's layout (abc) just before
	// the follower moved it back to ab, and reached Redis only after the
	// abort ended, is refused once: the heartbeat runs one renewal at a
	// time, so at most one such stale refusal. Any refusal of ab, or a
	// second of abc (the broker kept registering the new list), fails.
	var staleNew int
	for _, e := range joinedEv.Of(shardcast.EventError) {
		var me *shardcast.LayoutMismatchError
		if !errors.As(e.Err, &me) {
			continue
		}
		t.Logf("at %s: %v", e.Since.Format("15:04:05.000000"), e.Err)
		if me.Ours.Fingerprint == abcFP {
			staleNew++
			continue
		}
		t.Errorf("EventError(ErrLayoutMismatch) raised while registering %s (the recorded list is %s)", me.Ours.Fingerprint, abFP)
	}
	assert.LessOrEqual(t, staleNew, 1, "the joined broker kept registering the new list after the abort")
	assert.Equal(t, abFP, joined.member.Layout().Fingerprint, "a broker routing ab must register with ab")

	// The rest of the fleet leaves (a rolling restart, say): its
	// registration goes, and the live broker's heartbeat holds the record.
	require.NoError(t, b0.Close())
	waitRenewals(t, servers[0], joined.member.ID(), 3)
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	t.Logf("record now %s (ab=%s abc=%s); the only live broker routes %s", fields["fingerprint"], abFP, abcFP, joined.Fingerprint())
	assert.Equal(t, joined.Fingerprint(), fields["fingerprint"], "the record must hold the layout the live broker routes by")

	// A new node configured with abc is refused: the live broker routes
	// by ab, and would miss what it published to moving channels.
	_, err = New(Config{Addrs: abc, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch)
	// One configured with ab joins, and reaches it.
	nb, err := New(Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	require.NoError(t, err)
	defer nb.Close()
	require.NoError(t, nb.Publish(context.Background(), ch, []byte("x")))
	waitFor(t, "the message to reach the joined broker", func() bool { return joinedRec.count(ch) == 1 })
}

// TestRelayoutJoinDuringAbort: while a re-layout aborts, a broker
// started with its new list is refused (it would keep routing by the new
// list after the fleet went back to the old one, and its publishes of
// moving channels would be lost); one with the old list joins.
func TestRelayoutJoinDuringAbort(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	abFP, _ := Fingerprint(ab)
	rec := newRecorder()
	b0 := joinBroker(t, ab, rec, nil)
	ch := movingChannel(t, "rv2-")
	require.NoError(t, b0.Subscribe(context.Background(), ch))

	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	m, err := openCoordinator(ctx, cfg)
	require.NoError(t, err)
	defer m.Close()
	c := &relayout.Coordinator{Agreement: cfg.Agreement.WithDefaults(), Run: m.Run, Name: relayout.NewName()}
	toRec := shardcast.LayoutRecord{Fingerprint: fingerprint(abc), Engine: "sharded", Instances: abc, Description: "abc"}
	tr, rep, err := c.Begin(ctx, toRec)
	require.NoError(t, err)
	_, err = agreement.Abort(ctx, c.Run, c.Agreement, tr.ID)
	require.NoError(t, err)

	_, err = New(Config{Addrs: abc, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	require.ErrorIs(t, err, shardcast.ErrLayoutMismatch, "a broker with the transition's new list, started during its abort")
	joined, err := New(Config{Addrs: ab, Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
	require.NoError(t, err, "a broker with the old list, started during the abort")
	defer joined.Close()
	require.NoError(t, c.Abort(ctx, tr, &rep))
	fields, _ := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, abFP, fields["fingerprint"])
	assert.Equal(t, abFP, joined.Fingerprint())

	require.NoError(t, joined.Publish(context.Background(), ch, []byte("x")))
	waitFor(t, "the joined broker's publish to arrive", func() bool { return rec.count(ch) == 1 })
}

// TestRelayoutProbesNotHeld: with delivery probes on, a probe on a new
// instance's path whose name jump-hashes to a moving position is not held
// back like a moving channel's message until the barrier: held, it would
// make the path look silent (a false EventInterrupted, ErrSilentPath, and
// a needless resubscribe) during an ordinary re-layout.
func TestRelayoutProbesNotHeld(t *testing.T) {
	servers := startServers(t, 3)
	ab, abc := addrs(servers[0], servers[1]), addrs(servers...)
	channels := channelNames("probe-rv-", 60)
	var evs []*events
	for range 6 {
		ev := &events{}
		evs = append(evs, ev)
		b := newBroker(t, Config{Addrs: ab,
			Options:   shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: ev.Add},
			Conn:      shardcast.ConnOptions{ProbeInterval: 100 * time.Millisecond, ProbeTimeout: 500 * time.Millisecond},
			Agreement: shardcast.Agreement{Heartbeat: relayoutHeartbeat}})
		require.NoError(t, b.Subscribe(context.Background(), channels...))
	}
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	cfg := relayoutConfig(ab[0], abc)
	cfg.OnPhase = func(p PhaseReport) {
		if p.Phase == shardcast.PhaseSwitch {
			// Messages of moving channels are held from the switch until
			// the drain's barriers: 1.5 s, longer than ProbeTimeout (a
			// 5 s heartbeat gives 5-10 s).
			time.Sleep(1500 * time.Millisecond)
		}
	}
	_, err := Relayout(ctx, cfg)
	require.NoError(t, err)
	silent := 0
	for i, ev := range evs {
		for _, e := range ev.Of(shardcast.EventInterrupted) {
			if errors.Is(e.Err, shardcast.ErrSilentPath) {
				silent++
				t.Logf("broker %d: %s on %s, %d channels: %v", i, e.Kind, e.Shard, len(e.Channels), e.Err)
			}
		}
	}
	assert.Zero(t, silent, "no path went silent; every message arrived")
}

// waitRenewals waits until broker id's registration on s was renewed n
// times: its expiry in the registry moved forward n times.
func waitRenewals(t *testing.T, s *redistest.Server, id string, n int) {
	t.Helper()
	last, moves := "", -1
	waitFor(t, "the broker's registration to be renewed", func() bool {
		v, err := s.Do(context.Background(), "ZSCORE", layoutkey.Registry(defaultAgreement), id)
		score, _ := v.(string)
		if err != nil || score == "" {
			return false
		}
		if score != last {
			last, moves = score, moves+1
		}
		return moves >= n
	})
}
