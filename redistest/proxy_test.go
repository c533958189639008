package redistest

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestProxy: a subscriber behind the proxy gets every push until
// DropPushes picks a channel; that channel's messages are then swallowed
// (and counted) while the others, and command replies, still pass, until
// DropPushes(nil).
func TestProxy(t *testing.T) {
	s := StartStandalone(t)
	p := StartProxy(t, s.Addr())
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	sub, err := dialRESP(ctx, p.Addr(), nil)
	require.NoError(t, err)
	defer sub.close()
	_, err = sub.do(ctx, []string{"SUBSCRIBE", "kept", "cut"}, []string{"SSUBSCRIBE", "skept"})
	require.NoError(t, err)
	_, err = sub.receive(ctx) // the second SUBSCRIBE confirmation
	require.NoError(t, err)

	publish := func(cmd, ch, msg string) {
		t.Helper()
		_, err := s.Do(ctx, cmd, ch, msg)
		require.NoError(t, err)
	}
	var mu sync.Mutex
	var kinds []string
	p.DropPushes(func(kind, channel string) bool {
		mu.Lock()
		defer mu.Unlock()
		kinds = append(kinds, kind)
		return channel == "cut"
	})
	publish("PUBLISH", "cut", "1")
	publish("PUBLISH", "kept", "2")
	publish("SPUBLISH", "skept", "3")
	for _, want := range []any{
		[]any{"message", "kept", "2"},
		[]any{"smessage", "skept", "3"},
	} {
		got, err := sub.receive(ctx)
		require.NoError(t, err)
		assert.Equal(t, want, got)
	}
	assert.Equal(t, int64(1), p.Dropped())
	mu.Lock()
	assert.Equal(t, []string{"message", "message", "smessage"}, kinds)
	mu.Unlock()
	reply, err := sub.do(ctx, []string{"PING"})
	require.NoError(t, err)
	assert.Equal(t, []any{"pong", ""}, reply[0], "replies pass")

	p.DropPushes(nil)
	publish("PUBLISH", "cut", "4")
	got, err := sub.receive(ctx)
	require.NoError(t, err)
	assert.Equal(t, []any{"message", "cut", "4"}, got)
	assert.Equal(t, int64(1), p.Dropped())
}

func TestMessagePush(t *testing.T) {
	for v, want := range map[string][2]string{
		"*3\r\n$7\r\nmessage\r\n$2\r\nch\r\n$1\r\nx\r\n":        {"message", "ch"},
		"*3\r\n$8\r\nsmessage\r\n$4\r\n{t}a\r\n$0\r\n\r\n":      {"smessage", "{t}a"},
		"*3\r\n$9\r\nsubscribe\r\n$2\r\nch\r\n:1\r\n":           {},
		"*4\r\n$8\r\npmessage\r\n$1\r\n*\r\n$2\r\nch\r\n$0\r\n": {},
		"*3\r\n$7\r\nmessage\r\n$9\r\nch\r\n":                   {},
		"+OK\r\n":                                               {},
	} {
		kind, channel, ok := messagePush([]byte(v))
		assert.Equal(t, want[0] != "", ok, "%q", v)
		assert.Equal(t, want, [2]string{kind, channel}, "%q", v)
	}
}
