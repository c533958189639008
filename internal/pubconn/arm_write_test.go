package pubconn

import (
	"net"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// deadlineConn records the write deadlines set on it.
type deadlineConn struct {
	net.Conn
	set []time.Time
}

func (c *deadlineConn) SetWriteDeadline(t time.Time) error {
	c.set = append(c.set, t)
	return nil
}

// TestArmWrite: every write starts with at least the timeout before its
// deadline and at most 1.5 times it, and a deadline is set again only
// once less than the timeout is left.
func TestArmWrite(t *testing.T) {
	const timeout = time.Minute
	nc := &deadlineConn{}
	w := &wire{nc: nc}

	before := time.Now()
	require.NoError(t, w.armWrite(timeout))
	require.Len(t, nc.set, 1)
	assert.False(t, nc.set[0].Before(before.Add(timeout+timeout/2)), "the first write has the whole timeout and its half again")

	require.NoError(t, w.armWrite(timeout))
	assert.Len(t, nc.set, 1, "more than the timeout left: the deadline stands")

	w.deadline = time.Now().Add(timeout - time.Millisecond) // as if 30 s had gone by
	before = time.Now()
	require.NoError(t, w.armWrite(timeout))
	require.Len(t, nc.set, 2, "less than the timeout left: a new deadline")
	assert.False(t, nc.set[1].Before(before.Add(timeout)))

	require.NoError(t, (&wire{nc: nc}).armWrite(0))
	assert.Len(t, nc.set, 2, "no timeout, no deadline")
}
