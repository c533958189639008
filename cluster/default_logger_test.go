package cluster

import (
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// partitionsAttr finds a log line's partitions attribute.
var partitionsAttr = regexp.MustCompile(`partitions=("[^"]*"|\S+)`)

// TestDefaultLoggerSpeaks: a broker built without Options.Logger logs on
// slog.Default(): nothing at Warn while it subscribes and publishes in a
// steady state; when a master is killed, a Warn that names the master, says
// what happened to the connection and lists the lost partitions compactly
// (ranges or a count, not 43 numbers); once it is back, an Info that says
// the subscriptions were restored. Not parallel: it swaps slog.Default.
func TestDefaultLoggerSpeaks(t *testing.T) {
	c := redistest.StartCluster(t, 3, 0)
	log := brokertest.CaptureDefaultLog(t)
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: c.Seeds(), Options: shardcast.Options{Handler: rec.handle}})
	channels := channelsPerPartition(b.Layout(), 1, "speak:")
	ctx := testCtx(t, 2*time.Minute)
	require.NoError(t, b.Subscribe(ctx, channels...))
	for range 3 {
		publishAll(t, b, channels, "steady")
	}
	require.True(t, waitFor(30*time.Second, func() bool {
		for _, ch := range channels {
			if rec.count(ch) < 3 {
				return false
			}
		}
		return true
	}), "every message delivered")
	assert.Empty(t, log.Lines("WARN"), "a steady state logs nothing at Warn")
	assert.NotEmpty(t, log.Lines("INFO"), "the default logger is not silent (the layout record's line)")

	masters, err := c.Masters(ctx)
	require.NoError(t, err)
	victim := masters[1]
	require.NoError(t, victim.Kill())
	var lost string
	require.True(t, waitFor(30*time.Second, func() bool {
		for _, l := range log.Lines("WARN") {
			if strings.Contains(l, "subscriptions interrupted") && strings.Contains(l, "node="+victim.Addr()) {
				lost = l
				return true
			}
		}
		return false
	}), "a Warn names the killed master; got %q", log.Lines("WARN"))
	t.Logf("the loss: %s", lost)
	assert.Regexp(t, `err="subscribe connection (closed by the server|lost)[^"]*"`, lost, "the cause says what happened")
	m := partitionsAttr.FindStringSubmatch(lost)
	require.NotNil(t, m, "the partitions are listed")
	assert.NotContains(t, m[1], "[", "not a Go slice")
	assert.Less(t, strings.Count(m[1], ","), 9, "ranges or a count, not every number: %s", m[1])
	assert.Less(t, len(m[1]), 60, m[1])

	require.NoError(t, c.RestartNode(ctx, victim))
	require.True(t, waitFor(time.Minute, func() bool {
		for _, l := range log.Lines("INFO") {
			if strings.Contains(l, "subscriptions restored") && strings.Contains(l, "node="+victim.Addr()) {
				return true
			}
		}
		return false
	}), "an Info names the restored master")
}
