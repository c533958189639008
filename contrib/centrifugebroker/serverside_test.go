package centrifugebroker

import (
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestServerSideKnown: the Centrifuge this module builds with lays out
// ChannelContext as serverSide expects, so the sweep tells server-side
// subscriptions apart (TestLossTellsClientsToResubscribe shows it on a
// real one) instead of disconnecting every affected client.
func TestServerSideKnown(t *testing.T) {
	require.GreaterOrEqual(t, flagsField, 0, "ChannelContext is not laid out as in Centrifuge v0.40.1")
	side, known := serverSide(centrifuge.ChannelContext{})
	assert.True(t, known)
	assert.False(t, side, "no flags: not server-side")
}
