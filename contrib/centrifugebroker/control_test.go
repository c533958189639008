package centrifugebroker

import (
	"testing"
	"time"

	"github.com/stretchr/testify/require"
)

func TestControlsInOrderAndOffTheCaller(t *testing.T) {
	release := make(chan struct{})
	got := make(chan byte, 10)
	c := startControls(func(cmd []byte) {
		if cmd[0] == 0 {
			<-release // a command that blocks, as a server-side subscribe may
		}
		got <- cmd[0]
	})
	// The caller (the engine's worker) does not wait for a blocked command.
	done := make(chan struct{})
	go func() {
		for i := range byte(5) {
			c.add([]byte{i})
		}
		close(done)
	}()
	select {
	case <-done:
	case <-time.After(5 * time.Second):
		t.Fatal("add waited for a blocked command")
	}
	close(release)
	for i := range byte(5) {
		require.Equal(t, i, <-got)
	}
	c.close()
	c.add([]byte{9}) // after close: dropped, does not block
	require.Empty(t, got)
}
