package brokertest

import (
	"strings"
	"sync"

	"github.com/shardcast/shardcast"
)

// collector is a Handler that keeps a copy of every delivered message, per
// channel, in delivery order.
type collector struct {
	mu   sync.Mutex
	msgs map[string][]shardcast.Message
}

func newCollector() *collector { return &collector{msgs: make(map[string][]shardcast.Message)} }

func (c *collector) handle(m shardcast.Message) {
	// Payload may share memory the engine reuses; Channel may pin it.
	m.Payload = append([]byte(nil), m.Payload...)
	m.Channel = strings.Clone(m.Channel)
	c.mu.Lock()
	c.msgs[m.Channel] = append(c.msgs[m.Channel], m)
	c.mu.Unlock()
}

// messages returns a copy of channel's messages.
func (c *collector) messages(channel string) []shardcast.Message {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]shardcast.Message(nil), c.msgs[channel]...)
}

// payloads returns channel's payloads as strings, in delivery order.
func (c *collector) payloads(channel string) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	out := make([]string, len(c.msgs[channel]))
	for i, m := range c.msgs[channel] {
		out[i] = string(m.Payload)
	}
	return out
}

// has reports whether channel received payload.
func (c *collector) has(channel, payload string) bool {
	c.mu.Lock()
	defer c.mu.Unlock()
	for _, m := range c.msgs[channel] {
		if string(m.Payload) == payload {
			return true
		}
	}
	return false
}

// lacking returns the channels that have not received payload.
func (c *collector) lacking(channels []string, payload string) []string {
	var out []string
	for _, ch := range channels {
		if !c.has(ch, payload) {
			out = append(out, ch)
		}
	}
	return out
}

// short returns the channels with fewer than n messages.
func (c *collector) short(channels []string, n int) []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	for _, ch := range channels {
		if len(c.msgs[ch]) < n {
			out = append(out, ch)
		}
	}
	return out
}
