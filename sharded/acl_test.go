package sharded

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/brokertest"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// pubSubOnly is an ACL user allowed what a sharded broker needs for
// Pub/Sub and its health checks, and nothing else: no scripts, no keys,
// no INFO.
var pubSubOnly = redistest.WithArgs("--user", "pubonly", "on", ">pw", "resetchannels", "&*",
	"+publish", "+subscribe", "+unsubscribe", "+ping")

// recordCommands are the ACL rules docs/LAYOUT.md ("The layout record")
// gives for the record's scripts, with its key pattern.
const recordCommands = "+evalsha +eval +time +get +set +del +hget +hmget +hset +hgetall " +
	"+zadd +zcard +zscore +zrange +zrangebyscore +zrem +zremrangebyscore"

// TestPubSubOnlyUser: with the default settings, a user allowed Pub/Sub
// only gets a working broker, which runs without the layout record, writes
// no key, and logs exactly one Warn saying the record is off, why (the
// server's NOPERM) and how to silence it (Agreement.Off); with
// Agreement.Off set there is no Warn. Not parallel: it swaps slog.Default.
func TestPubSubOnlyUser(t *testing.T) {
	servers := startServers(t, 2, pubSubOnly)
	log := brokertest.CaptureDefaultLog(t)
	login := shardcast.ConnOptions{Username: "pubonly", Password: "pw"}
	rec := newRecorder()
	b := newBroker(t, Config{Addrs: addrs(servers...), Conn: login, Options: shardcast.Options{Handler: rec.handle}})
	assert.Nil(t, b.member, "the record is off")

	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	channels := channelNames("acl:", 20)
	require.NoError(t, b.Subscribe(ctx, channels...))
	publishAll(t, b, channels, payloadOf)
	waitFor(t, "every message delivered", func() bool { return len(rec.missing(channels, 1)) == 0 })

	warns := log.Lines("WARN")
	require.Len(t, warns, 1, "exactly one Warn: %q", warns)
	for _, want := range []string{"layout record off", "NOPERM", "Agreement.Off", defaultAgreement.RecordKey()} {
		assert.Contains(t, warns[0], want)
	}
	t.Logf("the Warn: %s", warns[0])
	for _, s := range servers {
		n, err := s.Do(ctx, "DBSIZE")
		require.NoError(t, err)
		assert.EqualValues(t, 0, n, "nothing written on %s", s.Addr())
	}

	off := newBroker(t, Config{Addrs: addrs(servers...), Conn: login, Agreement: shardcast.Agreement{Off: true}})
	require.NoError(t, off.Publish(ctx, channels[0], []byte("x")))
	assert.Len(t, log.Lines("WARN"), 1, "Agreement.Off silences it")

	// The grant docs/LAYOUT.md gives ("The layout record") turns the record
	// on for that user, without a Warn.
	grant := []string{"ACL", "SETUSER", "pubonly", "~" + defaultAgreement.App + "{7lw}:shardcast-layout:*"}
	grant = append(grant, strings.Fields(recordCommands)...)
	for _, s := range servers {
		_, err := s.Do(ctx, grant...)
		require.NoError(t, err)
	}
	on := newBroker(t, Config{Addrs: addrs(servers...), Conn: login})
	assert.NotNil(t, on.member, "the record is on")
	assert.Len(t, log.Lines("WARN"), 1, "no Warn for a user granted the record's commands: %q", log.Lines("WARN"))
	fields, members := recordOn(t, servers[0], defaultAgreement)
	assert.Equal(t, on.Fingerprint(), fields["fingerprint"])
	assert.Equal(t, []string{on.member.ID()}, members)

	// A user that may not even PING is refused, as before: the record's
	// fallback covers scripts only.
	_, err := New(Config{Addrs: addrs(servers...), Conn: shardcast.ConnOptions{Username: "pubonly", Password: "nope"}})
	require.Error(t, err)
	assert.True(t, strings.Contains(err.Error(), "WRONGPASS"), "%v", err)
}
