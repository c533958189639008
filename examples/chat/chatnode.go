package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"html/template"
	"log/slog"
	"net/http"
	"os"
	"strings"
	"time"
	"unicode"
	"unicode/utf8"

	"github.com/centrifugal/centrifuge"
)

// nodeConfig says what one chat node calls itself, which shardcast engine
// and Redis it shares with the other nodes, and where the browser client
// library is.
type nodeConfig struct {
	Name   string // shown on the page and in presence, e.g. "node-1"
	Redis  redisConfig
	Client string // path of the npm-installed centrifuge.js
	Logger *slog.Logger
}

// chatNode is one real-time server: a Centrifuge node whose publications
// travel between nodes, and whose rooms' history and presence live in
// Redis, all through one shardcast engine; and an HTTP handler serving the
// page and its WebSocket endpoint.
type chatNode struct {
	name    string
	node    *centrifuge.Node
	handler http.Handler
}

// Chat channels are "chat:" followed by a room name.
const roomPrefix = "chat:"

const (
	maxNameRunes = 32
	maxTextRunes = 2000
)

// Each room keeps its last messages in Redis, beside the room's channel, so
// that a page that reloads or loses its connection recovers what it missed.
const (
	historySize = 100
	historyTTL  = 30 * time.Minute
)

// newChatNode builds and runs a node. Close stops it.
func newChatNode(cfg nodeConfig) (_ *chatNode, err error) {
	if _, err := os.Stat(cfg.Client); err != nil {
		return nil, fmt.Errorf("browser client library missing (run `make chat-web`, which runs npm ci in examples/chat/web): %w", err)
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	logger := cfg.Logger.With("node", cfg.Name)
	node, err := centrifuge.New(centrifuge.Config{
		Name:     cfg.Name,
		LogLevel: centrifuge.LogLevelWarn,
		LogHandler: func(e centrifuge.LogEntry) {
			logger.Warn(e.Message, "fields", e.Fields, "error", e.Error)
		},
	})
	if err != nil {
		return nil, err
	}
	c := &chatNode{name: cfg.Name, node: node}
	defer func() {
		if err != nil {
			c.Close(context.Background())
		}
	}()

	if err := useShardcast(node, cfg.Redis, logger); err != nil {
		return nil, err // says "shardcast: …"
	}

	node.OnConnecting(c.connecting)
	node.OnConnect(c.connect)
	if err := node.Run(); err != nil {
		return nil, fmt.Errorf("run: %w", err)
	}

	page, err := pageHandler(cfg.Name)
	if err != nil {
		return nil, err
	}
	mux := http.NewServeMux()
	mux.Handle("GET /{$}", page)
	mux.Handle("GET /chat.js", staticFile("web/chat.js", "text/javascript"))
	mux.Handle("GET /chat.css", staticFile("web/chat.css", "text/css"))
	mux.HandleFunc("GET /centrifuge.js", func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/javascript")
		http.ServeFile(w, r, cfg.Client)
	})
	mux.HandleFunc("GET /favicon.ico", func(w http.ResponseWriter, _ *http.Request) { w.WriteHeader(http.StatusNoContent) })
	// The default origin check accepts only pages from this host: the page
	// connects to the node that served it.
	mux.Handle("/connection/websocket", centrifuge.NewWebsocketHandler(node, centrifuge.WebsocketConfig{}))
	c.handler = mux
	return c, nil
}

func (c *chatNode) ServeHTTP(w http.ResponseWriter, r *http.Request) { c.handler.ServeHTTP(w, r) }

// Close disconnects every client and stops the node, which closes its
// shardcast broker and with it the presence manager's connections.
func (c *chatNode) Close(ctx context.Context) error {
	return c.node.Shutdown(ctx)
}

// connectData is what the page sends when it connects.
type connectData struct {
	Name string `json:"name"`
}

// connecting authenticates trivially: whoever names themselves is that
// user. Their connection info carries the node they are connected to, so
// the presence list can show it.
func (c *chatNode) connecting(_ context.Context, e centrifuge.ConnectEvent) (centrifuge.ConnectReply, error) {
	var d connectData
	if err := json.Unmarshal(e.Data, &d); err != nil {
		return centrifuge.ConnectReply{}, centrifuge.DisconnectInvalidToken
	}
	name, ok := cleanName(d.Name)
	if !ok {
		return centrifuge.ConnectReply{}, centrifuge.DisconnectInvalidToken
	}
	// Marshalling a map of strings cannot fail.
	info, _ := json.Marshal(map[string]string{"node": c.name})
	return centrifuge.ConnectReply{
		Credentials: &centrifuge.Credentials{UserID: name, Info: info},
	}, nil
}

// connect sets what a connected client may do: subscribe to chat rooms
// (joining their presence), publish text into a room it is in, ask who is
// in a room it is in.
func (c *chatNode) connect(client *centrifuge.Client) {
	client.OnSubscribe(func(e centrifuge.SubscribeEvent, cb centrifuge.SubscribeCallback) {
		if !validRoom(e.Channel) {
			cb(centrifuge.SubscribeReply{}, centrifuge.ErrorUnknownChannel)
			return
		}
		cb(centrifuge.SubscribeReply{Options: centrifuge.SubscribeOptions{
			EmitPresence:   true,
			EmitJoinLeave:  true,
			PushJoinLeave:  true,
			EnableRecovery: true,
		}}, nil)
	})
	client.OnPublish(func(e centrifuge.PublishEvent, cb centrifuge.PublishCallback) {
		if !client.IsSubscribed(e.Channel) {
			cb(centrifuge.PublishReply{}, centrifuge.ErrorPermissionDenied)
			return
		}
		data, err := c.message(client.UserID(), e.Data)
		if err != nil {
			cb(centrifuge.PublishReply{}, centrifuge.ErrorBadRequest)
			return
		}
		// Published here rather than by Centrifuge after the callback so
		// that subscribers get the server's stamped message, not the
		// client's raw one.
		res, err := c.node.Publish(e.Channel, data, centrifuge.WithClientInfo(e.ClientInfo),
			centrifuge.WithHistory(historySize, historyTTL))
		cb(centrifuge.PublishReply{Result: &res}, err)
	})
	client.OnPresence(func(e centrifuge.PresenceEvent, cb centrifuge.PresenceCallback) {
		if !client.IsSubscribed(e.Channel) {
			cb(centrifuge.PresenceReply{}, centrifuge.ErrorPermissionDenied)
			return
		}
		cb(centrifuge.PresenceReply{}, nil)
	})
}

// chatMessage is what subscribers of a room receive for each message.
type chatMessage struct {
	User string    `json:"user"`
	Node string    `json:"node"` // the node the author is connected to
	Text string    `json:"text"`
	At   time.Time `json:"at"`
}

// message turns a client's publish data, {"text": "…"}, into the chat
// message the room receives.
func (c *chatNode) message(user string, data []byte) ([]byte, error) {
	var in struct {
		Text string `json:"text"`
	}
	if err := json.Unmarshal(data, &in); err != nil {
		return nil, err
	}
	text := strings.TrimSpace(in.Text)
	if text == "" || !utf8.ValidString(text) || utf8.RuneCountInString(text) > maxTextRunes {
		return nil, errors.New("text must be 1 to 2000 characters")
	}
	return json.Marshal(chatMessage{User: user, Node: c.name, Text: text, At: time.Now().UTC()})
}

// cleanName trims a user name and accepts it if it is 1 to 32 printable
// characters.
func cleanName(name string) (string, bool) {
	name = strings.TrimSpace(name)
	if name == "" || !utf8.ValidString(name) || utf8.RuneCountInString(name) > maxNameRunes {
		return "", false
	}
	for _, r := range name {
		if !unicode.IsPrint(r) {
			return "", false
		}
	}
	return name, true
}

// validRoom accepts "chat:" followed by 1 to 32 of a–z, 0–9, '-' and '_'.
func validRoom(channel string) bool {
	room, ok := strings.CutPrefix(channel, roomPrefix)
	if !ok || room == "" || len(room) > 32 {
		return false
	}
	for _, r := range room {
		if !(r >= 'a' && r <= 'z' || r >= '0' && r <= '9' || r == '-' || r == '_') {
			return false
		}
	}
	return true
}

// pageHandler serves index.html with the node's name filled in.
func pageHandler(nodeName string) (http.Handler, error) {
	tmpl, err := template.ParseFS(webFiles, "web/index.html")
	if err != nil {
		return nil, err
	}
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		if err := tmpl.Execute(w, struct{ Node string }{nodeName}); err != nil {
			http.Error(w, err.Error(), http.StatusInternalServerError)
		}
	}), nil
}

// staticFile serves one embedded file.
func staticFile(name, contentType string) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		b, err := webFiles.ReadFile(name)
		if err != nil {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", contentType)
		_, _ = w.Write(b)
	})
}
