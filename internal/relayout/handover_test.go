package relayout

import (
	"testing"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/engine"
	"github.com/stretchr/testify/assert"
)

// TestStallWithNothingHeld: a stall with nothing held hands nothing over
// and leaves every path waiting for its barrier, so that what a later
// switch brings is still held in order; the moving channels are not even
// listed. (The held case runs against real Redis in sharded's
// relayout_stall_test.go.)
func TestStallWithNothingHeld(t *testing.T) {
	c := engine.NewCore(engine.CoreConfig{Options: shardcast.Options{}.WithDefaults(), Conn: shardcast.ConnOptions{}.WithDefaults()})
	defer c.Close(func() {})
	h := NewHandover(c, 0)
	h.Reset([]int{2, 0})
	listed := false
	assert.False(t, h.Stall(func() []string { listed = true; return []string{"a"} }))
	assert.False(t, listed, "the moving channels listed for nothing")
	assert.Equal(t, []int{0, 2}, h.Waiting(), "a stall with nothing held drained paths")
	assert.True(t, h.Force(shardcast.PhaseAbort), "the paths still waited")
	assert.Empty(t, h.Waiting())
}
