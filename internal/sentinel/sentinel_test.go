package sentinel

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"go.uber.org/goleak"
)

// TestMain fails the package if a test leaves a goroutine behind.
func TestMain(m *testing.M) { goleak.VerifyTestMain(redistest.StoppingOnDemand(m)) }

func TestParseMaster(t *testing.T) {
	addr, epoch, err := parseMaster([]any{"name", "m", "ip", "10.0.0.1", "port", "6380", "config-epoch", "7"})
	require.NoError(t, err)
	assert.Equal(t, "10.0.0.1:6380", addr)
	assert.EqualValues(t, 7, epoch)
	addr, _, err = parseMaster([]any{"name", "m", "ip", "::1", "port", "6380"})
	require.NoError(t, err)
	assert.Equal(t, "[::1]:6380", addr)
	for _, bad := range []any{nil, "x", []any{"name", "m"}, []any{"ip", "h"}} {
		_, _, err := parseMaster(bad)
		assert.Error(t, err, "%v", bad)
	}
}

func TestEventName(t *testing.T) {
	assert.Equal(t, "g1", name([]string{"master", "g1", "127.0.0.1", "6379"}))
	assert.Equal(t, "g1", name([]string{"slave", "127.0.0.1:7000", "127.0.0.1", "7000", "@", "g1", "127.0.0.1", "6379"}))
	assert.Equal(t, "", name([]string{"sentinel"}))
	assert.Equal(t, "", name(nil))
}

// TestAskAndWatch: Ask names the master, Watch reports a SENTINEL
// FAILOVER's new master once, dated no later than the switch, and Ask
// fails with ErrNoAnswer for a master no Sentinel knows and when no
// Sentinel answers.
func TestAskAndWatch(t *testing.T) {
	r := redistest.StartReplicated(t, 1)
	s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "g", Servers: r})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	timeouts := pubconn.Timeouts{Write: time.Second, Reply: time.Second, Redial: 100 * time.Millisecond}
	g := New(s.Addrs(), "g", subconn.Dialer{Timeout: time.Second}, timeouts)
	defer g.Close()
	addr, err := g.Ask(ctx)
	require.NoError(t, err)
	assert.Equal(t, r.Master().Addr(), addr)

	type move struct {
		addr  string
		since time.Time
	}
	var mu sync.Mutex
	var moves []move
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Watch(wctx, addr, 200*time.Millisecond, func(a string, since time.Time) {
			mu.Lock()
			moves = append(moves, move{a, since})
			mu.Unlock()
		})
	}()
	time.Sleep(500 * time.Millisecond) // the listeners subscribe
	began := time.Now()
	require.NoError(t, s.Failover(ctx, "g"))
	newAddr, err := s.WaitSwitch(ctx, "g", addr)
	require.NoError(t, err)
	require.Eventually(t, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(moves) > 0
	}, 10*time.Second, 20*time.Millisecond, "no move reported")
	time.Sleep(time.Second) // a second report would come by now
	stop()
	<-done
	mu.Lock()
	defer mu.Unlock()
	require.Len(t, moves, 1)
	assert.Equal(t, newAddr, moves[0].addr)
	require.False(t, moves[0].since.IsZero(), "the failover's start was heard")
	assert.False(t, moves[0].since.Before(began), "dated after the failover was asked for")

	other := New(s.Addrs(), "nosuch", subconn.Dialer{Timeout: time.Second}, timeouts)
	defer other.Close()
	_, err = other.Ask(ctx)
	assert.ErrorIs(t, err, ErrNoAnswer)
	_, err = other.Resolve(ctx)
	assert.ErrorIs(t, err, ErrNoAnswer, "nothing known to fall back on")

	dead := New([]string{"127.0.0.1:1"}, "g", subconn.Dialer{Timeout: time.Second}, timeouts)
	defer dead.Close()
	_, err = dead.Ask(ctx)
	assert.ErrorIs(t, err, ErrNoAnswer)
}

// TestWatchDatesUnheardFailover: a watch whose listeners missed the
// failover's start (their subscriptions killed just before SENTINEL
// FAILOVER, and re-made only after relisten) still dates the move, from
// the last ask that named the old master: not zero, which would leave the
// window to begin at the old master's last health, later than publishers
// told of the switch sooner may have written to the new one.
func TestWatchDatesUnheardFailover(t *testing.T) {
	r := redistest.StartReplicated(t, 1)
	s := redistest.StartSentinels(t, 3, redistest.SentinelGroup{Name: "g", Servers: r})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	timeouts := pubconn.Timeouts{Write: time.Second, Reply: time.Second, Redial: 100 * time.Millisecond}
	g := New(s.Addrs(), "g", subconn.Dialer{Timeout: time.Second}, timeouts)
	defer g.Close()
	addr, err := g.Ask(ctx)
	require.NoError(t, err)

	type move struct {
		addr      string
		since, at time.Time
	}
	moves := make(chan move, 4)
	wctx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() {
		defer close(done)
		g.Watch(wctx, addr, 100*time.Millisecond, func(a string, since time.Time) {
			moves <- move{a, since, time.Now()}
		})
	}()
	defer func() { stop(); <-done }()
	time.Sleep(500 * time.Millisecond) // the listeners subscribe
	for _, n := range s.Nodes() {
		_, err := n.Do(ctx, "CLIENT", "KILL", "TYPE", "pubsub")
		require.NoError(t, err)
	}
	began := time.Now()
	require.NoError(t, s.Failover(ctx, "g"))
	newAddr, err := s.WaitSwitch(ctx, "g", addr)
	require.NoError(t, err)
	select {
	case m := <-moves:
		assert.Equal(t, newAddr, m.addr)
		require.False(t, m.since.IsZero(), "the move is dated though no failover event was heard")
		assert.True(t, m.since.Before(m.at), "dated before it was seen")
		assert.False(t, m.since.Before(began.Add(-time.Second)), "dated by a recent ask, not an old one")
	case <-ctx.Done():
		t.Fatal("no move reported")
	}
}

// TestHealthyReplicas: a replica counts when Sentinel sees it up, its link
// up and following the master named; the rest are left out, and the list
// comes sorted.
func TestHealthyReplicas(t *testing.T) {
	replica := func(ip, port, flags, link, masterPort string) any {
		return []any{"ip", ip, "port", port, "flags", flags, "master-link-status", link, "master-host", "10.0.0.1", "master-port", masterPort}
	}
	reply := []any{
		replica("10.0.0.3", "6379", "slave", "ok", "6379"),
		replica("10.0.0.2", "6379", "slave", "ok", "6379"),
		replica("10.0.0.4", "6379", "s_down,slave", "ok", "6379"),
		replica("10.0.0.5", "6379", "slave,disconnected", "ok", "6379"),
		replica("10.0.0.6", "6379", "slave", "err", "6379"),
		replica("10.0.0.7", "6379", "slave", "ok", "6380"), // follows another master
	}
	assert.Equal(t, []string{"10.0.0.2:6379", "10.0.0.3:6379"}, healthyReplicas(reply, "10.0.0.1:6379"))
	assert.Len(t, healthyReplicas(reply, ""), 3, "no master known yet: any it follows")
	assert.Empty(t, healthyReplicas("junk", "10.0.0.1:6379"))
}
