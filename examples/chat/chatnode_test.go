package main

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/shardcast/shardcast/examples/localredis"
)

// TestPresenceAcrossNodes: on each engine, who is in a room is the same
// from every node, through shardcast's presence manager: node-2 lists
// alice, who joined on node-1, and node-1 lists bob, who joined on node-2,
// each with the node named in their connection info; a client that
// disconnects is gone from the list at once, not when its entry would
// expire.
func TestPresenceAcrossNodes(t *testing.T) {
	for _, engine := range engines {
		t.Run(engine, func(t *testing.T) {
			nodes := startChat(t, engine, 2, stubClient(t))
			const room = "chat:lobby"
			alice := connectTestClient(t, nodes[0].chat, "alice")
			alice.subscribe(t, room)
			waitPresent(t, nodes[1].chat, room, "alice (node-1)")

			bob := connectTestClient(t, nodes[1].chat, "bob")
			bob.subscribe(t, room)
			waitPresent(t, nodes[0].chat, room, "alice (node-1)", "bob (node-2)")
			waitPresent(t, nodes[1].chat, room, "alice (node-1)", "bob (node-2)")

			if err := alice.close(); err != nil {
				t.Fatal(err)
			}
			waitPresent(t, nodes[1].chat, room, "bob (node-2)")
		})
	}
}

// waitPresent waits until c lists exactly want, as "user (node)" sorted,
// in the presence of channel.
func waitPresent(t *testing.T, c *chatNode, channel string, want ...string) {
	t.Helper()
	var got []string
	err := localredis.WaitUntil(t.Context(), func(context.Context) error {
		res, err := c.node.Presence(channel)
		if err != nil {
			return err
		}
		got = got[:0]
		for _, info := range res.Presence {
			var conn struct{ Node string }
			if err := json.Unmarshal(info.ConnInfo, &conn); err != nil {
				return fmt.Errorf("client %s: conn info %q: %w", info.ClientID, info.ConnInfo, err)
			}
			got = append(got, info.UserID+" ("+conn.Node+")")
		}
		slices.Sort(got)
		if !slices.Equal(got, want) {
			return fmt.Errorf("present: %q", got)
		}
		return nil
	})
	if err != nil {
		t.Fatalf("presence of %s on %s: %v; want %q", channel, c.name, err, want)
	}
}

// startChat starts a local Redis for engine and n chat nodes on it,
// serving client as the browser client library; the test's cleanup stops
// them all.
func startChat(t *testing.T, engine string, n int, client string) runningNodes {
	t.Helper()
	ctx, cancel := context.WithTimeout(t.Context(), 2*time.Minute)
	defer cancel()
	redis, stop, err := startLocalRedis(ctx, engine)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(stop)
	nodes, err := startNodes(redis, n, "127.0.0.1", 0, client, testLogger())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(nodes.stop)
	return nodes
}

// testLogger logs the nodes' warnings to the test's stderr.
func testLogger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))
}

// stubClient returns the path of a stand-in for the browser client
// library, for tests that load no page.
func stubClient(t *testing.T) string {
	path := filepath.Join(t.TempDir(), "centrifuge.js")
	if err := os.WriteFile(path, []byte("// not loaded\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	return path
}

func TestValidRoom(t *testing.T) {
	for channel, want := range map[string]bool{
		"chat:lobby":                      true,
		"chat:a-b_9":                      true,
		"chat:" + strings.Repeat("a", 32): true,
		"chat:" + strings.Repeat("a", 33): false,
		"chat:":                           false,
		"chat:Lobby":                      false,
		"chat:a b":                        false,
		"lobby":                           false,
		"news:lobby":                      false,
		"chat:lobby:x":                    false,
	} {
		if got := validRoom(channel); got != want {
			t.Errorf("validRoom(%q) = %v, want %v", channel, got, want)
		}
	}
}

func TestCleanName(t *testing.T) {
	for _, tc := range []struct {
		in, want string
		ok       bool
	}{
		{"alice", "alice", true},
		{"  Zoë  ", "Zoë", true},
		{strings.Repeat("é", 32), strings.Repeat("é", 32), true},
		{strings.Repeat("é", 33), "", false},
		{"", "", false},
		{"   ", "", false},
		{"a\x00b", "", false},
		{"a\nb", "", false},
		{"\xff", "", false},
	} {
		got, ok := cleanName(tc.in)
		if got != tc.want || ok != tc.ok {
			t.Errorf("cleanName(%q) = %q, %v; want %q, %v", tc.in, got, ok, tc.want, tc.ok)
		}
	}
}

func TestMessage(t *testing.T) {
	c := &chatNode{name: "node-7"}
	data, err := c.message("alice", []byte(`{"text":"  hi there "}`))
	if err != nil {
		t.Fatal(err)
	}
	var m chatMessage
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	if m.User != "alice" || m.Node != "node-7" || m.Text != "hi there" || m.At.IsZero() {
		t.Errorf("message = %+v", m)
	}
	for _, bad := range []string{
		`{"text":""}`,
		`{"text":"   "}`,
		`{"text":"` + strings.Repeat("x", maxTextRunes+1) + `"}`,
		`{"text":5}`,
		`not json`,
	} {
		if _, err := c.message("alice", []byte(bad)); err == nil {
			t.Errorf("message(%.40q) accepted", bad)
		}
	}
}
