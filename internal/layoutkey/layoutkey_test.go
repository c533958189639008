package layoutkey

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/internal/crc16"
)

// TestNames pins the names docs/LAYOUT.md §9 gives, and checks that every
// key and barrier shares the slot of the record, partition 0's, for every
// App, so that one script can change them together.
func TestNames(t *testing.T) {
	chat := shardcast.Agreement{App: "chat:"}
	for want, got := range map[string]string{
		"chat:{7lw}:shardcast-layout:brokers":    Registry(chat),
		"chat:{7lw}:shardcast-layout:transition": Transition(chat),
		"chat:{7lw}:shardcast-layout:instance":   Instance(chat),
		"chat:{7lw}:shardcast-layout:placement":  Placement(chat),
		"chat:{7lw}:shardcast-layout:acks":       Acks(chat),
		"chat:{7lw}:shardcast-layout:barrier:r1": Barrier(chat, "r1"),
		"{7lw}:shardcast-layout:brokers":         Registry(shardcast.Agreement{}),
		"{7lw}:shardcast-layout:barrier:":        Barrier(shardcast.Agreement{}, ""),
	} {
		assert.Equal(t, want, got)
	}
	for _, n := range shardcast.SupportedPartitions() {
		l, err := shardcast.NewLayout(n, "")
		require.NoError(t, err)
		for _, app := range []string{"", "chat:", "a b/c"} {
			a := shardcast.Agreement{App: app}
			for _, k := range []string{Registry(a), Transition(a), Instance(a), Placement(a), Acks(a), Barrier(a, "x")} {
				assert.Equal(t, l.Slot(0), crc16.Slot(k), "%s: %d partitions", k, n)
			}
		}
	}
}
