package cluster

import (
	"net"
	"testing"
	"time"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// testReadLayout: ReadLayout finds no record for an application that
// never ran, and a running broker's record and registration through any
// seed; it refuses an App or address no broker could use, and fails
// when no seed answers.
func testReadLayout(t *testing.T, c *redistest.Cluster) {
	ctx := testCtx(t, 30*time.Second)
	a := shardcast.Agreement{App: "read-layout:"}
	st, err := ReadLayout(ctx, c.Seeds(), shardcast.ConnOptions{}, a)
	require.NoError(t, err)
	assert.Equal(t, shardcast.LayoutStatus{}, st, "no broker ran")

	b := newBroker(t, Config{Addrs: c.Seeds(), Partitions: 256, Prefix: "rl:", Agreement: a})
	for _, seed := range c.Seeds() {
		st, err = ReadLayout(ctx, []string{seed}, shardcast.ConnOptions{}, a)
		require.NoError(t, err, seed)
		require.NotNil(t, st.Record, seed)
		assert.Equal(t, b.Fingerprint(), st.Record.Fingerprint)
		assert.Equal(t, "cluster", st.Record.Engine)
		assert.Equal(t, 256, st.Record.Partitions)
		assert.Equal(t, "rl:", st.Record.Prefix)
		assert.Len(t, st.Brokers, 1)
		assert.Nil(t, st.Relayout)
	}

	_, err = ReadLayout(ctx, c.Seeds(), shardcast.ConnOptions{}, shardcast.Agreement{App: "{x}"})
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = ReadLayout(ctx, nil, shardcast.ConnOptions{}, a)
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)
	_, err = ReadLayout(ctx, []string{"redis//" + c.Seeds()[0]}, shardcast.ConnOptions{}, a)
	assert.ErrorIs(t, err, shardcast.ErrInvalidConfig)

	l, err := net.Listen("tcp", "127.0.0.1:0")
	require.NoError(t, err)
	down := l.Addr().String()
	require.NoError(t, l.Close())
	_, err = ReadLayout(ctx, []string{down}, shardcast.ConnOptions{DialTimeout: time.Second}, a)
	assert.ErrorContains(t, err, down, "no seed answers")
}
