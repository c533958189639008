package shardcast

import (
	"errors"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast/internal/crc16"
)

// TestAgreementKeys pins the record's key name docs/LAYOUT.md §9 gives,
// and checks that it is in the slot of partition 0 for every App.
func TestAgreementKeys(t *testing.T) {
	assert.Equal(t, "{7lw}:shardcast-layout:record", Agreement{}.RecordKey())
	assert.Equal(t, "chat:{7lw}:shardcast-layout:record", Agreement{App: "chat:"}.RecordKey())
	for _, n := range SupportedPartitions() {
		l, err := NewLayout(n, "")
		require.NoError(t, err)
		for _, app := range []string{"", "chat:", "a b/c"} {
			a := Agreement{App: app}
			assert.Equal(t, l.Slot(0), crc16.Slot(a.RecordKey()), "%d partitions, App %q", n, app)
		}
	}
}

func TestAgreementValidate(t *testing.T) {
	for _, bad := range []Agreement{{Heartbeat: -time.Second}, {Heartbeat: time.Microsecond}, {App: "a{b"}, {App: "}"}} {
		assert.ErrorIs(t, bad.Validate(), ErrInvalidConfig, "%+v", bad)
	}
	for _, good := range []Agreement{{}, {Off: true}, {App: "chat:", Heartbeat: time.Millisecond}} {
		assert.NoError(t, good.Validate(), "%+v", good)
	}
	assert.Equal(t, DefaultHeartbeat, Agreement{}.WithDefaults().Heartbeat)
	assert.Equal(t, time.Second, Agreement{Heartbeat: time.Second}.WithDefaults().Heartbeat)
}

func TestLayoutMismatchError(t *testing.T) {
	err := error(&LayoutMismatchError{
		Ours:     LayoutRecord{Fingerprint: "128-aaa", Description: "cluster: 128 partitions"},
		Recorded: LayoutRecord{Fingerprint: "1024-bbb", Description: "cluster: 1024 partitions"},
		Where:    "10.0.0.1:6379", Key: "k", Live: 7, Brokers: []string{"h/1/x", "h/2/y"},
	})
	assert.True(t, errors.Is(err, ErrLayoutMismatch))
	for _, want := range []string{"128-aaa", "1024-bbb", "cluster: 128 partitions", "cluster: 1024 partitions", "10.0.0.1:6379", "7 live", "h/1/x, h/2/y, ..."} {
		assert.Contains(t, err.Error(), want)
	}
}
