package shardcast_test

import (
	"context"
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/pubconn"
	"github.com/shardcast/shardcast/internal/subconn"
)

// TestPublishConnNotSentIsRootSentinel: the publishing connection both
// engines use marks unsent commands with the root package's ErrNotSent, so
// a Publish error that wraps the connection's error answers errors.Is for
// the application.
func TestPublishConnNotSentIsRootSentinel(t *testing.T) {
	p := pubconn.New(subconn.Dialer{Addr: "127.0.0.1:1"}, pubconn.Timeouts{Write: time.Second, Reply: time.Second, Redial: time.Second})
	p.Close()
	err := p.Publish(context.Background(), "c", []byte("x"), true, time.Time{})
	require.Error(t, err)
	assert.ErrorIs(t, err, shardcast.ErrNotSent)
}

// TestEventString: one line, partitions as ranges, channels as a count,
// the gap and the cause.
func TestEventString(t *testing.T) {
	since := time.Unix(1700000000, 0)
	parts := make([]int, 0, 43)
	for p := 85; p <= 127; p++ {
		parts = append(parts, p)
	}
	ev := shardcast.Event{Kind: shardcast.EventRestored, Shard: "10.0.0.1:7001", Partitions: append(parts, 3, 1), Channels: []string{"a", "b"},
		Since: since, Until: since.Add(1500 * time.Millisecond), Err: errors.New("cause")}
	assert.Equal(t, "restored shard=10.0.0.1:7001 channels=2 partitions=1,3,85-127 gap=1.5s err=cause", ev.String())
}
