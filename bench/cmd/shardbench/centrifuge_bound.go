package main

import (
	"bytes"
	"errors"
	"sync"
	"time"

	"github.com/centrifugal/centrifuge"
)

// centBoundName is the zero-cost broker of the centrifuge scenario.
const centBoundName = "zero-cost"

// centBound is a broker that costs nothing: a node's Publish hands the
// publication straight to every node's handler, in the publishing
// goroutine, with no network, encoding or Redis. No broker can deliver
// more through the same nodes and clients, so its rate is the ceiling
// that Centrifuge's and centrifuge-go's own work (hub, WebSocket writers,
// the clients) sets for the scenario, and a broker's rate over it is the
// share of that ceiling it reaches. It is a measuring device, not a
// broker: it serves the nodes of one process and keeps no history. It
// runs on the client path only, where each publisher waits for its
// client's reply over WebSocket: on the server path nothing would pace
// the publishers, whose Node.Publish would return at once, and they
// would fill the clients' queues until Centrifuge disconnects them.
type centBound struct {
	mu       sync.RWMutex
	handlers []centrifuge.BrokerEventHandler
}

// errBoundHistory is the zero-cost broker's answer to anything of history.
var errBoundHistory = errors.New("the zero-cost broker keeps no history")

// node returns the Broker one node is given.
func (b *centBound) node() centrifuge.Broker { return centBoundNode{b} }

func (b *centBound) each(f func(centrifuge.BrokerEventHandler)) {
	b.mu.RLock()
	hs := b.handlers
	b.mu.RUnlock()
	for _, h := range hs {
		f(h)
	}
}

// centBoundNode is one node's side of a centBound.
type centBoundNode struct{ b *centBound }

func (n centBoundNode) RegisterBrokerEventHandler(h centrifuge.BrokerEventHandler) error {
	n.b.mu.Lock()
	n.b.handlers = append(n.b.handlers, h)
	n.b.mu.Unlock()
	return nil
}

func (centBoundNode) Subscribe(...string) error   { return nil }
func (centBoundNode) Unsubscribe(...string) error { return nil }

// Publish gives every node its own Publication, as a broker decoding a
// message on each node would, sharing one copy of the data.
func (n centBoundNode) Publish(ch string, data []byte, opts centrifuge.PublishOptions) (centrifuge.PublishResult, error) {
	if opts.HistorySize > 0 || opts.IdempotencyKey != "" {
		return centrifuge.PublishResult{}, errBoundHistory
	}
	data = bytes.Clone(data)
	now := time.Now().UnixMilli()
	n.b.each(func(h centrifuge.BrokerEventHandler) {
		pub := &centrifuge.Publication{Data: data, Info: opts.ClientInfo, Tags: opts.Tags, Time: now}
		_ = h.HandlePublication(ch, pub, centrifuge.StreamPosition{}, false, nil)
	})
	return centrifuge.PublishResult{}, nil
}

func (n centBoundNode) PublishJoin(ch string, info *centrifuge.ClientInfo) error {
	n.b.each(func(h centrifuge.BrokerEventHandler) { _ = h.HandleJoin(ch, info) })
	return nil
}

func (n centBoundNode) PublishLeave(ch string, info *centrifuge.ClientInfo) error {
	n.b.each(func(h centrifuge.BrokerEventHandler) { _ = h.HandleLeave(ch, info) })
	return nil
}

func (centBoundNode) History(string, centrifuge.HistoryOptions) ([]*centrifuge.Publication, centrifuge.StreamPosition, error) {
	return nil, centrifuge.StreamPosition{}, errBoundHistory
}

func (centBoundNode) RemoveHistory(string) error { return errBoundHistory }
