package cluster

import (
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestPubSubOnlyUser: with the default settings, a user allowed only what
// the cluster engine needs for sharded Pub/Sub and its health checks
// (SPUBLISH, SSUBSCRIBE, SUNSUBSCRIBE, PING, CLUSTER SLOTS, ROLE) gets a
// working broker without the layout record, and exactly one Warn that
// says so, with the server's NOPERM and Agreement.Off. Not parallel: it
// swaps slog.Default.
func TestPubSubOnlyUser(t *testing.T) {
	c := redistest.StartCluster(t, 1, 0, redistest.WithArgs("--user", "pubonly", "on", ">pw", "resetchannels", "&*",
		"+spublish", "+ssubscribe", "+sunsubscribe", "+ping", "+cluster|slots", "+role"))
	log := brokertest.CaptureDefaultLog(t)
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: c.Seeds(), Conn: shardcast.ConnOptions{Username: "pubonly", Password: "pw"},
		Options: shardcast.Options{Handler: rec.handle}})
	assert.Nil(t, b.member, "the record is off")
	channels := channelsPerPartition(b.Layout(), 1, "acl:")
	require.NoError(t, b.Subscribe(testCtx(t, time.Minute), channels...))
	publishAll(t, b, channels, "x")
	require.True(t, waitFor(30*time.Second, func() bool {
		for _, ch := range channels {
			if rec.count(ch) < 1 {
				return false
			}
		}
		return true
	}), "every message delivered")
	warns := log.Lines("WARN")
	require.Len(t, warns, 1, "exactly one Warn: %q", warns)
	for _, want := range []string{"layout record off", "NOPERM", "Agreement.Off"} {
		assert.Contains(t, warns[0], want)
	}
	t.Logf("the Warn: %s", warns[0])
}
