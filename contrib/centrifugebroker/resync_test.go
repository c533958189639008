package centrifugebroker

import (
	"log/slog"
	"testing"

	"github.com/centrifugal/centrifuge"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestResyncMarks: a channel stays marked from its interruption until a
// Subscribe that began after it succeeds, its restore, or its
// unsubscribe; a Subscribe that began before the interruption proves
// nothing.
func TestResyncMarks(t *testing.T) {
	node, err := centrifuge.New(centrifuge.Config{})
	require.NoError(t, err)
	r := startResync(node.Hub(), slog.New(slog.DiscardHandler))
	defer r.stop()

	before := r.begin()
	r.interrupted([]string{"a", "b", "c", "d"})
	after := r.begin()
	for _, ch := range []string{"a", "b", "c", "d"} {
		assert.True(t, r.isInterrupted(ch), ch)
	}
	assert.False(t, r.isInterrupted("other"))

	r.confirmed([]string{"a"}, before)
	assert.True(t, r.isInterrupted("a"), "a Subscribe begun before the interruption")
	r.confirmed([]string{"a"}, after)
	assert.False(t, r.isInterrupted("a"), "a Subscribe begun after it")

	r.restored([]string{"b"})
	assert.False(t, r.isInterrupted("b"))
	r.forget([]string{"c"})
	assert.False(t, r.isInterrupted("c"))
	assert.True(t, r.isInterrupted("d"))

	// A later interruption of d makes a Subscribe begun in between stale.
	between := r.begin()
	r.interrupted([]string{"d"})
	r.confirmed([]string{"d"}, between)
	assert.True(t, r.isInterrupted("d"))
}
