package sharded

import (
	"context"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestRefusedResubscribeIsRetried: when Redis refuses the resubscribe
// after a reconnect (here an ACL change revoked the channel, which also
// made Redis drop the subscriber), the channel stays wanted and
// interrupted, the broker keeps retrying every RecoveryInterval, and once
// Redis allows it again the channel is restored and delivers.
func TestRefusedResubscribeIsRetried(t *testing.T) {
	s := redistest.StartStandalone(t, redistest.WithArgs("--user", "app", "on", ">pw", "~*", "&*", "+@all"))
	ctx, cancel := context.WithTimeout(context.Background(), waitTimeout)
	defer cancel()
	rec := newRecorder()
	var evs events
	url := "redis://app:pw@" + s.Addr()
	sub := newBroker(t, Config{
		Addrs:   []string{url},
		Options: shardcast.Options{Handler: rec.handle, OnEvent: evs.Add},
		Conn:    shardcast.ConnOptions{RecoveryInterval: 20 * time.Millisecond},
	})
	pub := newBroker(t, Config{Addrs: []string{url}})
	require.NoError(t, sub.Subscribe(ctx, "revoked"))

	_, err := s.Do(ctx, "ACL", "SETUSER", "app", "resetchannels", "&other")
	require.NoError(t, err)
	waitFor(t, "the interruption", func() bool { return len(evs.Of(shardcast.EventInterrupted)) > 0 })
	waitFor(t, "three refused resubscribes", func() bool { return rejectedSubscribes(t, s) >= 3 })
	assert.Empty(t, evs.Of(shardcast.EventRestored), "nothing is restored while Redis refuses")
	assert.Equal(t, 1, sub.Stats().Channels, "the channel stays wanted")

	_, err = s.Do(ctx, "ACL", "SETUSER", "app", "allchannels")
	require.NoError(t, err)
	waitFor(t, "the restore", func() bool { return len(evs.Of(shardcast.EventRestored)) > 0 })
	assert.Equal(t, []string{"revoked"}, evs.Of(shardcast.EventRestored)[0].Channels)
	require.NoError(t, pub.Publish(ctx, "revoked", []byte("back")))
	waitFor(t, "delivery after the restore", func() bool { return rec.count("revoked") == 1 })
}

// rejectedSubscribes returns how many SUBSCRIBE commands Redis refused.
func rejectedSubscribes(t *testing.T, s *redistest.Server) int {
	t.Helper()
	info, err := s.Info(context.Background(), "commandstats")
	require.NoError(t, err)
	for _, field := range strings.Split(info["cmdstat_subscribe"], ",") {
		if v, ok := strings.CutPrefix(field, "rejected_calls="); ok {
			n, err := strconv.Atoi(v)
			require.NoError(t, err)
			return n
		}
	}
	return 0
}
