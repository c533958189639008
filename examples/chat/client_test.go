package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/centrifugal/centrifuge"
	"github.com/centrifugal/protocol"
)

// testClient is a client of one chat node without a browser or a socket:
// it hands protocol commands to the node as its WebSocket handler does,
// so they go through the chat's own connect and subscribe handlers, and
// reads the JSON replies the node writes back.
type testClient struct {
	client  *centrifuge.Client
	close   centrifuge.ClientCloseFunc
	replies chan reply
	nextID  uint32
}

// reply is the part of a command's reply the tests read.
type reply struct {
	ID    uint32          `json:"id"`
	Error *protocol.Error `json:"error"`
}

// connectTestClient connects to c as the user name and returns the
// client. The test's cleanup closes it, before it stops nodes started
// earlier.
func connectTestClient(t *testing.T, c *chatNode, name string) *testClient {
	t.Helper()
	tr := &memTransport{replies: make(chan reply, 64)}
	client, closeFn, err := centrifuge.NewClient(context.Background(), c.node, tr)
	if err != nil {
		t.Fatal(err)
	}
	tc := &testClient{client: client, close: closeFn, replies: tr.replies}
	t.Cleanup(func() { _ = tc.close() })
	data, _ := json.Marshal(connectData{Name: name}) // a struct of a string always marshals
	if err := tc.do(&protocol.Command{Connect: &protocol.ConnectRequest{Data: data}}); err != nil {
		t.Fatalf("connect as %s: %v", name, err)
	}
	return tc
}

// subscribe subscribes to channel as the page does.
func (tc *testClient) subscribe(t *testing.T, channel string) {
	t.Helper()
	if err := tc.do(&protocol.Command{Subscribe: &protocol.SubscribeRequest{Channel: channel}}); err != nil {
		t.Fatalf("subscribe to %s: %v", channel, err)
	}
}

// do sends cmd and waits up to 30 s for its reply, skipping pushes and
// other replies.
func (tc *testClient) do(cmd *protocol.Command) error {
	tc.nextID++
	cmd.Id = tc.nextID
	tc.client.HandleCommand(cmd, 0)
	timeout := time.After(30 * time.Second)
	for {
		select {
		case r := <-tc.replies:
			if r.ID != cmd.Id {
				continue
			}
			if r.Error != nil {
				return fmt.Errorf("error %d: %s", r.Error.Code, r.Error.Message)
			}
			return nil
		case <-timeout:
			return fmt.Errorf("no reply to command %d in 30 s", cmd.Id)
		}
	}
}

// memTransport is a bidirectional JSON transport that keeps the replies
// with an ID (the answers to commands) and drops the rest.
type memTransport struct {
	mu      sync.Mutex
	closed  bool
	replies chan reply
}

var _ centrifuge.Transport = (*memTransport)(nil)

func (*memTransport) Name() string                                { return "memory" }
func (*memTransport) AcceptProtocol() string                      { return "" }
func (*memTransport) Protocol() centrifuge.ProtocolType           { return centrifuge.ProtocolTypeJSON }
func (*memTransport) ProtocolVersion() centrifuge.ProtocolVersion { return centrifuge.ProtocolVersion2 }
func (*memTransport) Unidirectional() bool                        { return false }
func (*memTransport) Emulation() bool                             { return false }
func (*memTransport) DisabledPushFlags() uint64                   { return centrifuge.PushFlagDisconnect }

// PingPongConfig turns pings off: nothing would answer them.
func (*memTransport) PingPongConfig() centrifuge.PingPongConfig {
	return centrifuge.PingPongConfig{PingInterval: -1, PongTimeout: -1}
}

func (t *memTransport) Write(data []byte) error { return t.WriteMany(data) }

func (t *memTransport) WriteMany(data ...[]byte) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.closed {
		return nil
	}
	for _, d := range data {
		// A write may hold several JSON replies, one a line.
		for line := range bytes.SplitSeq(d, []byte("\n")) {
			var r reply
			if json.Unmarshal(line, &r) != nil || r.ID == 0 {
				continue
			}
			select {
			case t.replies <- r:
			default: // nobody is waiting for this many replies
			}
		}
	}
	return nil
}

func (t *memTransport) Close(centrifuge.Disconnect) error {
	t.mu.Lock()
	defer t.mu.Unlock()
	t.closed = true
	return nil
}
