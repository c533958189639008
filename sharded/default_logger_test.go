package sharded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDefaultLoggerSpeaks: a broker built without Options.Logger logs on
// slog.Default(): nothing at Warn in a steady state of publishes; a Warn
// naming the instance and what happened to its connection when it is
// killed, Warns for the failed reconnects while it is down, and an Info
// once its subscriptions are restored. Not parallel: it swaps
// slog.Default.
func TestDefaultLoggerSpeaks(t *testing.T) {
	servers := startServers(t, 2)
	log := brokertest.CaptureDefaultLog(t)
	rec := newRecorder()
	// Only the backoff is shortened, so that the restart is noticed soon.
	b := newBroker(t, Config{Addrs: addrs(servers...), Options: shardcast.Options{Handler: rec.handle},
		Conn: shardcast.ConnOptions{ReconnectMax: 200 * time.Millisecond}})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	channels := channelNames("speak:", 40)
	require.NoError(t, b.Subscribe(ctx, channels...))
	for range 3 {
		publishAll(t, b, channels, payloadOf)
	}
	waitFor(t, "every message delivered", func() bool { return len(rec.missing(channels, 3)) == 0 })
	assert.Empty(t, log.Lines("WARN"), "a steady state logs nothing at Warn")

	victim := servers[1]
	require.NoError(t, victim.Kill())
	waitFor(t, "a Warn naming the killed instance's lost subscriptions", func() bool {
		return find(log.Lines("WARN"), "subscriptions interrupted", "node="+victim.Addr(), "subscribe connection") != ""
	})
	t.Logf("the loss: %s", find(log.Lines("WARN"), "subscriptions interrupted"))
	waitFor(t, "a Warn naming the failed reconnect", func() bool {
		return find(log.Lines("WARN"), "background error", "node="+victim.Addr(), "connect attempt") != ""
	})
	require.NoError(t, victim.Restart(ctx))
	waitFor(t, "an Info naming the restored instance", func() bool {
		return find(log.Lines("INFO"), "subscriptions restored", "node="+victim.Addr()) != ""
	})
	assert.Empty(t, find(log.Lines("WARN"), "node="+servers[0].Addr()), "the instance that stayed up is not named")
}

// find returns the first line that contains every one of parts, or "".
func find(lines []string, parts ...string) string {
	for _, l := range lines {
		ok := true
		for _, p := range parts {
			ok = ok && strings.Contains(l, p)
		}
		if ok {
			return l
		}
	}
	return ""
}
