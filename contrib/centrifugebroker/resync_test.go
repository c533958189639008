package centrifugebroker

import (
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
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

// TestTruncatedDropReachesEveryChannel: an EventDropped whose channel
// list was capped (Truncated) tells the clients of every channel with
// local subscribers to resubscribe, not only those of the listed channels.
func TestTruncatedDropReachesEveryChannel(t *testing.T) {
	s := redistest.StartStandalone(t)
	nd := startNode(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}})
	subs := connect(t, nd, "u").subscribe(t, "listed", "unlisted")
	ev := shardcast.Event{Kind: shardcast.EventDropped, Channels: []string{"listed"}, Count: 2, Since: time.Now(), Until: time.Now()}
	nd.broker.onEvent(ev)
	told := func(s *testSub) bool {
		_, _, subscribing, _ := s.events()
		return slices.Contains(subscribing, centrifuge.UnsubscribeCodeInsufficient)
	}
	waitFor(t, func() bool { return told(subs[0]) }, func() string { return "the listed channel's client to be told" })
	assert.False(t, told(subs[1]), "an untruncated event names every channel that lost messages")

	ev.Truncated = true
	nd.broker.onEvent(ev)
	waitFor(t, func() bool { return told(subs[1]) }, func() string { return "the unlisted channel's client to be told after a truncated event" })
}
