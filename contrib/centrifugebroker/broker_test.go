package centrifugebroker

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/shardcast/shardcast"
	"github.com/shardcast/shardcast/redistest"
	"github.com/shardcast/shardcast/sharded"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestControlChannelReserved: no client can subscribe or publish to the
// control channel, so none can unsubscribe the node from it.
func TestControlChannelReserved(t *testing.T) {
	s := redistest.StartStandalone(t)
	nd := startNode(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}, ControlChannel: "ctl"})
	for _, err := range []error{
		nd.broker.Subscribe("ctl"),
		nd.broker.Unsubscribe("ctl"),
		nd.broker.PublishJoin("ctl", &centrifuge.ClientInfo{}),
		func() error { _, err := nd.broker.Publish("ctl", nil, centrifuge.PublishOptions{}); return err }(),
	} {
		assert.True(t, errors.Is(err, ErrReservedChannel), "got %v", err)
	}
}

// TestReservedChannelRefusedToClient: a client asking for the control
// channel is refused (permission denied) and stays connected, its other
// subscriptions untouched. (The refusal was a plain error, on which
// Centrifuge disconnects the client: it reconnected and asked again every
// second, dropping its other subscriptions each time.)
func TestReservedChannelRefusedToClient(t *testing.T) {
	assert.ErrorIs(t, ErrReservedChannel, centrifuge.ErrorPermissionDenied)
	s := redistest.StartStandalone(t)
	nd := startNode(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}})
	c := connect(t, nd, "u")
	others := c.subscribe(t, "room")
	c.startSubscribe(t, DefaultControlChannel)
	time.Sleep(2500 * time.Millisecond) // a client reconnects within about a second
	assert.NotContains(t, c.reconnectCodes(), uint32(centrifuge.DisconnectServerError.Code), "the connection was dropped")
	_, _, _, subscribed := others[0].events()
	assert.Equal(t, 1, subscribed, "the other subscription stayed")
}

// TestBadFramesDropped: messages that are not this adapter's frames, from
// a foreign publisher on the same Redis, are counted and dropped; the
// node keeps delivering, and the clients see none of them.
func TestBadFramesDropped(t *testing.T) {
	s := redistest.StartStandalone(t)
	cfg := Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}}
	nd := startNode(t, cfg)
	sub := connect(t, nd, "u").subscribe(t, "news")[0]

	foreign, err := sharded.New(sharded.Config{Addrs: []string{s.Addr()}})
	require.NoError(t, err)
	defer func() { require.NoError(t, foreign.Close()) }()
	ctx := context.Background()
	bad := [][]byte{
		nil,
		[]byte(`{"text":"not a frame"}`),
		{byte(kindPublication), 0x0a, 0xff}, // truncated protobuf
		encodeControl("", []byte("a control frame on a client channel")),
	}
	for _, p := range bad {
		require.NoError(t, foreign.Publish(ctx, "news", p))
	}
	// A client frame on the control channel is dropped too.
	join, err := encodeInfo(kindJoin, &centrifuge.ClientInfo{ClientID: "c"})
	require.NoError(t, err)
	require.NoError(t, foreign.Publish(ctx, DefaultControlChannel, join))

	_, err = nd.node.Publish("news", []byte("after the junk"))
	require.NoError(t, err)
	waitFor(t, func() bool { return sub.has("after the junk") },
		func() string { return fmt.Sprintf("got %q", sub.received()) })
	waitFor(t, func() bool { return nd.broker.Stats().BadFrames == uint64(len(bad)+1) },
		func() string { return fmt.Sprintf("BadFrames = %d, want %d", nd.broker.Stats().BadFrames, len(bad)+1) })
	assert.Equal(t, []string{"after the junk"}, sub.received())
}

// TestCallsAfterClose: once closed, the Broker refuses calls with
// shardcast.ErrClosed instead of hanging.
func TestCallsAfterClose(t *testing.T) {
	s := redistest.StartStandalone(t)
	nd := startNode(t, Config{Sharded: &sharded.Config{Addrs: []string{s.Addr()}}})
	require.NoError(t, nd.broker.Close(context.Background()))
	assert.ErrorIs(t, nd.broker.Subscribe("a"), shardcast.ErrClosed)
	_, err := nd.broker.Publish("a", nil, centrifuge.PublishOptions{})
	assert.ErrorIs(t, err, shardcast.ErrClosed)
	assert.ErrorIs(t, nd.broker.PublishControl([]byte("x"), "", ""), shardcast.ErrClosed)
}
