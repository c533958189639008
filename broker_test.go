package shardcast_test

import (
	"context"
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
