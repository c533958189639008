package centrifugebroker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// Every context sharedDeadlines hands out ends no later than the timeout
// after the call that got it, and no sooner than the timeout less the
// slack; stop cancels the current one.
func TestSharedDeadlines(t *testing.T) {
	const timeout = 64 * time.Millisecond
	s := newSharedDeadlines(timeout)
	for range 10000 {
		before := time.Now()
		ctx := s.get()
		after := time.Now()
		d, ok := ctx.Deadline()
		require.True(t, ok)
		// The call started between before and after.
		require.False(t, d.After(after.Add(timeout)), "deadline later than the timeout")
		require.False(t, d.Before(before.Add(timeout-s.slack)), "deadline sooner than the timeout less the slack")
	}
	cur := s.cur.Load()
	require.NotNil(t, cur)
	s.stop()
	assert.Error(t, cur.ctx.Err(), "stop leaves the current context running")
	assert.Nil(t, s.cur.Load())
}
