package sharded

import (
	"bytes"
	"context"
	"runtime"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestCloseReleasesSubscriptions: once Close returned, the instance
// holds none of the broker's subscriptions. (Calls after Close are
// checked by the conformance suite.)
func TestCloseReleasesSubscriptions(t *testing.T) {
	s := redistest.StartStandalone(t)
	b, err := New(Config{Addrs: addrs(s), Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	require.NoError(t, err)
	require.NoError(t, b.Subscribe(context.Background(), "a", "b"))
	require.Equal(t, 2, pubsubChannels(t, s))
	require.NoError(t, b.Close())
	waitFor(t, "the subscribe connection to go", func() bool { return pubsubChannels(t, s) == 0 })
}

// TestPublishOnlyHoldsNoSubscribeConnection: a broker without a Handler
// opens no subscribe connection, even when asked to subscribe. (Its
// ErrNoHandler and its publishing are checked by the conformance suite.)
func TestPublishOnlyHoldsNoSubscribeConnection(t *testing.T) {
	s := redistest.StartStandalone(t)
	ctx := context.Background()
	sub := newBroker(t, Config{Addrs: addrs(s), Options: shardcast.Options{Handler: func(shardcast.Message) {}}})
	pub := newBroker(t, Config{Addrs: addrs(s)})
	require.ErrorIs(t, pub.Subscribe(ctx, "a"), shardcast.ErrNoHandler)
	require.NoError(t, sub.Subscribe(ctx, "a"))
	require.NoError(t, pub.Publish(ctx, "a", []byte("hi")))
	clients, err := s.ClientList(ctx)
	require.NoError(t, err)
	subscribers := 0
	for _, c := range clients {
		if c["sub"] != "0" {
			subscribers++
		}
	}
	assert.Equal(t, 1, subscribers, "the publish-only broker holds no subscribe connection")
}

// TestInvalidConfig: every unusable configuration is refused with
// ErrInvalidConfig before anything is dialled.
func TestInvalidConfig(t *testing.T) {
	good := "127.0.0.1:6379"
	for name, cfg := range map[string]Config{
		"no addrs":       {},
		"empty addr":     {Addrs: []string{""}},
		"no port":        {Addrs: []string{"localhost"}},
		"bad url":        {Addrs: []string{"redis://[::1"}},
		"bad scheme":     {Addrs: []string{"http://127.0.0.1:6379"}},
		"unix socket":    {Addrs: []string{"unix:///tmp/redis.sock"}},
		"second bad":     {Addrs: []string{good, "nope"}},
		"neg workers":    {Addrs: []string{good}, Options: shardcast.Options{Workers: -1}},
		"neg queue":      {Addrs: []string{good}, Options: shardcast.Options{QueueSize: -1}},
		"neg batch":      {Addrs: []string{good}, Options: shardcast.Options{SubscribeBatch: -1}},
		"neg payload":    {Addrs: []string{good}, Options: shardcast.Options{MaxPayload: -1}},
		"neg conns":      {Addrs: []string{good}, Conn: shardcast.ConnOptions{SubscribeConns: -1}},
		"neg dial":       {Addrs: []string{good}, Conn: shardcast.ConnOptions{DialTimeout: -1}},
		"neg reconnect":  {Addrs: []string{good}, Conn: shardcast.ConnOptions{ReconnectMin: -1}},
		"neg cmdtimeout": {Addrs: []string{good}, Conn: shardcast.ConnOptions{CommandTimeout: -1}},
	} {
		t.Run(name, func(t *testing.T) {
			b, err := New(cfg)
			require.ErrorIs(t, err, shardcast.ErrInvalidConfig)
			require.Nil(t, b)
		})
	}
}

// TestUnreachableInstance: New fails, naming the instance, instead of
// returning a broker that cannot publish.
func TestUnreachableInstance(t *testing.T) {
	s := redistest.StartStandalone(t)
	addr := s.Addr()
	require.NoError(t, s.Kill())
	b, err := New(Config{Addrs: []string{addr}})
	require.Error(t, err)
	require.Nil(t, b)
	assert.Contains(t, err.Error(), addr)
}

// TestPasswords: credentials in a redis:// URL or in Config reach Redis,
// and wrong ones fail New with Redis's own complaint.
func TestPasswords(t *testing.T) {
	// An ACL user keeps the harness's own password-less connections working.
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">s3cret", "~*", "&*", "+@all"))
	ctx := context.Background()
	t.Run("url", func(t *testing.T) {
		roundTrip(t, Config{Addrs: []string{"redis://app:s3cret@" + s.Addr()}})
	})
	t.Run("config", func(t *testing.T) {
		roundTrip(t, Config{Addrs: []string{s.Addr()}, Conn: shardcast.ConnOptions{Username: "app", Password: "s3cret"}})
	})
	t.Run("wrong password", func(t *testing.T) {
		b, err := New(Config{Addrs: []string{"redis://app:wrong@" + s.Addr()}})
		require.Error(t, err)
		require.Nil(t, b)
		assert.Contains(t, err.Error(), "WRONGPASS")
		assert.NotContains(t, err.Error(), "wrong", "the password is not echoed")
	})
	t.Run("requirepass", func(t *testing.T) {
		// Password-only auth, as most hosted Redis offers it. Set last: the
		// harness cannot talk to the server after this.
		_, err := s.Do(ctx, "CONFIG", "SET", "requirepass", "p4ss")
		require.NoError(t, err)
		roundTrip(t, Config{Addrs: []string{"redis://:p4ss@" + s.Addr()}})
		_, err = New(Config{Addrs: []string{s.Addr()}})
		require.Error(t, err)
		assert.True(t, strings.Contains(err.Error(), "NOAUTH") || strings.Contains(err.Error(), "WRONGPASS"), "error: %v", err)
	})
}

// TestRefusedSubscribeIsUndone: when Redis refuses one command of a
// Subscribe (here an ACL forbids one channel), the channels of the
// commands it accepted are unsubscribed again and the call fails with
// Redis's reason.
func TestRefusedSubscribeIsUndone(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&ok:*", "+@all"))
	ctx := context.Background()
	b := newBroker(t, Config{
		Addrs: []string{"redis://app:pw@" + s.Addr()},
		// Two channels per command: the allowed ones go first and succeed.
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, SubscribeBatch: 2},
	})
	require.NoError(t, b.Subscribe(ctx, "ok:before"))

	err := b.Subscribe(ctx, "ok:1", "ok:2", "ok:before", "forbidden")
	require.Error(t, err)
	assert.Contains(t, err.Error(), "NOPERM")
	for _, ch := range []string{"ok:1", "ok:2", "forbidden"} {
		assert.Zero(t, numsub(t, s, ch), "channel %s", ch)
	}
	assert.EqualValues(t, 1, numsub(t, s, "ok:before"), "a channel subscribed before the call stays")
	assert.Equal(t, 1, b.Stats().Channels)

	// The connection is still good.
	require.NoError(t, b.Subscribe(ctx, "ok:1"))
	assert.EqualValues(t, 1, numsub(t, s, "ok:1"))
}

// TestRefusedUnsubscribeDropsTheConnection: when Redis refuses an
// UNSUBSCRIBE on a live connection (here an ACL forbids the command), the
// broker cannot know what Redis still holds, so it drops the connection;
// the reconnect resubscribes only the channels still wanted.
func TestRefusedUnsubscribeDropsTheConnection(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&*", "+@all", "-unsubscribe"))
	ctx := context.Background()
	var evs events
	b := newBroker(t, Config{
		Addrs:   []string{"redis://app:pw@" + s.Addr()},
		Options: shardcast.Options{Handler: func(shardcast.Message) {}, OnEvent: evs.Add},
	})
	require.NoError(t, b.Subscribe(ctx, "gone", "kept"))

	require.NoError(t, b.Unsubscribe(ctx, "gone"))
	waitFor(t, "the dropped connection to be resubscribed", func() bool {
		return len(evs.Of(shardcast.EventRestored)) > 0
	})
	assert.Zero(t, numsub(t, s, "gone"), "the refused channel is not subscribed after the reconnect")
	assert.EqualValues(t, 1, numsub(t, s, "kept"))
	assert.Equal(t, 1, b.Stats().Channels)
	assert.EqualValues(t, 1, b.Stats().Reconnects)
	assert.Equal(t, []string{"kept"}, evs.Of(shardcast.EventRestored)[0].Channels)
}

// TestCloseEndsAWaitingPublish: a Publish waiting for a frozen instance's
// reply when Close runs returns shardcast.ErrClosed, as calls after Close
// do, not the publishing connection's own error.
func TestCloseEndsAWaitingPublish(t *testing.T) {
	s := redistest.StartStandalone(t)
	b, err := New(Config{Addrs: addrs(s)})
	require.NoError(t, err)
	require.NoError(t, s.Pause())
	t.Cleanup(func() { _ = s.Resume() })
	done := make(chan error, 1)
	go func() { done <- b.Publish(context.Background(), "a", []byte("x")) }()
	// Once the call is inside the publishing connection it is past the
	// broker's own closed check, and waits for a reply that cannot come
	// while the instance is frozen.
	waitFor(t, "the publish to reach the publishing connection", func() bool {
		buf := make([]byte, 1<<20)
		return bytes.Contains(buf[:runtime.Stack(buf, true)], []byte("pubconn.(*Pub).do("))
	})
	require.NoError(t, b.Close())
	select {
	case err := <-done:
		require.ErrorIs(t, err, shardcast.ErrClosed)
	case <-time.After(waitTimeout):
		t.Fatal("Close left the waiting Publish blocked")
	}
}
