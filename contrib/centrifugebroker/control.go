package centrifugebroker

import (
	"fmt"

	"github.com/centrifugal/centrifuge"
)

// RegisterControlEventHandler is called by node.Run before
// RegisterBrokerEventHandler: it subscribes the node to the control
// channel (waiting up to Config.CallTimeout) and hands every control
// message meant for this node to h. An error fails node.Run.
func (b *Broker) RegisterControlEventHandler(h centrifuge.ControlEventHandler) error {
	b.controls.Store(&h)
	ctx, cancel := b.callCtx()
	defer cancel()
	if err := b.engine.Subscribe(ctx, b.control); err != nil {
		return fmt.Errorf("centrifugebroker: subscribe control channel %q: %w", b.control, err)
	}
	return nil
}

// PublishControl sends a control command to the node with ID nodeID, or
// to every node if nodeID is empty. Every node subscribes to the one
// control channel and drops commands meant for another node; Centrifuge
// itself ignores the commands a node sent. shardKey is unused, as in
// Centrifuge's own brokers.
func (b *Broker) PublishControl(data []byte, nodeID, _ string) error {
	return b.publish(b.control, encodeControl(nodeID, data))
}
